package evm_test

import (
	"context"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

// world is a simulated chain served over HTTP (so round trips can be
// counted), with a real token, a decoy token using the same symbol, a payer
// holding both and a payee.
type world struct {
	sim          *testchain.Sim
	srv          *httptest.Server
	requests     atomic.Int64
	fail         atomic.Bool
	chain        *evm.Chain
	payer, payee testchain.Account
	token, decoy common.Address
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{payer: testchain.NewAccount(), payee: testchain.NewAccount()}
	w.sim = testchain.NewSim(w.payer.Address)
	t.Cleanup(func() { _ = w.sim.Close() })
	h := testchain.Handler(w.sim.RPC, nil)
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.requests.Add(1)
		if w.fail.Load() {
			http.Error(rw, "upstream down", http.StatusBadGateway)
			return
		}
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(w.srv.Close)
	ctx := context.Background()
	var err error
	w.chain, err = evm.Dial(ctx, w.srv.URL+"/v3/SECRETKEY", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.chain.Close)
	w.token = w.deploy(t, testchain.DeployTokenData("USD Coin", "USDC", 6))
	w.decoy = w.deploy(t, testchain.DeployTokenData("USD Coin", "USDC", 6))
	w.send(t, &w.token, nil, testchain.MintData(w.payer.Address, big.NewInt(1_000_000_000)), 0)
	w.send(t, &w.decoy, nil, testchain.MintData(w.payer.Address, big.NewInt(1_000_000_000)), 0)
	w.sim.Commit()
	return w
}

func (w *world) send(t *testing.T, to *common.Address, value *big.Int, data []byte, gas uint64) common.Hash {
	t.Helper()
	h, err := testchain.Send(context.Background(), w.sim.Client, w.payer, to, value, data, gas)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (w *world) deploy(t *testing.T, code []byte) common.Address {
	t.Helper()
	h := w.send(t, nil, nil, code, 0)
	w.sim.Commit()
	r, err := w.sim.Client.TransactionReceipt(context.Background(), h)
	if err != nil || r.Status != 1 {
		t.Fatalf("deploy: %v %v", r, err)
	}
	return r.ContractAddress
}

func lower(a common.Address) string { return strings.ToLower(a.Hex()) }

func TestTransactions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	id, err := w.chain.ChainID(ctx)
	if err != nil || id != "1337" {
		t.Fatalf("ChainID = %q, %v; want 1337", id, err)
	}

	// AdjustTime moves the next block's time: the adapter must report the
	// block's own time, not the wall clock.
	if err := w.sim.AdjustTime(time.Hour); err != nil {
		t.Fatal(err)
	}
	pay := w.send(t, &w.token, nil, testchain.TransferData(w.payee.Address, big.NewInt(12_500_000)), 0)
	decoy := w.send(t, &w.decoy, nil, testchain.TransferData(w.payee.Address, big.NewInt(99_000_000)), 0)
	native := w.send(t, &w.payee.Address, big.NewInt(3e15), nil, 0)
	// More than the payer holds: mined, reverted (status 0), no logs.
	reverted := w.send(t, &w.token, nil, testchain.TransferData(w.payee.Address, big.NewInt(5_000_000_000)), 100_000)
	w.sim.Commit()
	unknown := "0x" + strings.Repeat("ab", 32)
	head, err := w.chain.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	block, err := w.sim.Client.HeaderByNumber(ctx, new(big.Int).SetUint64(head))
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(int64(block.Time), 0); time.Until(got) < 50*time.Minute {
		t.Fatalf("block time %v: AdjustTime(1h) not visible", got)
	}

	before := w.requests.Load()
	hashes := []string{pay.Hex(), decoy.Hex(), native.Hex(), reverted.Hex(), unknown}
	txs, err := w.chain.Transactions(ctx, hashes)
	if err != nil {
		t.Fatal(err)
	}
	// One batch for transactions and receipts, one for the (single, new) block's header.
	if n := w.requests.Load() - before; n != 2 {
		t.Fatalf("Transactions took %d HTTP round trips, want 2", n)
	}
	if len(txs) != len(hashes) {
		t.Fatalf("got %d results for %d hashes", len(txs), len(hashes))
	}
	for i, tx := range txs[:4] {
		if !tx.Found || tx.BlockNumber != head || tx.BlockHash != strings.ToLower(block.Hash().Hex()) ||
			!tx.BlockTime.Equal(time.Unix(int64(block.Time), 0)) || tx.From != lower(w.payer.Address) || tx.Hash != hashes[i] {
			t.Fatalf("tx %d: %+v (head %d, block %s)", i, tx, head, block.Hash().Hex())
		}
	}
	want := func(tx settlement.Tx, asset string, to common.Address, amount int64) {
		t.Helper()
		if len(tx.Credits) != 1 {
			t.Fatalf("credits %+v, want one", tx.Credits)
		}
		c := tx.Credits[0]
		if c.Asset != asset || c.To != lower(to) || c.From != lower(w.payer.Address) || c.Amount.Cmp(big.NewInt(amount)) != 0 {
			t.Fatalf("credit %+v, want %s %d to %s", c, asset, amount, lower(to))
		}
	}
	if !txs[0].Success || txs[0].To != lower(w.token) || txs[0].Value.Sign() != 0 {
		t.Fatalf("token transfer: %+v", txs[0])
	}
	want(txs[0], lower(w.token), w.payee.Address, 12_500_000)
	// The decoy's Transfer is reported as the decoy's (its own Asset), never
	// as the real token's.
	want(txs[1], lower(w.decoy), w.payee.Address, 99_000_000)
	want(txs[2], settlement.Native, w.payee.Address, 3e15)
	if txs[2].Value.Cmp(big.NewInt(3e15)) != 0 || txs[2].To != lower(w.payee.Address) {
		t.Fatalf("native: %+v", txs[2])
	}
	if txs[3].Success || len(txs[3].Credits) != 0 {
		t.Fatalf("reverted transaction: %+v", txs[3])
	}
	if string(txs[3].Data) != string(testchain.TransferData(w.payee.Address, big.NewInt(5_000_000_000))) {
		t.Fatalf("input data not reported")
	}
	if txs[4].Found || txs[4].Hash != unknown {
		t.Fatalf("unknown hash: %+v", txs[4])
	}

	// Block times are cached by hash: the same lookup again is one round trip.
	before = w.requests.Load()
	if _, err := w.chain.Transactions(ctx, hashes); err != nil {
		t.Fatal(err)
	}
	if n := w.requests.Load() - before; n != 1 {
		t.Fatalf("repeat lookup took %d round trips, want 1", n)
	}

	// A pending (sent, not mined) transaction is not found yet.
	pending := w.send(t, &w.token, nil, testchain.TransferData(w.payee.Address, big.NewInt(1)), 0)
	txs, err = w.chain.Transactions(ctx, []string{pending.Hex()})
	if err != nil || txs[0].Found {
		t.Fatalf("pending: %+v %v", txs, err)
	}
	if _, err := w.chain.Transactions(ctx, []string{"0x1234"}); err == nil {
		t.Fatal("a malformed hash must be an error")
	}

	// BlockHashes: one round trip for many heights; past the head is absent.
	before = w.requests.Load()
	got, err := w.chain.BlockHashes(ctx, []uint64{1, head, head + 5})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.requests.Load() - before; n != 1 {
		t.Fatalf("BlockHashes took %d round trips", n)
	}
	if got[head] != strings.ToLower(block.Hash().Hex()) || got[1] == "" || len(got) != 2 {
		t.Fatalf("BlockHashes = %v", got)
	}
}

func TestReorg(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	parent, err := w.sim.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pay := w.send(t, &w.token, nil, testchain.TransferData(w.payee.Address, big.NewInt(7)), 0)
	w.sim.Commit()
	txs, err := w.chain.Transactions(ctx, []string{pay.Hex()})
	if err != nil || !txs[0].Found {
		t.Fatalf("%+v %v", txs, err)
	}
	n, minedIn := txs[0].BlockNumber, txs[0].BlockHash

	// A longer side chain from the parent: the payment's block is gone.
	if err := w.sim.Fork(parent.Hash()); err != nil {
		t.Fatal(err)
	}
	w.sim.Commit()
	w.sim.Commit()
	hs, err := w.chain.BlockHashes(ctx, []uint64{n})
	if err != nil {
		t.Fatal(err)
	}
	if hs[n] == "" || hs[n] == minedIn {
		t.Fatalf("height %d after the reorg: %q (was %s)", n, hs[n], minedIn)
	}
	txs, err = w.chain.Transactions(ctx, []string{pay.Hex()})
	if err != nil {
		t.Fatal(err)
	}
	if txs[0].Found && txs[0].BlockHash == minedIn {
		t.Fatalf("the receipt still points into the dropped block: %+v", txs[0])
	}
	// The node puts the dropped transaction back in its pool; it is mined
	// again in a new block, which the adapter reports.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.sim.Commit()
		txs, err = w.chain.Transactions(ctx, []string{pay.Hex()})
		if err != nil {
			t.Fatal(err)
		}
		if txs[0].Found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reorged transaction was not mined again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if txs[0].BlockHash == minedIn || len(txs[0].Credits) != 1 {
		t.Fatalf("re-mined: %+v", txs[0])
	}
}

// RPC errors are errors (never "not found"), the endpoint's secret path is
// never in them, and the adapter works again once the node is back.
func TestRPCDownAndBack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pay := w.send(t, &w.token, nil, testchain.TransferData(w.payee.Address, big.NewInt(7)), 0)
	w.sim.Commit()

	w.fail.Store(true)
	if _, err := w.chain.Head(ctx); err == nil {
		t.Fatal("Head: no error from a failing node")
	}
	txs, err := w.chain.Transactions(ctx, []string{pay.Hex()})
	if err == nil {
		t.Fatalf("Transactions: no error from a failing node: %+v", txs)
	}
	if _, err := w.chain.BlockHashes(ctx, []uint64{1}); err == nil {
		t.Fatal("BlockHashes: no error from a failing node")
	}

	w.fail.Store(false)
	txs, err = w.chain.Transactions(ctx, []string{pay.Hex()})
	if err != nil || !txs[0].Found || len(txs[0].Credits) != 1 {
		t.Fatalf("after recovery: %+v %v", txs, err)
	}

	// A node that is not there at all: the error must not carry the URL's
	// path (providers put API keys there).
	w.srv.Close()
	_, err = w.chain.Head(ctx)
	if err == nil {
		t.Fatal("no error from a closed server")
	}
	if strings.Contains(err.Error(), "SECRETKEY") {
		t.Fatalf("the RPC URL's secret leaked into an error: %v", err)
	}
}
