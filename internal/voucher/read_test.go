package voucher_test

import (
	"context"
	"testing"

	"github.com/voucherd/voucherd/ent"
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

func TestVisibility(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		member := f.user()
		former := f.user()
		outsider := f.user()
		shop := f.business(owner, business.StatusACTIVE)
		f.member(shop, member, businessuser.StatusACTIVE)
		f.member(shop, former, businessuser.StatusINACTIVE)
		other := f.business(outsider, business.StatusACTIVE)
		_ = other

		plain := f.reserve(p)
		deposit, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		stranger := device()
		for _, c := range []struct {
			name string
			who  *auth.Principal
			id   string
			see  bool
		}{
			{"payee", p.payee, plain.ID, true},
			{"payer", p.payer, plain.ID, true},
			{"stranger", stranger, plain.ID, false},
			{"business owner on a plain voucher", owner, plain.ID, false},
			{"reserving owner", owner, deposit.ID, true},
			{"active member", member, deposit.ID, true},
			{"inactive member", former, deposit.ID, false},
			{"member of another business", outsider, deposit.ID, false},
			{"payer of a deposit", p.payer, deposit.ID, true},
			{"resource of the context", p.payee, deposit.ID, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				got, err := f.svc.Get(as(c.who), c.id)
				if c.see {
					if err != nil || got.ID != c.id {
						t.Fatalf("get: %v", err)
					}
				} else {
					wantCode(t, err, apperr.NotFound)
				}
				v, _ := db.Voucher.Get(context.Background(), c.id)
				ok, err := f.svc.Visible(context.Background(), c.who, v)
				if err != nil || ok != c.see {
					t.Fatalf("Visible = %v, %v", ok, err)
				}
			})
		}
		_, err = f.svc.Get(context.Background(), plain.ID)
		wantCode(t, err, apperr.Unauthorized)
		_, err = f.svc.Get(as(p.payer), ids.New(ids.Voucher))
		wantCode(t, err, apperr.NotFound)

		// An INACTIVE business keeps its reads.
		if _, err := db.Business.UpdateOneID(shop.ID).SetStatus(business.StatusINACTIVE).Save(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Get(as(member), deposit.ID); err != nil {
			t.Fatalf("member of an inactive business: %v", err)
		}
	})
}

func TestQuery(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)
		member := f.user()
		f.member(shop, member, businessuser.StatusACTIVE)

		a := f.reserve(p)
		f.clock.Add(1e6)
		b := f.redeemed(p, "1")
		f.clock.Add(1e6)
		deposit, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		q := f.parties()
		elsewhere := f.reserve(q)

		list := func(who *auth.Principal, in voucher.Filter, page ...int) []string {
			t.Helper()
			vs, err := query(as(who), f.svc, in, page...)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]string, len(vs))
			for i, v := range vs {
				out[i] = v.ID
			}
			return out
		}
		same := func(got []string, want ...string) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("got %v, want %v", got, want)
				}
			}
		}
		same(list(p.payer, voucher.Filter{}), deposit.ID, b.ID, a.ID) // newest first
		same(list(p.payer, voucher.Filter{Code: b.Code}), b.ID)
		same(list(p.payer, voucher.Filter{Code: elsewhere.Code}))
		same(list(q.payer, voucher.Filter{Code: elsewhere.Code}), elsewhere.ID)
		same(list(p.payer, voucher.Filter{Status: "REDEEMED"}), b.ID)
		same(list(p.payer, voucher.Filter{SessionID: q.session.ID}))
		same(list(p.payer, voucher.Filter{}, 1, 1), b.ID)
		same(list(p.payer, voucher.Filter{}, 20, 2), a.ID)
		same(list(p.payee, voucher.Filter{}), b.ID, a.ID)
		same(list(member, voucher.Filter{}), deposit.ID)
		same(list(f.user(), voucher.Filter{}))

		f.clock.Add(ttl)
		// Expired vouchers count as DISCARDED before the sweeper runs.
		same(list(p.payer, voucher.Filter{Status: "REDEEMED"}))
		same(list(p.payer, voucher.Filter{Status: "DISCARDED"}), deposit.ID, b.ID, a.ID)
		vs, err := query(as(p.payer), f.svc, voucher.Filter{Code: a.Code})
		if err != nil || len(vs) != 1 || vs[0].Status != entvoucher.StatusDISCARDED || *vs[0].DiscardReason != voucher.ReasonExpired {
			t.Fatalf("expired in a query: %v %+v", err, vs)
		}

		for _, c := range []struct {
			name  string
			in    voucher.Filter
			field string
		}{
			{"short code", voucher.Filter{Code: "123"}, "code"},
			{"letters in code", voucher.Filter{Code: "12345a"}, "code"},
			{"status", voucher.Filter{Status: "EXPIRED"}, "status"},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.svc.List(as(p.payer), c.in)
				wantField(t, err, c.field)
				var v apperr.Validator
				c.in.Check(&v)
				wantField(t, v.Err(), c.field)
			})
		}
		_, err = f.svc.List(context.Background(), voucher.Filter{})
		wantCode(t, err, apperr.Unauthorized)
	})
}

