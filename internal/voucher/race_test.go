package voucher_test

import (
	"context"
	"sync"
	"testing"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/business"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// race runs n calls of fn at once and counts their outcomes by code ("" for success).
func race(n int, fn func(i int) error) map[apperr.Code]int {
	var mu sync.Mutex
	out := map[apperr.Code]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := fn(i)
			code := apperr.Code("")
			if err != nil {
				code = apperr.CodeOf(err)
			}
			mu.Lock()
			out[code]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

const racers = 50

func TestConcurrentTransitions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)

		t.Run("redeem", func(t *testing.T) {
			v := f.reserve(p)
			got := race(racers, func(i int) error {
				body := simpleBody("1")
				if i%2 == 1 {
					body = customBody()
				}
				_, err := f.svc.Redeem(as(p.payee), v.ID, body)
				return err
			})
			if got[""] != 1 || got[apperr.AlreadyRedeemed] != racers-1 {
				t.Fatalf("outcomes %v", got)
			}
			if row, _ := db.Voucher.Get(context.Background(), v.ID); row.Version != 2 {
				t.Fatalf("version %d after one redeem", row.Version)
			}
		})

		t.Run("redeem a business voucher", func(t *testing.T) {
			v, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: p.session.Code, BusinessID: &shop.ID})
			if err != nil {
				t.Fatal(err)
			}
			before := len(f.sink.all())
			got := race(racers, func(int) error {
				_, err := f.svc.Redeem(as(owner), v.ID, simpleBody("1"))
				return err
			})
			if got[""] != 1 || got[apperr.AlreadyRedeemed] != racers-1 {
				t.Fatalf("outcomes %v", got)
			}
			if n := len(f.sink.all()) - before; n != 1 {
				t.Fatalf("%d events for one redeem", n)
			}
		})

		t.Run("resolve", func(t *testing.T) {
			v := f.redeemed(p, "1")
			got := race(racers, func(int) error {
				_, err := f.svc.Resolve(as(p.payer), v.ID, receipts(v.ExpectedPayment.ID))
				return err
			})
			if got[""] != 1 || got[apperr.AlreadyResolved] != racers-1 {
				t.Fatalf("outcomes %v", got)
			}
		})

		t.Run("negotiate", func(t *testing.T) {
			v := f.redeemed(p, "1")
			got := race(racers, func(int) error {
				_, err := f.svc.Negotiate(as(p.payer), v.ID, supplied("ethereum", "ETH", nativeEVM))
				return err
			})
			row, _ := db.Voucher.Get(context.Background(), v.ID)
			// Concurrent negotiations all apply, each bumping the version
			// once; none is turned away.
			if got[""] != racers || row.Version != v.Version+racers {
				t.Fatalf("outcomes %v, version %d from %d", got, row.Version, v.Version)
			}
		})

		t.Run("resolve racing negotiations", func(t *testing.T) {
			// Every negotiation bumps the version a resolve's write is
			// guarded by; however many land between its read and its
			// write, the resolve goes through (or says why not), never
			// "kept changing".
			v := f.redeemed(p, "1")
			resolved := false
			got := race(racers, func(i int) error {
				if i == racers/2 {
					_, err := f.svc.Resolve(as(p.payer), v.ID, receipts(v.ExpectedPayment.ID))
					resolved = err == nil
					return err
				}
				_, err := f.svc.Negotiate(as(p.payer), v.ID, supplied("ethereum", "ETH", nativeEVM))
				return err
			})
			row, _ := db.Voucher.Get(context.Background(), v.ID)
			if !resolved || row.Status != entvoucher.StatusRESOLVED || got[apperr.Internal] != 0 ||
				got[""]+got[apperr.AlreadyResolved] != racers {
				t.Fatalf("outcomes %v, resolve went through: %v, final %s", got, resolved, row.Status)
			}
		})

		t.Run("redeem racing discard", func(t *testing.T) {
			v := f.reserve(p)
			got := race(racers, func(i int) error {
				var err error
				if i%2 == 0 {
					_, err = f.svc.Redeem(as(p.payee), v.ID, simpleBody("1"))
				} else {
					_, err = f.svc.Discard(as(p.payer), v.ID)
				}
				return err
			})
			row, _ := db.Voucher.Get(context.Background(), v.ID)
			// One discard wins; a redeem may win before it. Every loser
			// gets a state code, never an internal error.
			wins := got[""]
			if row.Status != entvoucher.StatusDISCARDED || wins < 1 || wins > 2 || row.Version != 1+wins ||
				got[apperr.Discarded]+got[apperr.AlreadyRedeemed]+wins != racers {
				t.Fatalf("outcomes %v, final %s v%d", got, row.Status, row.Version)
			}
		})

		t.Run("transitions racing the sweeper", func(t *testing.T) {
			vs := []*ent.Voucher{f.reserve(p), f.redeemed(p, "1")}
			f.clock.Add(ttl)
			var swept sync.Map
			got := race(racers, func(i int) error {
				v := vs[i%2]
				switch i % 5 {
				case 0:
					n, err := f.svc.SweepExpired(context.Background())
					swept.Store(i, n)
					return err
				case 1:
					_, err := f.svc.Redeem(as(p.payee), v.ID, simpleBody("1"))
					return err
				case 2:
					_, err := f.svc.Discard(as(p.payer), v.ID)
					return err
				case 3:
					_, err := f.svc.Resolve(as(p.payer), v.ID, receipts("pmt_x"))
					return err
				default:
					_, err := f.svc.Negotiate(as(p.payer), v.ID, supplied("ethereum", "ETH", nativeEVM))
					return err
				}
			})
			total := 0
			swept.Range(func(_, n any) bool { total += n.(int); return true })
			sweeps := racers / 5
			if total < len(vs) || got[""] != sweeps || got[apperr.Expired] != racers-sweeps {
				t.Fatalf("outcomes %v, swept %d", got, total)
			}
			for _, v := range vs {
				row, _ := db.Voucher.Get(context.Background(), v.ID)
				if row.Version != v.Version+1 || row.Status != entvoucher.StatusDISCARDED || *row.DiscardReason != voucher.ReasonExpired {
					t.Fatalf("after the race %+v (was v%d)", row, v.Version)
				}
			}
		})
	})
}
