package deposit_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

// frontedRPC serves the simulated chain over HTTP JSON-RPC with a switch
// that takes the node down (503) and back.
func frontedRPC(t *testing.T, sim *testchain.Sim) (*rpc.Client, *atomic.Bool) {
	var down atomic.Bool
	h := testchain.Handler(sim.RPC, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "node down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := rpc.Dial(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &down
}

func (w *world) entry(co checkout, token common.Address) deposit.Flush {
	return deposit.Flush{Payout: co.payout, Salt: co.salt, Token: token}
}

// outcome commits blocks until h is mined and returns what it moved.
func outcome(t *testing.T, w *world, s *deposit.Sweeper, h common.Hash) deposit.Outcome {
	t.Helper()
	for range 50 {
		w.mineFn()
		o, err := s.Outcome(w.ctx, h)
		if err != nil {
			t.Fatalf("outcome of %s: %v", h.Hex(), err)
		}
		if o.Mined {
			return o
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("sweep %s never mined", h.Hex())
	return deposit.Outcome{}
}

// TestSweeperOnSimulatedChain: a gas-only key flushes a batch; the entries
// that succeed are reported with what they moved, the failing one is
// absent and its funds stay; with no gas, a node down, or a transaction in
// flight nothing is sent and no nonce is lost; a stuck sweep is replaced at
// its nonce and the replaced one reads as dropped.
func TestSweeperOnSimulatedChain(t *testing.T) {
	w, sim := simWorld(t)
	c, down := frontedRPC(t, sim)
	native := common.Address{}
	key := testchain.NewAccount() // no ether yet

	// A factory that is not the factory is refused at once.
	if _, err := deposit.NewSweeper(w.ctx, c, w.token, key.Key); err == nil || !strings.Contains(err.Error(), "depositAddress") {
		t.Fatalf("a token as the factory: %v", err)
	}
	if _, err := deposit.NewSweeper(w.ctx, c, testchain.NewAccount().Address, key.Key); err == nil || !strings.Contains(err.Error(), "no contract") {
		t.Fatalf("an empty address as the factory: %v", err)
	}
	s, err := deposit.NewSweeper(w.ctx, c, w.factory, key.Key)
	if err != nil {
		t.Fatal(err)
	}
	if s.Address() != key.Address {
		t.Fatalf("sweeper's account %s, key's %s", s.Address(), key.Address)
	}

	a, b, bad := w.checkout("vch_sweep_a"), w.checkout("vch_sweep_b"), w.checkout("vch_sweep_bad")
	w.pay(w.token, a.addr, 1_500_000)
	w.pay(native, b.addr, 2_000)
	w.pay(w.token, bad.addr, 9_000_000)
	notAToken := testchain.NewAccount().Address
	batch := []deposit.Flush{w.entry(a, w.token), w.entry(b, native), w.entry(bad, notAToken)}

	// Batches it refuses before signing anything.
	for name, fs := range map[string][]deposit.Flush{
		"empty":     nil,
		"too many":  make([]deposit.Flush, deposit.MaxFlushes+1),
		"duplicate": {w.entry(a, w.token), w.entry(a, native)},
	} {
		if _, err := s.Send(w.ctx, fs); err == nil {
			t.Fatalf("%s batch sent", name)
		}
	}

	// No gas: refused by the node, nothing sent, no nonce spent.
	if _, err := s.Send(w.ctx, batch); err == nil || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("a sweep without gas: %v", err)
	}
	w.pay(native, key.Address, 1e18)
	// The node down: an error, nothing sent.
	down.Store(true)
	if _, err := s.Send(w.ctx, batch); err == nil {
		t.Fatal("a sweep through a node that is down did not fail")
	}
	down.Store(false)
	w.eq("a's deposit while the sweeps failed", w.balance(w.token, a.addr), 1_500_000)

	h, err := s.Send(w.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	o := outcome(t, w, s, h)
	moved := o.Moved()
	if len(moved) != 2 || moved[a.addr].Int64() != 1_500_000 || moved[b.addr].Int64() != 2_000 {
		t.Fatalf("moved %v", moved)
	}
	if _, ok := moved[bad.addr]; ok {
		t.Fatal("the failing entry is reported as moved")
	}
	tx, _, err := sim.Client.TransactionByHash(w.ctx, h)
	if err != nil || tx.Nonce() != 0 {
		t.Fatalf("the first sweep's nonce: %v %v (the refused ones must not spend one)", tx, err)
	}
	w.eq("a's payout", w.balance(w.token, a.payout), 1_500_000)
	w.eq("b's payout", w.balance(native, b.payout), 2_000)
	w.eq("the failing entry's deposit, kept", w.balance(w.token, bad.addr), 9_000_000)
	w.eq("the sweep key's tokens", w.balance(w.token, key.Address), 0)

	// In flight: the next sweep waits for it, then, once it is older than
	// ReplaceAfter, replaces it at its nonce.
	fix := []deposit.Flush{w.entry(bad, w.token)}
	stuck, err := s.Send(w.ctx, fix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(w.ctx, fix); !errors.Is(err, deposit.ErrInFlight) {
		t.Fatalf("a second sweep while one is in flight: %v", err)
	}
	if o, err := s.Outcome(w.ctx, stuck); err != nil || o.Mined {
		t.Fatalf("in flight: %+v %v", o, err)
	}
	s.ReplaceAfter = 0
	repl, err := s.Send(w.ctx, fix)
	if err != nil || repl == stuck {
		t.Fatalf("replacement: %s %v", repl.Hex(), err)
	}
	o = outcome(t, w, s, repl)
	if o.Moved()[bad.addr].Int64() != 9_000_000 {
		t.Fatalf("replacement moved %v", o.Moved())
	}
	if _, err := s.Outcome(w.ctx, stuck); !errors.Is(err, deposit.ErrDropped) {
		t.Fatalf("the replaced sweep: %v", err)
	}
	rtx, _, err := sim.Client.TransactionByHash(w.ctx, repl)
	if err != nil || rtx.Nonce() != 1 {
		t.Fatalf("the replacement's nonce: %v %v", rtx, err)
	}
	w.eq("the fixed entry's payout", w.balance(w.token, bad.payout), 9_000_000)

	// Swept again: nothing left, each entry reports 0 moved.
	s.ReplaceAfter = time.Minute
	h, err = s.Send(w.ctx, batch[:2])
	if err != nil {
		t.Fatal(err)
	}
	for d, v := range outcome(t, w, s, h).Moved() {
		if v.Sign() != 0 {
			t.Fatalf("second sweep moved %v from %s", v, d.Hex())
		}
	}
}

// TestFlushGas: a full batch (MaxFlushes deposit addresses, each creating
// its forwarder and moving a token) fits the sweeper's gas limit with every
// entry flushed, and one entry's measured cost is well within GasPerFlush.
func TestFlushGas(t *testing.T) {
	w, sim := simWorld(t)
	key := testchain.NewAccount()
	w.pay(common.Address{}, key.Address, 1e18)
	s, err := deposit.NewSweeper(w.ctx, sim.RPC, w.factory, key.Key)
	if err != nil {
		t.Fatal(err)
	}
	one := w.checkout("vch_gas_one")
	w.pay(w.token, one.addr, 1)
	h, err := s.Send(w.ctx, []deposit.Flush{w.entry(one, w.token)})
	if err != nil {
		t.Fatal(err)
	}
	outcome(t, w, s, h)
	r, err := sim.Client.TransactionReceipt(w.ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one flush creating its forwarder and moving a token: %d gas", r.GasUsed)
	if r.GasUsed*5/4 > deposit.GasBase+deposit.GasPerFlush {
		t.Fatalf("one flush used %d gas: GasPerFlush %d leaves less than 25%% room", r.GasUsed, deposit.GasPerFlush)
	}

	var fs []deposit.Flush
	var hs []common.Hash
	nonce, err := sim.Client.PendingNonceAt(w.ctx, w.owner.Address)
	if err != nil {
		t.Fatal(err)
	}
	for i := range deposit.MaxFlushes {
		co := w.checkout(fmt.Sprint("vch_gas_", i))
		fs = append(fs, w.entry(co, w.token))
		h, err := testchain.SendNonce(w.ctx, sim.Client, w.owner, nonce, &w.token, nil, testchain.TransferData(co.addr, big.NewInt(int64(1000+i))), 0)
		if err != nil {
			t.Fatal(err)
		}
		nonce++
		hs = append(hs, h)
	}
	w.mine(hs...)
	if h, err = s.Send(w.ctx, fs); err != nil {
		t.Fatal(err)
	}
	o := outcome(t, w, s, h)
	if len(o.Flushed) != deposit.MaxFlushes {
		t.Fatalf("a full batch flushed %d of %d", len(o.Flushed), deposit.MaxFlushes)
	}
	for i, f := range fs {
		if got := o.Moved()[s.Deposit(f)]; got == nil || got.Int64() != int64(1000+i) {
			t.Fatalf("entry %d moved %v", i, got)
		}
	}
	if r, err = sim.Client.TransactionReceipt(w.ctx, h); err == nil {
		t.Logf("a batch of %d: %d gas (limit %d)", deposit.MaxFlushes, r.GasUsed, deposit.GasBase+deposit.GasPerFlush*deposit.MaxFlushes)
	}
}

// TestSweeperOnAnvil: Flush (send, then wait for the receipt) against an
// independent node, after a refusal for lack of gas.
func TestSweeperOnAnvil(t *testing.T) {
	w, a := anvilWorld(t)
	key := testchain.NewAccount()
	s, err := deposit.NewSweeper(w.ctx, a.Client.Client(), w.factory, key.Key)
	if err != nil {
		t.Fatal(err)
	}
	s.PollInterval = 50 * time.Millisecond
	x, y := w.checkout("vch_anvil_x"), w.checkout("vch_anvil_y")
	w.pay(w.token, x.addr, 4_000_000)
	w.pay(common.Address{}, y.addr, 12_345)
	batch := []deposit.Flush{w.entry(x, w.token), w.entry(y, common.Address{})}
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	if _, _, err := s.Flush(ctx, batch); err == nil {
		t.Fatal("a sweep without gas succeeded")
	}
	w.pay(common.Address{}, key.Address, 1e17)
	h, moved, err := s.Flush(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 2 || moved[x.addr].Int64() != 4_000_000 || moved[y.addr].Int64() != 12_345 {
		t.Fatalf("moved %v", moved)
	}
	tx, _, err := a.Client.TransactionByHash(ctx, h)
	if err != nil || tx.Nonce() != 0 {
		t.Fatalf("nonce %v %v", tx, err)
	}
	w.eq("x's payout", w.balance(w.token, x.payout), 4_000_000)
	w.eq("y's payout", w.balance(common.Address{}, y.payout), 12_345)
}
