package voucher_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent/business"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/testdb"
	"github.com/voucherd/voucherd/internal/voucher"
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

// Every change reaches subscribers exactly once, with its new version:
// through NOTIFY on PostgreSQL (sent by the changing statement), through
// the publisher after commit on SQLite. Rejected requests notify nothing.
func TestChangeNotifications(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db, url := openWithURL(t, dialect)
			f := newFixture(t, db)
			var mu sync.Mutex
			var heard []pubsub.VoucherChange
			if db.IsPostgres() {
				l := pq.NewListener(url, 10*time.Millisecond, time.Second, nil)
				t.Cleanup(func() { l.Close() })
				if err := l.Listen(pubsub.Channel); err != nil {
					t.Fatal(err)
				}
				go func() {
					for n := range l.Notify {
						if n == nil {
							continue
						}
						var c pubsub.VoucherChange
						if err := json.Unmarshal([]byte(n.Extra), &c); err != nil {
							t.Errorf("payload %q: %v", n.Extra, err)
						}
						mu.Lock()
						heard = append(heard, c)
						mu.Unlock()
					}
				}()
			}
			got := func(n int) []pubsub.VoucherChange {
				t.Helper()
				if !db.IsPostgres() {
					return f.pub.all()
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					mu.Lock()
					out := append([]pubsub.VoucherChange(nil), heard...)
					mu.Unlock()
					if len(out) >= n || time.Now().After(deadline) {
						time.Sleep(50 * time.Millisecond) // and nothing more arrives
						mu.Lock()
						out = append([]pubsub.VoucherChange(nil), heard...)
						mu.Unlock()
						return out
					}
					time.Sleep(10 * time.Millisecond)
				}
			}

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
			out := got(len(want))
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
		if db.IsPostgres() != strings.Contains(q, "pg_notify") || !strings.Contains(q, "business_id IS NULL") {
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
