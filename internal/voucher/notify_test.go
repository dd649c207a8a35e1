package voucher_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/business"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// openWithURL is testdb.Open that also returns the URL (to LISTEN on it).
func openWithURL(t *testing.T, dialect string) (*storage.DB, string) {
	t.Helper()
	url := testdb.URL(t, dialect)
	db, err := storage.Open(context.Background(), url, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, url
}

// Every change is published exactly once, after commit, with its new
// version and state, on both databases (on PostgreSQL the publisher
// includes the notifier that tells the other replicas, see
// TestChangesCarryTheirState). Rejected requests publish nothing.
func TestChangeNotifications(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db, _ := openWithURL(t, dialect)
			f := newFixture(t, db)
			p := f.parties()
			owner := f.user()
			shop := f.business(owner, business.StatusACTIVE)
			v := f.redeemed(p, "3")                                                                            // 1, 2
			_, _ = f.svc.Redeem(as(p.payee), v.ID, simpleBody("1"))                                            // rejected
			if _, err := f.svc.Negotiate(as(p.payer), v.ID, supplied("ethereum", "DAI", daiEth)); err != nil { // 3
				t.Fatal(err)
			}
			if _, err := f.svc.Resolve(as(p.payer), v.ID, receipts(v.ExpectedPayment.ID)); err != nil { // 4
				t.Fatal(err)
			}
			d, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID}) // 1
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.svc.Discard(as(owner), d.ID); err != nil { // 2
				t.Fatal(err)
			}
			e := f.reserve(p) // 1
			f.clock.Add(ttl)
			if _, err := f.svc.SweepExpired(context.Background()); err != nil { // 2
				t.Fatal(err)
			}

			want := []pubsub.VoucherChange{
				{ID: v.ID, Version: 1}, {ID: v.ID, Version: 2}, {ID: v.ID, Version: 3}, {ID: v.ID, Version: 4},
				{ID: d.ID, Version: 1, BusinessID: shop.ID}, {ID: d.ID, Version: 2, BusinessID: shop.ID},
				{ID: e.ID, Version: 1}, {ID: e.ID, Version: 2},
			}
			out := f.pub.all()
			if len(out) != len(want) {
				t.Fatalf("heard %d changes, want %d: %+v", len(out), len(want), out)
			}
			for i, w := range want {
				c := out[i]
				payee := p.payee.ID
				if w.ID == d.ID {
					payee = owner.ID
				}
				if c.ID != w.ID || c.Version != w.Version || c.BusinessID != w.BusinessID ||
					c.SessionID != p.session.ID || c.PayerID != p.payer.ID || c.PayeeID != payee {
					t.Fatalf("change %d = %+v, want %+v", i, c, w)
				}
				if c.Voucher == nil || c.Voucher.ID != c.ID || c.Voucher.Version != c.Version {
					t.Fatalf("change %d carries state %+v", i, c.Voucher)
				}
			}
		})
	}
}

// Business vouchers hand every change to the event sink inside the
// transaction that makes it; a failing sink undoes the change.
func TestBusinessVoucherEvents(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)

		v, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		before := f.row(v.ID)
		f.sink.fail = errors.New("outbox unavailable")
		_, err = f.svc.Redeem(as(owner), v.ID, simpleBody("5"))
		wantCode(t, err, apperr.Internal)
		f.unchanged(v.ID, before)
		f.sink.fail = nil

		if _, err := f.svc.Redeem(as(owner), v.ID, simpleBody("5")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Negotiate(as(p.payer), v.ID, supplied("ethereum", "USDT", usdtEth)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Resolve(as(p.payer), v.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{
			{PaymentID: f.mustGet(owner, v.ID).ExpectedPayment.ID, Amount: ptr("5")},
		}}); err != nil {
			t.Fatal(err)
		}
		w, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Redeem(as(owner), w.ID, customBody()); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Discard(as(p.payer), w.ID); err != nil {
			t.Fatal(err)
		}

		type step struct {
			id       string
			from, to string
		}
		want := []step{
			{v.ID, "", "RESERVED"}, {v.ID, "RESERVED", "REDEEMED"}, {v.ID, "REDEEMED", "REDEEMED"}, {v.ID, "REDEEMED", "RESOLVED"},
			{w.ID, "", "RESERVED"}, {w.ID, "RESERVED", "REDEEMED"}, {w.ID, "REDEEMED", "DISCARDED"},
		}
		got := f.sink.all()
		if len(got) != len(want) {
			t.Fatalf("%d events, want %d", len(got), len(want))
		}
		for i, w := range want {
			c := got[i]
			from := ""
			if c.prev != nil {
				from = string(c.prev.Status)
				if c.prev.Version+1 != c.next.Version || c.prev.ID != c.next.ID {
					t.Fatalf("event %d: prev v%d, next v%d", i, c.prev.Version, c.next.Version)
				}
			}
			if c.next.ID != w.id || from != w.from || string(c.next.Status) != w.to || *c.next.BusinessID != shop.ID {
				t.Fatalf("event %d = %s %s->%s, want %+v", i, c.next.ID, from, c.next.Status, w)
			}
		}
		neg := got[2]
		if neg.prev.SuppliedPayment != nil || neg.next.SuppliedPayment == nil || neg.next.SuppliedPayment.Currency != "USDT" {
			t.Fatalf("negotiation event %+v -> %+v", neg.prev.SuppliedPayment, neg.next.SuppliedPayment)
		}
		if got[3].next.Receipts[0] != (payment.Receipt{PaymentID: got[3].next.ExpectedPayment.ID, Amount: "5"}) {
			t.Fatalf("resolve event receipts %+v", got[3].next.Receipts)
		}
		if got[6].next.DiscardReason == nil || *got[6].next.DiscardReason != voucher.ReasonDiscarded || got[6].next.Status != entvoucher.StatusDISCARDED {
			t.Fatalf("discard event %+v", got[6].next)
		}
	})
}

