package voucher_test

import (
	"context"
	"testing"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
)

// replica is another voucher service (another replica) on db, sharing f's
// clock and prices.
func (f *fixture) replica(db *storage.DB) *voucher.Service {
	f.t.Helper()
	svc, err := voucher.NewService(db, voucher.Options{
		Finance: f.fin, Sessions: session.NewService(db, 0, f.clock.Now), TTL: ttl, Now: f.clock.Now,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

// A negotiation on a voucher this replica saw REDEEMED (its redeem, a read,
// an earlier negotiation) is one statement; without that (redeemed on
// another replica) it is two, the read and the write, and then one. Every
// negotiation gives the same answer either way.
func TestNegotiateFromKeptTermsIsOneStatement(t *testing.T) {
	eachWithURL(t, func(t *testing.T, db *storage.DB, url string) {
		f := newFixture(t, db) // replica A
		cdb, c := openCounting(t, url)
		b := f.replica(cdb) // replica B, whose statements are counted
		p := f.parties()
		eth := supplied("ethereum", "ETH", nativeEVM)
		want := ceilQuote(t, "30", "1", "3000", 0, 18)
		negotiate := func(t *testing.T, id string, wantStmts int64, version int) {
			t.Helper()
			m := c.mark()
			got, err := b.Negotiate(as(p.payer), id, eth)
			if err != nil {
				t.Fatal(err)
			}
			c.since(t, "negotiate", m, wantStmts)
			if got.Status != entvoucher.StatusREDEEMED || got.Version != version || got.SuppliedPayment == nil ||
				got.SuppliedPayment.Amount != want || got.SuppliedPayment.Currency != "ETH" || got.ExchangeRate == nil {
				t.Fatalf("negotiated %+v", got)
			}
			stored := f.mustGet(p.payer, id)
			if stored.Version != version || *stored.SuppliedPayment != *got.SuppliedPayment || *stored.ExchangeRate != *got.ExchangeRate {
				t.Fatalf("stored %+v, answered %+v", stored, got)
			}
		}

		t.Run("redeemed here", func(t *testing.T) {
			v := f.reserve(p)
			m := c.mark()
			r, err := b.Redeem(as(p.payee), v.ID, simpleBody("30"))
			if err != nil {
				t.Fatal(err)
			}
			c.since(t, "redeem", m, 1)
			negotiate(t, v.ID, 1, r.Version+1)
			negotiate(t, v.ID, 1, r.Version+2)
		})
		t.Run("redeemed on another replica", func(t *testing.T) {
			r := f.redeemed(p, "30")
			negotiate(t, r.ID, 2, r.Version+1)
			negotiate(t, r.ID, 1, r.Version+2)
		})
		t.Run("read here first", func(t *testing.T) {
			r := f.redeemed(p, "30")
			m := c.mark()
			if _, err := b.Get(as(p.payer), r.ID); err != nil {
				t.Fatal(err)
			}
			c.since(t, "get", m, 1)
			negotiate(t, r.ID, 1, r.Version+1)
		})
		t.Run("a fresh service", func(t *testing.T) {
			v := f.reserve(p)
			r, err := b.Redeem(as(p.payee), v.ID, simpleBody("30"))
			if err != nil {
				t.Fatal(err)
			}
			b = f.replica(cdb) // what B kept is gone
			negotiate(t, v.ID, 2, r.Version+1)
			negotiate(t, v.ID, 1, r.Version+2)
		})
	})
}

// What this replica keeps cannot answer for a voucher that changed since:
// resolved, discarded, expired or swept on another replica (or in the
// database), or asked by someone who is not its payer, a negotiation here
// gets exactly the code the read path gives (replica A, which kept
// nothing, is asked the same) and changes nothing stored. Where the kept
// terms let the statement run, it ran and changed nothing (two
// statements: it and the read that explains).
func TestStaleTermsChangeNothing(t *testing.T) {
	eachWithURL(t, func(t *testing.T, db *storage.DB, url string) {
		f := newFixture(t, db) // replica A
		cdb, c := openCounting(t, url)
		b := f.replica(cdb) // replica B keeps the terms
		p := f.parties()
		ctx := context.Background()
		eth := supplied("ethereum", "ETH", nativeEVM)
		polygon := supplied("polygon", "USDC", usdcPoly)
		// kept reserves on A and redeems on B, so B keeps the terms.
		kept := func(t *testing.T) string {
			t.Helper()
			v := f.reserve(p)
			if _, err := b.Redeem(as(p.payee), v.ID, simpleBody("5")); err != nil {
				t.Fatal(err)
			}
			return v.ID
		}
		exec := func(t *testing.T, q string, args ...any) {
			t.Helper()
			if _, err := db.SQL.ExecContext(ctx, db.Rebind(q), args...); err != nil {
				t.Fatal(err)
			}
		}
		cases := []struct {
			name   string
			who    string
			in     voucher.NegotiateInput
			change func(t *testing.T, id string)
			code   apperr.Code
			// stmts B sends: 2 when the kept terms let the statement
			// run (it changes nothing, the read explains), 1 when B
			// goes to the read at once.
			stmts int64
		}{
			{"resolved on A", "payer", eth, func(t *testing.T, id string) {
				r := f.mustGet(p.payer, id)
				if _, err := f.svc.Resolve(as(p.payer), id, receipts(r.ExpectedPayment.ID)); err != nil {
					t.Fatal(err)
				}
			}, apperr.AlreadyResolved, 2},
			{"resolved on A, other network: state first", "payer", polygon, func(t *testing.T, id string) {
				r := f.mustGet(p.payer, id)
				if _, err := f.svc.Resolve(as(p.payer), id, receipts(r.ExpectedPayment.ID)); err != nil {
					t.Fatal(err)
				}
			}, apperr.AlreadyResolved, 1},
			{"discarded on A", "payer", eth, func(t *testing.T, id string) {
				if _, err := f.svc.Discard(as(p.payee), id); err != nil {
					t.Fatal(err)
				}
			}, apperr.Discarded, 2},
			{"expired in the database", "payer", eth, func(t *testing.T, id string) {
				exec(t, "UPDATE vouchers SET expires_at = ? WHERE id = ?", f.clock.Now().Add(-1), id)
			}, apperr.Expired, 2},
			{"expired and swept on A", "payer", eth, func(t *testing.T, id string) {
				exec(t, "UPDATE vouchers SET expires_at = ? WHERE id = ?", f.clock.Now().Add(-1), id)
				if n, err := f.svc.SweepExpired(ctx); err != nil || n < 1 {
					t.Fatalf("swept %d: %v", n, err)
				}
			}, apperr.Expired, 2},
			{"made RESERVED in the database", "payer", eth, func(t *testing.T, id string) {
				exec(t, "UPDATE vouchers SET status = 'RESERVED', type = NULL, expected_payment = NULL WHERE id = ?", id)
			}, apperr.NotRedeemed, 2},
			{"the payee", "payee", eth, nil, apperr.NotFound, 1},
			{"a stranger", "stranger", eth, nil, apperr.NotFound, 1},
			{"a stranger, resolved on A", "stranger", eth, func(t *testing.T, id string) {
				r := f.mustGet(p.payer, id)
				if _, err := f.svc.Resolve(as(p.payer), id, receipts(r.ExpectedPayment.ID)); err != nil {
					t.Fatal(err)
				}
			}, apperr.NotFound, 1},
			{"another network", "payer", polygon, nil, apperr.DifferentNetwork, 1},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := kept(t)
				if tc.change != nil {
					tc.change(t, id)
				}
				before := f.row(id)
				m := c.mark()
				_, err := b.Negotiate(p.as(tc.who), id, tc.in)
				wantCode(t, err, tc.code)
				c.since(t, "negotiate", m, tc.stmts)
				f.unchanged(id, before)
				_, errA := f.svc.Negotiate(p.as(tc.who), id, tc.in)
				wantCode(t, errA, tc.code)
				if err.Error() != errA.Error() {
					t.Fatalf("replica B said %q, A %q", err, errA)
				}
				f.unchanged(id, before)
			})
		}

		// Past the kept expiry B does not even try the statement.
		t.Run("expired by the clock", func(t *testing.T) {
			id := kept(t)
			before := f.row(id)
			f.clock.Add(ttl)
			m := c.mark()
			_, err := b.Negotiate(as(p.payer), id, eth)
			wantCode(t, err, apperr.Expired)
			c.since(t, "negotiate", m, 1)
			f.unchanged(id, before)
		})
	})
}

// Negotiations from kept terms racing a discard on another replica: the
// discard wins once, each negotiation either applied before it or is told
// discarded, never an internal error, and the version counts exactly the
// changes that happened. (A discard, one statement guarded by state alone,
// rather than a resolve, whose version guard gives up after three tries
// under a storm of concurrent negotiations, with or without kept terms.)
func TestKeptTermsNegotiationsRacingResolve(t *testing.T) {
	eachWithURL(t, func(t *testing.T, db *storage.DB, url string) {
		f := newFixture(t, db)
		cdb, _ := openCounting(t, url)
		b := f.replica(cdb)
		p := f.parties()
		v := f.reserve(p)
		r, err := b.Redeem(as(p.payee), v.ID, simpleBody("5"))
		if err != nil {
			t.Fatal(err)
		}
		got := race(racers, func(i int) error {
			if i == racers/2 {
				_, err := f.svc.Discard(as(p.payee), v.ID)
				return err
			}
			_, err := b.Negotiate(as(p.payer), v.ID, supplied("ethereum", "ETH", nativeEVM))
			return err
		})
		row := f.mustGet(p.payer, v.ID)
		wins := got[""]
		if row.Status != entvoucher.StatusDISCARDED || wins < 1 || got[apperr.Discarded] != racers-wins ||
			row.Version != r.Version+wins {
			t.Fatalf("outcomes %v, final %s v%d from v%d", got, row.Status, row.Version, r.Version)
		}
	})
}
