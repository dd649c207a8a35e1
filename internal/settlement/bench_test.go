package settlement_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// BenchmarkWatcher1000 follows 1,000 resolved business vouchers pending on
// one network, against the fake chain (which costs nothing, so what is
// measured is the service and its database), on SQLite and on PostgreSQL.
//
//   - rpc-calls/block, rpc-items/block: the node round trips and the items
//     asked for by the poll of one new block, while all 1,000 are pending
//     (their payments mined in 50 blocks, 20 each); poll-ms/block and
//     cpu-µs/block are that poll's wall time and the process's CPU time
//     (user + system; on PostgreSQL the server's own CPU is not in it).
//     Each new block moves the confirmation count of every pending
//     settlement, so each such poll writes 1,000 settlement changes.
//
//   - confirm→delivered-p99-ms: the watcher runs at a 200 ms pollInterval
//     and the webhook dispatcher is woken by the outbox's commit; new
//     blocks arrive at random phases (100–300 ms apart), each confirming
//     the 20 payments of one block, until all 1,000 are confirmed. Each
//     figure is from the block appearing on the node to the business's
//     receiver (an HTTP server on loopback) getting that voucher's
//     deposit.confirmed. The target is pollInterval + 50 ms.
//
//   - confirm→delivered-burst-p99-ms: the same when one block confirms
//     1,000 payments at once (reported: the receiver getting 1,000
//     deliveries is the dispatcher's drain rate, see docs/performance.md).
//
//   - resolve-*-p50-µs and rpc-calls/resolve: a resolve on a verified
//     network and on an unverified one; resolve asks the node nothing.
//
//     make bench-settlement   (go test ./internal/settlement -run '^$' -bench Watcher1000 -benchtime 1x, SETTLEMENT_BENCH_POLLS=20)
func BenchmarkWatcher1000(b *testing.B) {
	for _, dialect := range []string{storage.SQLite, storage.Postgres} {
		b.Run(dialect, func(b *testing.B) { benchWatcher(b, dialect) })
	}
}

const (
	benchPending   = 1000
	benchPerBlock  = 20
	benchInterval  = 200 * time.Millisecond
	benchRequired  = 200 // more than the 50 blocks holding the payments and the timed polls' blocks: none confirms before the latency phase
	benchBurstSize = 1000
)

// receiver is a business's webhook receiver recording when each
// voucher's deposit.confirmed arrived.
type receiver struct {
	mu  sync.Mutex
	at  map[string]time.Time
	got chan struct{}
}

func newReceiver(b *testing.B) (*receiver, string) {
	r := &receiver{at: map[string]time.Time{}, got: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(req.Body)
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p.Type == settlement.EventConfirmed {
			r.mu.Lock()
			if _, dup := r.at[p.Data.VoucherID]; !dup {
				r.at[p.Data.VoucherID] = now
			}
			r.mu.Unlock()
			select {
			case r.got <- struct{}{}:
			default:
			}
		}
	}))
	b.Cleanup(srv.Close)
	return r, srv.URL
}

// wait blocks until every id has arrived (or fails after a minute).
func (r *receiver) wait(b *testing.B, ids []string) {
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		n := 0
		for _, id := range ids {
			if _, ok := r.at[id]; ok {
				n++
			}
		}
		r.mu.Unlock()
		if n == len(ids) {
			return
		}
		select {
		case <-r.got:
		case <-deadline:
			b.Fatalf("%d of %d deposit.confirmed delivered after a minute", n, len(ids))
		}
	}
}

