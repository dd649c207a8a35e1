package voucher_test

import (
	"context"
	"regexp"
	"sync"
	"testing"

	"github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

var sixDigits = regexp.MustCompile(`^[0-9]{6}$`)

func TestReserve(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()

		v, err := f.svc.Reserve(as(p.payee), voucher.ReserveInput{Code: p.session.Code})
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != entvoucher.StatusRESERVED || !sixDigits.MatchString(v.Code) || v.Version != 1 ||
			v.PayerID != p.payer.ID || v.PayeeID != p.payee.ID || v.SessionID != p.session.ID || v.Type != nil ||
			!ids.HasPrefix(v.ID, ids.Voucher) || v.BusinessID != nil {
			t.Fatalf("reserved %+v", v)
		}
		if got := v.ExpiresAt.Sub(f.clock.Now()); got != ttl {
			t.Fatalf("lifetime %v", got)
		}
		rv := view.OfVoucher(v)
		if rv.Status != "RESERVED" || rv.Type != nil || rv.ExpectedPayment != nil || rv.Extras != nil {
			t.Fatalf("view %+v", rv)
		}

		// A registered user may reserve too (case-insensitive code); it is the payee.
		u := f.user()
		v2, err := f.svc.Reserve(as(u), voucher.ReserveInput{Code: lower(p.session.Code)})
		if err != nil {
			t.Fatal(err)
		}
		if v2.PayeeID != u.ID || v2.PayerID != p.payer.ID || v2.Code == v.Code {
			t.Fatalf("user reserve %+v (first code %s)", v2, v.Code)
		}

		closed, closedPayee := f.session(device())
		if _, err := f.sessions.Close(as(&auth.Principal{Kind: auth.KindDevice, ID: closed.OwnerID}), closed.ID); err != nil {
			t.Fatal(err)
		}
		other, _ := f.session(device())
		empty := ""
		cases := []struct {
			name string
			who  *auth.Principal
			in   voucher.ReserveInput
			code apperr.Code
		}{
			{"anonymous", nil, voucher.ReserveInput{Code: p.session.Code}, apperr.Unauthorized},
			{"missing code", u, voucher.ReserveInput{}, apperr.ValidationFailed},
			{"empty businessId", u, voucher.ReserveInput{Code: p.session.Code, BusinessID: &empty}, apperr.ValidationFailed},
			{"malformed code", u, voucher.ReserveInput{Code: "ABC"}, apperr.InvalidCode},
			{"code outside the alphabet", u, voucher.ReserveInput{Code: "ABCDEU"}, apperr.InvalidCode},
			{"never existed", u, voucher.ReserveInput{Code: "ZZZZZZ"}, apperr.NotFound},
			{"closed context", u, voucher.ReserveInput{Code: closed.Code}, apperr.InvalidCode},
			{"resource on another context", p.payee, voucher.ReserveInput{Code: other.Code}, apperr.NotFound},
			{"resource on its closed context", closedPayee, voucher.ReserveInput{Code: closed.Code}, apperr.InvalidCode},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				if c.who != nil {
					ctx = as(c.who)
				}
				_, err := f.svc.Reserve(ctx, c.in)
				wantCode(t, err, c.code)
			})
		}

		// An expired context's code no longer reserves.
		late := f.parties()
		f.clock.Add(11 * 60e9)
		_, err = f.svc.Reserve(as(late.payee), voucher.ReserveInput{Code: late.session.Code})
		wantCode(t, err, apperr.InvalidCode)
	})
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func TestReserveForBusiness(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)
		closedShop := f.business(owner, business.StatusINACTIVE)
		formerMember := f.user()
		f.member(shop, formerMember, businessuser.StatusINACTIVE)
		stranger := f.user()

		in := func(id string) voucher.ReserveInput {
			return voucher.ReserveInput{Code: p.session.Code, BusinessID: &id}
		}
		for _, c := range []struct {
			name string
			who  *auth.Principal
			biz  string
			code apperr.Code
		}{
			{"resource token", p.payee, shop.ID, apperr.NotFound},
			{"device token", p.payer, shop.ID, apperr.NotFound},
			{"non-member", stranger, shop.ID, apperr.NotFound},
			{"inactive member", formerMember, shop.ID, apperr.NotFound},
			{"unknown business", owner, ids.New(ids.Business), apperr.NotFound},
			{"inactive business", owner, closedShop.ID, apperr.BusinessInactive},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.svc.Reserve(as(c.who), in(c.biz))
				wantCode(t, err, c.code)
			})
		}
		if n := len(f.sink.all()); n != 0 {
			t.Fatalf("refused reservations reached the event sink %d times", n)
		}

		v, err := f.svc.Reserve(as(owner), in(shop.ID))
		if err != nil {
			t.Fatal(err)
		}
		if v.BusinessID == nil || *v.BusinessID != shop.ID || v.PayeeID != owner.ID {
			t.Fatalf("business voucher %+v", v)
		}
		ch := f.sink.all()
		if len(ch) != 1 || ch[0].prev != nil || ch[0].next.ID != v.ID || ch[0].next.Status != entvoucher.StatusRESERVED {
			t.Fatalf("sink got %+v", ch)
		}
		if got := view.OfVoucher(v).BusinessID; got == nil || *got != shop.ID {
			t.Fatalf("view businessId %v", got)
		}
	})
}

// Voucher codes are unique among live vouchers only: a code held by a live
// voucher is drawn again, one held by a voucher that expired but was not
// swept yet is released and reused.
func TestReserveCodeCollisions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		var mu sync.Mutex
		draws := []string{"111111", "111111", "222222", "111111"}
		f.svc, _ = voucher.NewService(db, voucher.Options{
			Finance: f.fin, Sessions: f.sessions, TTL: ttl, Now: f.clock.Now,
			NewCode: func() (string, error) {
				mu.Lock()
				defer mu.Unlock()
				c := draws[0]
				draws = draws[1:]
				return c, nil
			},
		})
		p := f.parties()
		first := f.reserve(p)
		second := f.reserve(p) // draws 111111 (live), then 222222
		if first.Code != "111111" || second.Code != "222222" {
			t.Fatalf("codes %s, %s", first.Code, second.Code)
		}
		f.clock.Add(ttl) // both expire; neither is swept
		q := f.parties()
		third := f.reserve(q)
		if third.Code != "111111" {
			t.Fatalf("expired code not reused: %s", third.Code)
		}
		// The expired holder still reads as expired and keeps its code.
		got, err := f.svc.Get(as(p.payee), first.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != entvoucher.StatusDISCARDED || got.Code != "111111" || *got.DiscardReason != voucher.ReasonExpired {
			t.Fatalf("expired holder %+v", got)
		}
	})
}
