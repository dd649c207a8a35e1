package settlement_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/internal/widget"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// scanningChain is the fake chain with detection (settlement.Scanner):
// one round trip finds the transactions of the scanned blocks that credit
// a watched address with its asset, and the block hashes asked for.
type scanningChain struct{ *fakeChain }

func (c scanningChain) Detect(ctx context.Context, after, upTo uint64, ws []settlement.Watch) ([]settlement.Found, error) {
	f, _, err := c.Scan(ctx, after, upTo, ws, nil)
	return f, err
}

func (c scanningChain) Scan(_ context.Context, after, upTo uint64, ws []settlement.Watch, heights []uint64) ([]settlement.Found, map[uint64]string, error) {
	if err := c.call(1); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	byAddr := make(map[string][]settlement.Watch, len(ws))
	for _, w := range ws {
		byAddr[w.Address] = append(byAddr[w.Address], w)
	}
	var out []settlement.Found
	// The work grows with the blocks' transactions, not the watches (the
	// node's log index does this on a real chain).
	for h := after + 1; h <= upTo; h++ {
		for _, hash := range c.byBlock[h] {
			tx := c.txs[hash]
			for _, cr := range tx.Credits {
				for _, w := range byAddr[strings.ToLower(cr.To)] {
					if w.Asset == cr.Asset {
						out = append(out, settlement.Found{Hash: hash, Watch: w, BlockNumber: h})
					}
				}
			}
		}
	}
	blocks := map[uint64]string{}
	for h := after + 1; h <= upTo; h++ {
		blocks[h] = c.blocks[h]
	}
	for _, h := range heights {
		if b, ok := c.blocks[h]; ok {
			blocks[h] = b
		}
	}
	return out, blocks, nil
}

// benchFinance is the default registry's ethereum USDC with a deposit
// factory (and an rpcUrl, which a factory needs; the chain is the fake).
func benchFinance(b *testing.B) *finance.Service {
	cfg, err := finance.Load([]byte(fmt.Sprintf(`{
  "updatedAt": %q,
  "networks": [{"network": "ethereum", "type": "evm", "chainId": "1", "rpcUrl": "http://127.0.0.1:1", "depositFactory": "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419"}],
  "tokens": [{"network": "ethereum", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}],
  "prices": {"USDC": "1"}
}`, time.Now().UTC().Format(time.RFC3339), usdcChecked)))
	if err != nil {
		b.Fatal(err)
	}
	fin, err := finance.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return fin
}

// pendingClock records when each voucher was first published with a
// mined payment (the page's "pending", which the checkout page's event
// stream renders from that publication).
type pendingClock struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (p *pendingClock) Publish(c pubsub.VoucherChange) {
	v := c.Voucher
	if v == nil || v.Settlement == nil || len(v.Settlement.Transactions) == 0 {
		return
	}
	mined := false
	for _, t := range v.Settlement.Transactions {
		mined = mined || t.Status == payment.TxMined || t.Status == payment.TxConfirmed
	}
	if !mined {
		return
	}
	now := time.Now()
	p.mu.Lock()
	if _, ok := p.at[v.ID]; !ok {
		p.at[v.ID] = now
	}
	p.mu.Unlock()
}