// query reads the vouchers List gives the caller as REST does: newest
// first, page[0] rows (default 20) after page[1].
func query(ctx context.Context, svc *voucher.Service, f voucher.Filter, page ...int) ([]*ent.Voucher, error) {
	q, err := svc.List(ctx, f)
	if err != nil {
		return nil, err
	}
	limit, offset := 20, 0
	if len(page) == 2 {
		limit, offset = page[0], page[1]
	}
	return q.Order(voucher.NewestFirst...).Limit(limit).Offset(offset).All(ctx)
}

func TestExpiryAndSweep(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)

		reserved := f.reserve(p)
		redeemed := f.redeemed(p, "1")
		resolved := f.redeemed(p, "1")
		if _, err := f.svc.Resolve(as(p.payer), resolved.ID, receipts(resolved.ExpectedPayment.ID)); err != nil {
			t.Fatal(err)
		}
		deposit, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		if deposit, err = f.svc.Redeem(as(owner), deposit.ID, simpleBody("2")); err != nil {
			t.Fatal(err)
		}
		fresh := f.reserve(p)
		_ = fresh
		f.clock.Add(ttl - 1)
		if n, err := f.svc.SweepExpired(context.Background()); err != nil || n != 0 {
			t.Fatalf("early sweep: %d, %v", n, err)
		}
		f.clock.Add(1)

		// Reads show the expiry at once; storage still has the live row.
		got, err := f.svc.Get(as(p.payee), reserved.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != entvoucher.StatusDISCARDED || *got.DiscardReason != voucher.ReasonExpired || got.Version != 1 {
			t.Fatalf("expired read %+v", got)
		}
		if v := view.OfVoucher(got); v.Status != "DISCARDED" || *v.DiscardReason != "expired" {
			t.Fatalf("expired view %+v", v)
		}
		var stored string
		if err := db.SQL.QueryRow(db.Rebind("SELECT status FROM vouchers WHERE id = ?"), reserved.ID).Scan(&stored); err != nil || stored != "RESERVED" {
			t.Fatalf("stored status %q, %v", stored, err)
		}
		if r, _ := f.svc.Get(as(p.payer), resolved.ID); r.Status != entvoucher.StatusRESOLVED {
			t.Fatalf("a resolved voucher never expires: %s", r.Status)
		}

		pubBefore := len(f.pub.all())
		sinkBefore := len(f.sink.all())
		n, err := f.svc.SweepExpired(context.Background())
		if err != nil || n != 4 {
			t.Fatalf("sweep: %d, %v", n, err)
		}
		for _, v := range []struct {
			id      string
			version int
		}{{reserved.ID, 2}, {redeemed.ID, 3}, {deposit.ID, 3}} {
			row, err := db.Voucher.Get(context.Background(), v.id)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != entvoucher.StatusDISCARDED || *row.DiscardReason != voucher.ReasonExpired || row.Version != v.version || row.LiveCode != nil {
				t.Fatalf("swept %+v", row)
			}
		}
		if n, err := f.svc.SweepExpired(context.Background()); err != nil || n != 0 {
			t.Fatalf("second sweep: %d, %v", n, err)
		}
		ch := f.sink.all()[sinkBefore:]
		if len(ch) != 1 || ch[0].prev.Status != entvoucher.StatusREDEEMED || ch[0].next.Status != entvoucher.StatusDISCARDED ||
			ch[0].prev.ID != deposit.ID || ch[0].prev.Version+1 != ch[0].next.Version || ch[0].prev.DiscardReason != nil {
			t.Fatalf("sink got %+v", ch)
		}
		if !db.IsPostgres() {
			if got := len(f.pub.all()) - pubBefore; got != 4 {
				t.Fatalf("%d notifications for 4 swept vouchers", got)
			}
		}
		// A transition on a swept voucher is expired, not discarded.
		_, err = f.svc.Discard(as(p.payee), reserved.ID)
		wantCode(t, err, apperr.Expired)
	})
}

