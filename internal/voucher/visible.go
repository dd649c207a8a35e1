package voucher

import (
	"context"

	"entgo.io/ent/dialect/sql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/predicate"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
)

// Filter narrows the vouchers a caller lists. Empty strings mean no
// filter. Status is the read model's: an expired voucher counts as
// DISCARDED before the sweeper records it.
type Filter struct {
	Code      string
	SessionID string
	Status    string
}

// Check adds f's faults to v. List checks f itself; a door that gathers
// its own faults (REST's limit and offset) calls Check first, so one
// answer names them all.
func (f Filter) Check(v *apperr.Validator) {
	if f.Code != "" {
		v.Check(len(f.Code) == CodeLength && digitsRe.MatchString(f.Code), "code", "must be 6 digits")
	}
	if f.Status != "" {
		v.Check(entvoucher.StatusValidator(entvoucher.Status(f.Status)) == nil, "status", "must be RESERVED, REDEEMED, RESOLVED or DISCARDED")
	}
}

// NewestFirst is the vouchers' order: newest first, ties by id. REST
// lists in it; the GraphQL connection's default orderBy is the same.
var NewestFirst = []entvoucher.OrderOption{entvoucher.ByCreatedAt(sql.OrderDesc()), entvoucher.ByID(sql.OrderDesc())}

// List is the one list of vouchers: a query over exactly the vouchers the
// caller may see, those Get returns (as payee, as payer, or as an ACTIVE
// member of their business, payee and payer bound by membership as in
// rolesIn), narrowed by f. It is not ordered or paged: each door does that
// by its own rule (REST: NewestFirst and limit/offset; GraphQL: its
// connection arguments).
func (s *Service) List(ctx context.Context, f Filter) (*ent.VoucherQuery, error) {
	p, err := operation.Caller(ctx, operation.QueryVouchers)
	if err != nil {
		return nil, err
	}
	var v apperr.Validator
	f.Check(&v)
	if err := v.Err(); err != nil {
		return nil, err
	}
	q, err := s.visible(ctx, p)
	if err != nil {
		return nil, err
	}
	if f.Code != "" {
		q = q.Where(entvoucher.Code(f.Code))
	}
	if f.SessionID != "" {
		q = q.Where(entvoucher.SessionID(f.SessionID))
	}
	if f.Status != "" {
		q = q.Where(s.statusIs(entvoucher.Status(f.Status)))
	}
	return q, nil
}

// visible is the query over every voucher p may see.
func (s *Service) visible(ctx context.Context, p *auth.Principal) (*ent.VoucherQuery, error) {
	if p.IsAPIKey() {
		// A business's key sees its business's vouchers, and nothing else.
		return s.db.Voucher.Query().Where(entvoucher.BusinessID(p.BusinessID)), nil
	}
	who := []predicate.Voucher{entvoucher.PayeeID(p.ID), entvoucher.PayerID(p.ID)}
	if p.Kind == auth.KindUser {
		// Roles bound by membership (rolesIn): the payee of a business
		// voucher sees it as an ACTIVE member; a payer whose membership
		// in the business is INACTIVE does not see its vouchers.
		active, inactive, err := business.MemberBusinessIDs(ctx, s.db.Client, p.ID)
		if err != nil {
			return nil, err
		}
		payer := entvoucher.PayerID(p.ID)
		if len(inactive) > 0 {
			payer = entvoucher.And(payer, entvoucher.Or(entvoucher.BusinessIDIsNil(), entvoucher.BusinessIDNotIn(inactive...)))
		}
		who = []predicate.Voucher{entvoucher.And(entvoucher.PayeeID(p.ID), entvoucher.BusinessIDIsNil()), payer}
		if len(active) > 0 {
			who = append(who, entvoucher.BusinessIDIn(active...))
		}
	}
	return s.db.Voucher.Query().Where(entvoucher.Or(who...)), nil
}
