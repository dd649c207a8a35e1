package voucher_test

import (
	"context"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// A subscription names exactly one thing to follow.
func TestWatchInputTakesExactlyOneFilter(t *testing.T) {
	id := "x"
	for _, in := range []voucher.WatchInput{{}, {ID: &id, SessionID: &id}, {ID: &id, BusinessID: &id}, {ID: &id, SessionID: &id, BusinessID: &id}} {
		_, err := in.Validate()
		wantField(t, err, "id")
	}
	for in, want := range map[*voucher.WatchInput]pubsub.Kind{
		{ID: &id}: pubsub.ByVoucher, {SessionID: &id}: pubsub.BySession, {BusinessID: &id}: pubsub.ByBusiness,
	} {
		w, err := in.Validate()
		if err != nil || w.Kind != want || w.Key != id {
			t.Fatalf("%+v: %+v, %v", in, w, err)
		}
	}
}

// Who may follow what: a voucher whoever may see it, a session its payer,
// a business its ACTIVE members; everyone else gets not_found, and a
// membership made INACTIVE stops it at the next check.
func TestWatchAndMayFollow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		p := f.parties()
		v := f.reserve(p)
		owner, member, outsider := f.user(), f.user(), f.user()
		shop := f.business(owner, business.StatusACTIVE)
		f.member(shop, member, businessuser.StatusACTIVE)
		closed := f.business(owner, business.StatusINACTIVE)
		f.member(closed, member, businessuser.StatusACTIVE)

		byVoucher := voucher.Watch{Kind: pubsub.ByVoucher, Key: v.ID}
		bySession := voucher.Watch{Kind: pubsub.BySession, Key: p.session.ID}
		byShop := voucher.Watch{Kind: pubsub.ByBusiness, Key: shop.ID}
		cases := []struct {
			name string
			ctx  context.Context
			w    voucher.Watch
			want apperr.Code // "" allowed
		}{
			{"payer follows the voucher", p.as("payer"), byVoucher, ""},
			{"payee follows the voucher", p.as("payee"), byVoucher, ""},
			{"stranger does not", p.as("stranger"), byVoucher, apperr.NotFound},
			{"payer follows the session", p.as("payer"), bySession, ""},
			{"payee does not follow the session", p.as("payee"), bySession, apperr.Forbidden},
			{"member follows the business", as(member), byShop, ""},
			{"member follows an inactive business", as(member), voucher.Watch{Kind: pubsub.ByBusiness, Key: closed.ID}, ""},
			{"outsider does not", as(outsider), byShop, apperr.NotFound},
			{"a device does not", p.as("payer"), byShop, apperr.Forbidden},
			{"no caller", ctx, byShop, apperr.Unauthorized},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				err := f.svc.MayFollow(c.ctx, c.w)
				_, werr := f.svc.Watch(c.ctx, c.w)
				if c.want == "" {
					if err != nil || werr != nil {
						t.Fatalf("MayFollow %v, Watch %v", err, werr)
					}
					return
				}
				wantCode(t, err, c.want)
				wantCode(t, werr, c.want)
			})
		}

		// Watching one voucher starts from its current state.
		got, err := f.svc.Watch(p.as("payee"), byVoucher)
		if err != nil || got == nil || got.ID != v.ID || got.Version != v.Version {
			t.Fatalf("initial %+v, %v", got, err)
		}
		if got, err := f.svc.Watch(as(member), byShop); err != nil || got != nil {
			t.Fatalf("a business watch has no initial voucher: %+v, %v", got, err)
		}
		// An expired token follows nothing.
		expired := *p.payee
		expired.ExpiresAt = time.Now().Add(-time.Second)
		_, err = f.svc.Watch(as(&expired), byVoucher)
		wantCode(t, err, apperr.Unauthorized)

		// The membership made INACTIVE: the re-check refuses.
		if _, err := db.BusinessUser.Update().
			Where(businessuser.BusinessID(shop.ID), businessuser.UserID(member.ID)).
			SetStatus(businessuser.StatusINACTIVE).Save(ctx); err != nil {
			t.Fatal(err)
		}
		wantCode(t, f.svc.MayFollow(as(member), byShop), apperr.NotFound)
	})
}
