package settlement_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent/event"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/testsupport/testdb"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
)

// BenchmarkWatcher1000 follows 1,000 resolved business vouchers pending
// on one network (paid in 10 blocks) on SQLite, against the fake chain:
// each op is one new block and one poll. It reports the RPC round trips
// and items asked per block, the poll's time per block (ns/op: the
// service's CPU, the fake chain costing nothing), then the delay from the
// block that confirms all 1,000 to each deposit.confirmed written to the
// outbox, with the watcher running at a 200 ms pollInterval (the target:
// p99 ≤ pollInterval + 50 ms), and resolve's p50 on a verified and on an
// unverified network. ns/op is a poll of the 1,000 when the block changes
// none of them; the confirming block's poll (1,000 changes and their
// events written) is inside the p99.
//
//	go test ./internal/settlement -run '^$' -bench Watcher1000 -benchtime 20x
func BenchmarkWatcher1000(b *testing.B) {
	db := testdb.Open(b, storage.SQLite)
	chain := newFakeChain()
	e := newEnv(b, db, chain)
	ctx := context.Background()
	const n = 1000
	var hs, ids []string
	var verified, unverified []time.Duration
	for i := 0; i < n; i++ {
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "1"))
		h := newHash()
		start := time.Now()
		e.mustResolve(d, h)
		verified = append(verified, time.Since(start))
		hs, ids = append(hs, h), append(ids, d.v.ID)
	}
	for i := 0; i < 200; i++ {
		d := e.redeemed(tokenBody("polygon", "USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", "1"))
		h := newHash()
		start := time.Now()
		if _, err := e.vouchers.Resolve(as(d.payer), d.v.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: d.v.ExpectedPayment.ID, TransactionHash: &h}}}); err != nil {
			b.Fatal(err)
		}
		unverified = append(unverified, time.Since(start))
	}
	// The 1,000 payments mined in 10 blocks; the first poll sees them
	// (deposit.pending for each).
	for g := 0; g < 10; g++ {
		chain.advance(1)
		chain.mu.Lock()
		for _, h := range hs[g*100 : (g+1)*100] {
			tx := tokenTx(h, credit(usdc, payee, units("1", 6)))
			tx.Found, tx.BlockNumber, tx.BlockHash, tx.BlockTime = true, chain.head, chain.blocks[chain.head], time.Now()
			chain.txs[h] = tx
		}
		chain.mu.Unlock()
	}
	e.poll()

	// Per block, while all 1,000 stay pending (required is 3: the
	// confirming block comes after the timed ones, so hold the head).
	calls0, asked0 := chain.roundTrips()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.settle.Poll(ctx, "ethereum"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls1, asked1 := chain.roundTrips()
	b.ReportMetric(float64(calls1-calls0)/float64(b.N), "rpc-calls/block")
	b.ReportMetric(float64(asked1-asked0)/float64(b.N), "rpc-items/block")

	// Confirmation → deposit.confirmed written, with the watcher running.
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var err error
	e.settle, err = settlement.NewService(db, e.fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "ethereum", Chain: chain, Confirmations: required, PollInterval: 200 * time.Millisecond}},
		Events:   e.outbox, Publisher: e.pub, Now: e.clock.Now,
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() { defer close(done); e.settle.Run(runCtx) }()
	time.Sleep(300 * time.Millisecond)
	e.clock.mu.Lock()
	e.clock.t = time.Now().UTC()
	e.clock.mu.Unlock()
	confirmedAt := time.Now()
	chain.advance(required)
	go func() {
		for runCtx.Err() == nil {
			e.clock.mu.Lock()
			e.clock.t = time.Now().UTC()
			e.clock.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	var lat []time.Duration
	for {
		evs, err := db.Event.Query().Where(event.TypeEQ(webhook.DepositConfirmed), event.VoucherIDIn(ids...)).All(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) >= n {
			for _, ev := range evs {
				lat = append(lat, ev.CreatedAt.Sub(confirmedAt))
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d deposit.confirmed after 60 s", len(evs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	b.ReportMetric(float64(pct(lat, 99).Milliseconds()), "confirm→event-p99-ms")
	b.ReportMetric(float64(pct(verified, 50).Microseconds()), "resolve-verified-p50-µs")
	b.ReportMetric(float64(pct(unverified, 50).Microseconds()), "resolve-unverified-p50-µs")
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