func TestInteropInit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		v := f.redeemed(p, "1")
		reserved := f.reserve(p)
		q := f.parties()
		foreign := f.redeemed(q, "1")
		mine := f.redeemed(p, "1")

		sig := "0xsig"
		idx := 0
		in := voucher.InteropInitInput{ID: "sub-1", PaymentIndex: &idx, Signature: &sig}
		sub, err := f.svc.InteropInit(as(p.payer), v.ID, in)
		if err != nil {
			t.Fatal(err)
		}
		if sub.ID != "sub-1" || sub.VoucherID != v.ID || sub.PaymentIndex != 0 || *sub.Signature != sig || sub.CreatedAt.Std().IsZero() {
			t.Fatalf("submission %+v", sub)
		}
		again, err := f.svc.InteropInit(as(p.payer), v.ID, in)
		if err != nil || !sameSubmission(again, sub) {
			t.Fatalf("replay %+v, %v", again, err)
		}
		// Replays work after the voucher moved on.
		if _, err := f.svc.Resolve(as(p.payer), v.ID, receipts(v.ExpectedPayment.ID)); err != nil {
			t.Fatal(err)
		}
		if again, err := f.svc.InteropInit(as(p.payer), v.ID, in); err != nil || !sameSubmission(again, sub) {
			t.Fatalf("replay after resolve %+v, %v", again, err)
		}
		other := "0xother"
		// With vid the submission is for another voucher the caller sees.
		vid, err := f.svc.InteropInit(as(p.payer), v.ID, voucher.InteropInitInput{ID: "sub-1", Vid: &mine.ID})
		if err != nil || vid.VoucherID != mine.ID || vid.Signature != nil {
			t.Fatalf("vid submission %+v, %v", vid, err)
		}

		one, eleven, neg := 1, 11, -1
		empty, long := "", string(make([]byte, 257))
		for _, c := range []struct {
			name  string
			who   string
			id    string
			in    voucher.InteropInitInput
			code  apperr.Code
			field string
		}{
			{"same id, other content", "payer", v.ID, voucher.InteropInitInput{ID: "sub-1", Signature: &other}, apperr.AlreadyExists, ""},
			{"payee", "payee", mine.ID, voucher.InteropInitInput{ID: "x"}, apperr.NotFound, ""},
			{"stranger", "stranger", mine.ID, voucher.InteropInitInput{ID: "x"}, apperr.NotFound, ""},
			{"stranger, bad input", "stranger", mine.ID, voucher.InteropInitInput{}, apperr.NotFound, ""},
			{"unknown voucher", "payer", ids.New(ids.Voucher), voucher.InteropInitInput{ID: "x"}, apperr.NotFound, ""},
			{"vid not visible", "payer", mine.ID, voucher.InteropInitInput{ID: "x", Vid: &foreign.ID}, apperr.NotFound, ""},
			{"missing id", "payer", mine.ID, voucher.InteropInitInput{}, apperr.ValidationFailed, "id"},
			{"long id", "payer", mine.ID, voucher.InteropInitInput{ID: string(make([]byte, 129))}, apperr.ValidationFailed, "id"},
			{"index 11", "payer", mine.ID, voucher.InteropInitInput{ID: "x", PaymentIndex: &eleven}, apperr.ValidationFailed, "paymentIndex"},
			{"negative index", "payer", mine.ID, voucher.InteropInitInput{ID: "x", PaymentIndex: &neg}, apperr.ValidationFailed, "paymentIndex"},
			{"empty signature", "payer", mine.ID, voucher.InteropInitInput{ID: "x", Signature: &empty}, apperr.ValidationFailed, "signature"},
			{"long signature", "payer", mine.ID, voucher.InteropInitInput{ID: "x", Signature: &long}, apperr.ValidationFailed, "signature"},
			{"index past the payments", "payer", mine.ID, voucher.InteropInitInput{ID: "x", PaymentIndex: &one}, apperr.ValidationFailed, "paymentIndex"},
			{"reserved", "payer", reserved.ID, voucher.InteropInitInput{ID: "x"}, apperr.NotRedeemed, ""},
			{"resolved", "payer", v.ID, voucher.InteropInitInput{ID: "new"}, apperr.AlreadyResolved, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.svc.InteropInit(p.as(c.who), c.id, c.in)
				if c.field != "" {
					wantField(t, err, c.field)
				} else {
					wantCode(t, err, c.code)
				}
			})
		}
		n, err := db.InteropSubmission.Query().Count(context.Background())
		if err != nil || n != 2 {
			t.Fatalf("%d submissions stored, %v", n, err)
		}
	})
}

func sameSubmission(a, b *voucher.Submission) bool {
	return a.ID == b.ID && a.VoucherID == b.VoucherID && a.PaymentIndex == b.PaymentIndex &&
		(a.Signature == nil) == (b.Signature == nil) && (a.Signature == nil || *a.Signature == *b.Signature) &&
		a.CreatedAt.Std().Equal(b.CreatedAt.Std())
}