func TestRedeemStatement(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		q := voucher.RedeemStatement(db.Dialect)
		if strings.Contains(q, "pg_notify") || !strings.Contains(q, "business_id IS NULL") {
			t.Fatalf("statement %s", q)
		}
		// The documented parameters, in the documented order, redeem.
		f := newFixture(t, db)
		p := f.parties()
		v := f.reserve(p)
		now := f.clock.Now()
		expected := `{"id":"pmt_bench","network":"ethereum","currency":"USDC","currencyAddress":"` + usdcEth +
			`","amount":"1","wallet":{"address":"` + payeeWallet + `"}}`
		var expArg any = expected
		if !db.IsPostgres() {
			expArg = []byte(expected)
		}
		rows, err := db.SQL.QueryContext(context.Background(), q,
			"SIMPLE", expArg, nil, nil, nil, nil, now, v.ID, p.payee.ID, now)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n != 1 {
			t.Fatalf("%d rows", n)
		}
		got, err := f.svc.Get(as(p.payer), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != entvoucher.StatusREDEEMED || got.Version != 2 || got.ExpectedPayment.ID != "pmt_bench" {
			t.Fatalf("after the statement %+v", got)
		}
		_, err = f.svc.Redeem(as(p.payee), v.ID, simpleBody("1"))
		wantCode(t, err, apperr.AlreadyRedeemed)
	})
}

// A change carries its new state, so no replica has to read the voucher
// back: in process to this replica's hub (both databases), and on
// PostgreSQL in the notifier's NOTIFY payload while it fits. A row too
// large for NOTIFY's 8000 bytes goes out with its keys only.
func TestChangesCarryTheirState(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db, url := openWithURL(t, dialect)
			f := newFixture(t, db)
			notes := make(chan pubsub.VoucherChange, 16)
			if db.IsPostgres() {
				n, err := pubsub.NewNotifier(context.Background(), url, pubsub.NotifierOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = n.Close(context.Background()) })
				// What the app's listener says once another replica is heard
				// (alone, a notifier sends nothing).
				n.PeerJoined(time.Now())
				f.pub.also = n
				l := pq.NewListener(url, 10*time.Millisecond, time.Second, nil)
				t.Cleanup(func() { l.Close() })
				if err := l.Listen(n.ChangeChannel()); err != nil {
					t.Fatal(err)
				}
				go func() {
					for n := range l.Notify {
						if n == nil {
							continue
						}
						c, err := pubsub.ParseNotification(n.Extra)
						if err != nil {
							t.Errorf("payload %q: %v", n.Extra, err)
						}
						if len(n.Extra) >= 8000 {
							t.Errorf("payload of %d bytes", len(n.Extra))
						}
						notes <- c
					}
				}()
			}
			heard := func(id string, version int) pubsub.VoucherChange {
				t.Helper()
				for {
					select {
					case c := <-notes:
						if c.ID == id && c.Version == version {
							return c
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("no notification for %s v%d", id, version)
					}
				}
			}
			same := func(what string, got, want *ent.Voucher) {
				t.Helper()
				g, _ := json.Marshal(view.OfVoucher(got))
				w, _ := json.Marshal(view.OfVoucher(want))
				if string(g) != string(w) || got.PayerID != want.PayerID || got.PayeeID != want.PayeeID {
					t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
				}
			}
			published := func(id string, version int) pubsub.VoucherChange {
				t.Helper()
				for _, c := range f.pub.all() {
					if c.ID == id && c.Version == version {
						return c
					}
				}
				t.Fatalf("nothing published for %s v%d", id, version)
				return pubsub.VoucherChange{}
			}

			p := f.parties()
			v := f.reserve(p)
			r, err := f.svc.Redeem(as(p.payee), v.ID, simpleBody("7.25"))
			if err != nil {
				t.Fatal(err)
			}
			stored, err := f.svc.Get(as(p.payer), v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c := published(v.ID, 2); c.Voucher == nil {
				t.Fatal("the in-process change carries no voucher")
			} else {
				same("published", c.Voucher, stored)
			}
			if db.IsPostgres() {
				for _, version := range []int{1, 2} {
					c := heard(v.ID, version)
					if len(c.Row) == 0 {
						t.Fatalf("v%d: the notification carries no row", version)
					}
					got, err := pubsub.DecodeRow(c.Row)
					if err != nil {
						t.Fatal(err)
					}
					if version == 2 {
						same("notified row", got, stored)
						same("answer", r, stored)
					} else if got.Status != entvoucher.StatusRESERVED || got.Version != 1 {
						t.Fatalf("reserve's row %+v", got)
					}
				}
			}

			// Calldata of 12,000 hex digits: the row no longer fits.
			big := customBody()
			big.Payments[0].Input.Data = "0x" + strings.Repeat("ab", 6000)
			w := f.reserve(p)
			if _, err := f.svc.Redeem(as(p.payee), w.ID, big); err != nil {
				t.Fatal(err)
			}
			if c := published(w.ID, 2); c.Voucher == nil || c.Voucher.Payments[0].Input.Data != big.Payments[0].Input.Data {
				t.Fatalf("the in-process change of a large voucher: %+v", c.Voucher)
			}
			if db.IsPostgres() {
				heard(w.ID, 1)
				if c := heard(w.ID, 2); len(c.Row) != 0 || c.SessionID != p.session.ID || c.PayeeID != p.payee.ID {
					t.Fatalf("large row notification %+v", c)
				}
			}
		})
	}
}
