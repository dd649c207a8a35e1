package voucher

import (
	"context"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
)

// Op names a voucher operation that acts on an existing voucher.
type Op string

// Operations on an existing voucher.
const (
	OpRedeem      Op = "redeem"
	OpNegotiate   Op = "negotiate"
	OpResolve     Op = "resolve"
	OpDiscard     Op = "discard"
	OpInteropInit Op = "interop-init"
)

// operation is op's entry in the operations table, whose guard the service
// applies (operation.Caller).
func (op Op) operation() *operation.Op {
	switch op {
	case OpRedeem:
		return operation.RedeemVoucher
	case OpNegotiate:
		return operation.NegotiateVoucher
	case OpResolve:
		return operation.ResolveVoucher
	case OpDiscard:
		return operation.DiscardVoucher
	case OpInteropInit:
		return operation.InteropInit
	}
	// An Op nobody declared gets the strictest guard.
	return strictest
}

var strictest = &operation.Op{Name: "unknown voucher operation", Guard: auth.GuardUser}

// rolesFor is who may perform op (docs/vouchers.md, "Who may do what"); anyone
// else is told the voucher does not exist.
func rolesFor(op Op) role {
	switch op {
	case OpRedeem:
		return rolePayee
	case OpDiscard:
		return rolePayee | rolePayer
	default: // negotiate, resolve, interop-init
		return rolePayer
	}
}

// reject answers a request whose body failed its own checks: a caller who
// may not act on the voucher still learns only that it does not exist.
func (s *Service) reject(ctx context.Context, p *auth.Principal, op Op, id string, bodyErr error) error {
	v, err := s.load(ctx, s.db.Prepared, id, false)
	if err != nil {
		return err
	}
	r, err := rolesIn(ctx, s.db.Client, p, v)
	if err != nil {
		return err
	}
	if r&rolesFor(op) == 0 {
		return errNotFound
	}
	return bodyErr
}

// businessActiveFor refuses redeem and negotiate of an INACTIVE business's
// voucher (business_inactive); resolve and discard stay allowed, since the
// payer may have paid (docs/hardening.md).
func businessActiveFor(ctx context.Context, c *ent.Client, op Op, v *ent.Voucher) error {
	if v.BusinessID == nil || (op != OpRedeem && op != OpNegotiate) {
		return nil
	}
	b, err := c.Business.Get(ctx, *v.BusinessID)
	if err != nil {
		return apperr.InternalError(err)
	}
	return business.RequireActive(b)
}

// Reject is for a door that could not decode a request body for op on
// voucher id: it returns the error the caller should see, which is
// not_found when the caller may not act on the voucher (visibility comes
// before the body), and bodyErr otherwise.
func (s *Service) Reject(ctx context.Context, op Op, id string, bodyErr error) error {
	p, err := operation.Caller(ctx, op.operation())
	if err != nil {
		return err
	}
	return s.reject(ctx, p, op, id, bodyErr)
}
