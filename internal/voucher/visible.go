package voucher

import (
	"context"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/predicate"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
)

// VisibleQuery returns a query over exactly the vouchers the caller may
// see, those Get returns: as payee, as payer, or as an ACTIVE member of
// their business. The GraphQL vouchers connection paginates it.
func (s *Service) VisibleQuery(ctx context.Context) (*ent.VoucherQuery, error) {
	p, err := auth.RequireAny(ctx)
	if err != nil {
		return nil, err
	}
	who := []predicate.Voucher{entvoucher.PayeeID(p.ID), entvoucher.PayerID(p.ID)}
	if p.Kind == auth.KindUser {
		biz, err := business.ActiveMemberBusinessIDs(ctx, s.db.Client, p.ID)
		if err != nil {
			return nil, err
		}
		if len(biz) > 0 {
			who = append(who, entvoucher.BusinessIDIn(biz...))
		}
	}
	return s.db.Voucher.Query().Where(entvoucher.Or(who...)), nil
}
