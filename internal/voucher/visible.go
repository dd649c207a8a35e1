package voucher

import (
	"context"

	"entgo.io/contrib/entgql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/predicate"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/paging"
)

// VisibleQuery returns a query over exactly the vouchers the caller may
// see, those Get returns: as payee, as payer, or as an ACTIVE member of
// their business, payee and payer bound by membership as in rolesIn. The GraphQL vouchers connection paginates it.
func (s *Service) VisibleQuery(ctx context.Context) (*ent.VoucherQuery, error) {
	p, err := operation.Caller(ctx, operation.QueryVouchers)
	if err != nil {
		return nil, err
	}
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

// Connection pages through the vouchers the caller may see (the same rule
// as Query and Get), newest first unless orderBy says otherwise, paged by
// the graph's one rule (internal/paging).
func (s *Service) Connection(ctx context.Context, after *ent.Cursor, first *int, before *ent.Cursor, last *int,
	orderBy *ent.VoucherOrder, where *ent.VoucherWhereInput) (*ent.VoucherConnection, error) {
	first, err := paging.Args(first, last)
	if err != nil {
		return nil, err
	}
	q, err := s.VisibleQuery(ctx)
	if err != nil {
		return nil, err
	}
	if orderBy == nil {
		orderBy = &ent.VoucherOrder{Direction: entgql.OrderDirectionDesc, Field: ent.VoucherOrderFieldCreatedAt}
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithVoucherOrder(orderBy), ent.WithVoucherFilter(where.Filter))
	if err != nil {
		return nil, apperr.From(err)
	}
	return conn, nil
}