func (p *pendingClock) wait(b *testing.B, ids []string) {
	deadline := time.Now().Add(time.Minute)
	for {
		p.mu.Lock()
		n := 0
		for _, id := range ids {
			if _, ok := p.at[id]; ok {
				n++
			}
		}
		p.mu.Unlock()
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d payments seen pending after a minute", n, len(ids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkDetect1000 is BenchmarkWatcher1000's counterpart for payments
// no one reported: 1,000 open checkouts with deposit addresses on one
// network, against the fake chain, on SQLite and PostgreSQL.
//
//   - rpc-calls/block, cpu-µs/block: one new block's poll while the 1,000
//     deposit addresses are watched and nothing pays them (head + one scan);
//     rpc-calls/paid-block: a block paying 20 of them (+ the found
//     transactions' lookup).
//
//   - mined→pending-p99-ms: the watcher at a 200 ms pollInterval, blocks at
//     random phases each paying 20 deposit addresses: from the block on the
//     node to the voucher published with its payment mined (what the
//     checkout page's event stream renders as pending). Target:
//     pollInterval + 1 s.
//
//   - confirm→delivered-p99-ms: with 2 confirmations, from the block that
//     confirms a group to the business's receiver getting its
//     deposit.confirmed. Target: pollInterval + 250 ms.
//
//     make bench-settlement
func BenchmarkDetect1000(b *testing.B) {
	for _, dialect := range []string{storage.SQLite, storage.Postgres} {
		b.Run(dialect, func(b *testing.B) { benchDetect(b, dialect) })
	}
}

func benchDetect(b *testing.B, dialect string) {
	const confirmations = 2
	db := testdb.Open(b, dialect)
	fc := newFakeChain()
	fc.byBlock = map[uint64][]string{}
	chain := scanningChain{fc}
	fin := benchFinance(b)
	e := newEnvConfirming(b, db, fin, "ethereum", chain, confirmations)
	ctx := context.Background()

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

	// 1,000 open checkouts, each with its deposit address.
	payerP := &auth.Principal{Kind: auth.KindUser}
	u, err := db.User.Create().SetEmail(ids.New("p") + "@example.com").SetPasswordHash("x").Save(ctx)
	if err != nil {
		b.Fatal(err)
	}
	payerP.ID = u.ID
	sess, err := e.sessions.Create(as(payerP))
	if err != nil {
		b.Fatal(err)
	}
	n, _ := fin.Registry().Network("ethereum")
	var cos []*ent.Voucher
	for i := 0; i < benchPending; i++ {
		v, err := e.vouchers.CreateCheckout(ctx, voucher.CheckoutInput{
			BusinessID: e.biz.ID, WidgetID: "wgt_bench", SessionID: sess.ID,
			Payment:   voucher.PaymentInput{Network: "ethereum", Currency: "USDC", CurrencyAddress: usdcChecked, Amount: "1", Wallet: &voucher.WalletInput{Address: payee}},
			TokenHash: ids.New("tok"), WatchNetwork: "ethereum", DepositFor: widget.DepositFor(n.DepositFactory, payee),
		})
		if err != nil {
			b.Fatal(err)
		}
		cos = append(cos, v)
	}
	pending := &pendingClock{at: map[string]time.Time{}}
	svc, err := settlement.NewService(db, fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "ethereum", Chain: chain, Confirmations: confirmations, PollInterval: benchInterval}},
		Events:   outbox, Publisher: pending, Now: e.clock.Now,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Poll(ctx, "ethereum"); err != nil { // the first scan
		b.Fatal(err)
	}
	pay := func(group []*ent.Voucher) {
		fc.advance(1)
		fc.mu.Lock()
		for _, v := range group {
			h := newHash()
			tx := tokenTx(h, credit(usdc, strings.ToLower(v.Deposit.Address), units("1", 6)))
			tx.Found, tx.BlockNumber, tx.BlockHash, tx.BlockTime = true, fc.head, fc.blocks[fc.head], time.Now()
			fc.txs[h] = tx
			fc.byBlock[fc.head] = append(fc.byBlock[fc.head], h)
		}
		fc.mu.Unlock()
	}

	// One new block's poll, 1,000 addresses watched, none paid.
	c0, _ := fc.roundTrips()
	cpu0 := cpuTime()
	polls := benchPolls(b)
	b.ResetTimer()
	for i := 0; i < polls; i++ {
		fc.advance(1)
		if err := svc.Poll(ctx, "ethereum"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu1 := cpuTime()
	c1, _ := fc.roundTrips()
	b.ReportMetric(float64(c1-c0)/float64(polls), "rpc-calls/block")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(polls), "cpu-µs/block")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(polls), "poll-ms/block")
	// A block paying 20 of them.
	pay(cos[:benchPerBlock])
	c0, _ = fc.roundTrips()
	if err := svc.Poll(ctx, "ethereum"); err != nil {
		b.Fatal(err)
	}
	c1, _ = fc.roundTrips()
	b.ReportMetric(float64(c1-c0), "rpc-calls/paid-block")
	// And the next block, which confirms them (mined payments' heights
	// come with the scan: no separate block-hash round trip).
	fc.advance(1)
	c0, _ = fc.roundTrips()
	if err := svc.Poll(ctx, "ethereum"); err != nil {
		b.Fatal(err)
	}
	c1, _ = fc.roundTrips()
	b.ReportMetric(float64(c1-c0), "rpc-calls/confirming-block")

	// The watcher and the dispatcher running; blocks at random phases,
	// each paying the next group and confirming the one before.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); svc.Run(runCtx) }()
	go func() { defer wg.Done(); disp.Run(runCtx) }()
	defer func() { cancel(); wg.Wait() }()
	minedAt, confirmedAt := map[string]time.Time{}, map[string]time.Time{}
	var ids2 []string
	groups := benchPending/benchPerBlock - 1
	for g := 1; g <= groups+1; g++ {
		time.Sleep(benchInterval/2 + rand.N(benchInterval))
		at := time.Now()
		if g <= groups {
			group := cos[g*benchPerBlock : (g+1)*benchPerBlock]
			pay(group)
			at = time.Now()
			for _, v := range group {
				minedAt[v.ID] = at
				ids2 = append(ids2, v.ID)
			}
		} else {
			fc.advance(1)
		}
		if g > 1 {
			for _, v := range cos[(g-1)*benchPerBlock : g*benchPerBlock] {
				confirmedAt[v.ID] = at
			}
		}
	}
	pending.wait(b, ids2)
	var lat []time.Duration
	pending.mu.Lock()
	for id, t := range minedAt {
		lat = append(lat, pending.at[id].Sub(t))
	}
	pending.mu.Unlock()
	b.Logf("%d payments: mined→pending p50 %v, p99 %v, max %v", len(lat), pct(lat, 50), pct(lat, 99), pct(lat, 100))
	b.ReportMetric(float64(pct(lat, 99).Microseconds())/1000, "mined→pending-p99-ms")
	rcv.wait(b, ids2)
	b.ReportMetric(float64(latencyP99(b, rcv, confirmedAt).Microseconds())/1000, "confirm→delivered-p99-ms")
}