// benchPolls is how many new blocks' polls the per-block figures average
// over: b.N, or SETTLEMENT_BENCH_POLLS when that is more. make bench's
// settlement group runs these benchmarks with -test.benchtime 1x and
// SETTLEMENT_BENCH_POLLS=20: Go runs a benchmark once with b.N = 1 before
// any larger b.N, and each run here sets up its 1,000 vouchers and waits
// for their deliveries, so -benchtime 20x costs two whole runs.
func benchPolls(b *testing.B) int {
	n := b.N
	if v, err := strconv.Atoi(os.Getenv("SETTLEMENT_BENCH_POLLS")); err == nil && v > n {
		n = v
	}
	return n
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchWatcher(b *testing.B, dialect string) {
	db := testdb.Open(b, dialect)
	chain := newFakeChain()
	fin, err := finance.New(finance.Default())
	if err != nil {
		b.Fatal(err)
	}
	e := newEnvConfirming(b, db, fin, "ethereum", chain, benchRequired)
	e.chain = chain
	ctx := context.Background()

	// The business's receiver, the real dispatcher, and an outbox that
	// wakes it on commit (as cmd/voucherd wires them).
	rcv, url := newReceiver(b)
	box, err := secretbox.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	disp := webhook.NewDispatcher(db, webhook.DispatcherOptions{
		Transport: sender.New(netguard.Options{AllowPrivate: true}), Box: box, AllowPrivate: true,
		RetryInterval: time.Second, PollInterval: 5 * time.Second,
	})
	hooks := webhook.NewService(db, webhook.Options{Box: box, AllowPrivate: true, Dispatcher: disp})
	if _, err := hooks.CreateEndpoint(as(e.member), e.biz.ID, webhook.CreateEndpointInput{
		URL: url + "/hooks", Events: []string{settlement.EventConfirmed},
	}); err != nil {
		b.Fatal(err)
	}
	outbox := webhook.NewOutbox(db, webhook.OutboxOptions{
		View: func(v *ent.Voucher) any { return view.OfVoucher(v) }, Now: e.clock.Now, Wake: disp.Wake,
	})

	// Resolve: 1,000 on the verified network, 200 on an unverified one.
	var hs, ids []string
	var verified, unverified []time.Duration
	calls0, _ := chain.roundTrips()
	resolveMany := func(n int, took *[]time.Duration) {
		for i := 0; i < n; i++ {
			d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "1"))
			h := newHash()
			start := time.Now()
			e.mustResolve(d, h)
			if took != nil {
				*took = append(*took, time.Since(start))
			}
			hs, ids = append(hs, h), append(ids, d.v.ID)
		}
	}
	resolveMany(benchPending, &verified)
	for i := 0; i < 200; i++ {
		d := e.redeemed(tokenBody("polygon", "USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", "1"))
		h := newHash()
		start := time.Now()
		if _, err := e.vouchers.Resolve(as(d.payer), d.v.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: d.v.ExpectedPayment.ID, TransactionHash: &h}}}); err != nil {
			b.Fatal(err)
		}
		unverified = append(unverified, time.Since(start))
	}
	calls1, _ := chain.roundTrips()

	svc, err := settlement.NewService(db, e.fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "ethereum", Chain: chain, Confirmations: benchRequired, PollInterval: benchInterval}},
		Events:   outbox, Publisher: e.pub, Now: e.clock.Now,
	})
	if err != nil {
		b.Fatal(err)
	}
	// The 1,000 mined in 50 blocks of 20.
	mineGroup := func(group []string) {
		chain.advance(1)
		chain.mu.Lock()
		for _, h := range group {
			tx := tokenTx(h, credit(usdc, payee, units("1", 6)))
			tx.Found, tx.BlockNumber, tx.BlockHash, tx.BlockTime = true, chain.head, chain.blocks[chain.head], time.Now()
			chain.txs[h] = tx
		}
		chain.mu.Unlock()
	}
	first := chain.head + 1
	for g := 0; g < benchPending/benchPerBlock; g++ {
		mineGroup(hs[g*benchPerBlock : (g+1)*benchPerBlock])
	}
	if err := svc.Poll(ctx, "ethereum"); err != nil { // each one MINED
		b.Fatal(err)
	}

	// One new block's poll, all 1,000 pending and none changing.
	c0, a0 := chain.roundTrips()
	cpu0 := cpuTime()
	polls := benchPolls(b)
	b.ResetTimer()
	for i := 0; i < polls; i++ {
		chain.advance(1)
		if err := svc.Poll(ctx, "ethereum"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu1 := cpuTime()
	c1, a1 := chain.roundTrips()
	b.ReportMetric(float64(c1-c0)/float64(polls), "rpc-calls/block")
	b.ReportMetric(float64(a1-a0)/float64(polls), "rpc-items/block")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(polls), "cpu-µs/block")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(polls), "poll-ms/block")
	// After ResetTimer, which drops metrics reported before it.
	b.ReportMetric(float64(pct(verified, 50).Microseconds()), "resolve-verified-p50-µs")
	b.ReportMetric(float64(pct(unverified, 50).Microseconds()), "resolve-unverified-p50-µs")
	b.ReportMetric(float64(calls1-calls0)/float64(len(verified)), "rpc-calls/resolve")

	// The watcher and the dispatcher running.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); svc.Run(runCtx) }()
	go func() { defer wg.Done(); disp.Run(runCtx) }()
	defer func() { cancel(); wg.Wait() }()

	// Blocks until the first group is one short of confirming.
	chain.advance(int(first + benchRequired - 2 - chain.head))
	confirmedAt := map[string]time.Time{}
	jitter := func() { time.Sleep(benchInterval/2 + rand.N(benchInterval)) }
	for g := 0; g < benchPending/benchPerBlock; g++ {
		jitter()
		chain.advance(1)
		at := time.Now()
		for _, id := range ids[g*benchPerBlock : (g+1)*benchPerBlock] {
			confirmedAt[id] = at
		}
	}
	rcv.wait(b, ids[:benchPending])
	b.ReportMetric(float64(latencyP99(b, rcv, confirmedAt).Microseconds())/1000, "confirm→delivered-p99-ms")

	// The burst: 1,000 more resolved, paid in one block, confirmed by one
	// block.
	resolveMany(benchBurstSize, nil)
	burst := hs[benchPending:]
	mineGroup(burst)
	chain.advance(benchRequired - 2)
	jitter()
	chain.advance(1)
	at := time.Now()
	clear(confirmedAt)
	for _, id := range ids[benchPending:] {
		confirmedAt[id] = at
	}
	rcv.wait(b, ids[benchPending:])
	b.ReportMetric(float64(latencyP99(b, rcv, confirmedAt).Microseconds())/1000, "confirm→delivered-burst-p99-ms")
}

func latencyP99(b *testing.B, r *receiver, since map[string]time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lat []time.Duration
	for id, t := range since {
		lat = append(lat, r.at[id].Sub(t))
	}
	b.Logf("%d deliveries: first %v, p50 %v, p99 %v, last %v", len(lat), pct(lat, 0), pct(lat, 50), pct(lat, 99), pct(lat, 100))
	return pct(lat, 99)
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
