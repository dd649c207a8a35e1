package solana_test

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/solana"
)

// fixture is testdata/mainnet.json: recorded-shape replies keyed by request.
type fixture struct {
	Names        map[string]string          `json:"names"`
	GenesisHash  string                     `json:"getGenesisHash"`
	Slot         uint64                     `json:"getSlot"`
	Transactions map[string]json.RawMessage `json:"getTransaction"`
	Statuses     struct {
		Context json.RawMessage            `json:"context"`
		Value   map[string]json.RawMessage `json:"value"`
	} `json:"getSignatureStatuses"`
	Blocks map[string]json.RawMessage `json:"getBlock"`
	// From testdata/references.json.
	Signatures map[string][]sigEntry `json:"getSignaturesForAddress"`
}

// sigEntry is one getSignaturesForAddress entry.
type sigEntry struct {
	BlockTime          int64           `json:"blockTime"`
	ConfirmationStatus string          `json:"confirmationStatus"`
	Err                json.RawMessage `json:"err"`
	Memo               *string         `json:"memo"`
	Signature          string          `json:"signature"`
	Slot               uint64          `json:"slot"`
}

// node serves the fixture as a Solana JSON-RPC endpoint, checking that the
// adapter asks the way a real node needs (jsonParsed, version 0).
type node struct {
	t        *testing.T
	fx       fixture
	requests atomic.Int64
	fail     atomic.Bool
	srv      *httptest.Server
	// slot is the node's confirmed slot (getSlot; minContextSlot is
	// checked against it): the fixture's unless a test moves it.
	slot atomic.Uint64
	// onSignatures, when set, sees each getSignaturesForAddress batch's
	// HTTP request before it is answered (the requests counter already
	// counts it).
	onSignatures func()
	// extra are more getSignaturesForAddress lists, newest first, made by
	// a test (a reference with more than a page of mentions).
	extra map[string][]sigEntry
	// asked records each getSignaturesForAddress call's params.
	mu    sync.Mutex
	asked []sigParams
}

// sigParams are a getSignaturesForAddress call's params.
type sigParams struct {
	Address string
	Opt     struct {
		Commitment     string  `json:"commitment"`
		Limit          *int    `json:"limit"`
		MinContextSlot *uint64 `json:"minContextSlot"`
		Before         string  `json:"before"`
	}
}

func newNode(t *testing.T) *node {
	t.Helper()
	b, err := os.ReadFile("testdata/mainnet.json")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t}
	if err := json.Unmarshal(b, &n.fx); err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Names      map[string]string     `json:"names"`
		Signatures map[string][]sigEntry `json:"getSignaturesForAddress"`
	}
	b, err = os.ReadFile("testdata/references.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	for k, v := range refs.Names {
		n.fx.Names[k] = v
	}
	n.fx.Signatures = refs.Signatures
	n.slot.Store(n.fx.Slot)
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.srv.Close)
	return n
}

type rpcReq struct {
	ID     json.RawMessage   `json:"id"`
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

func (n *node) serve(w http.ResponseWriter, r *http.Request) {
	n.requests.Add(1)
	if n.fail.Load() {
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	}
	var reqs []rpcReq
	if err := json.NewDecoder(r.Body).Decode(&reqs); err != nil {
		n.t.Errorf("the adapter sent a non-batch or bad body: %v", err)
		http.Error(w, "bad", 400)
		return
	}
	for _, q := range reqs {
		if q.Method == "getSignaturesForAddress" && n.onSignatures != nil {
			n.onSignatures()
			break
		}
	}
	var out []map[string]any
	for _, q := range reqs {
		res, rpcErr := n.answer(q)
		m := map[string]any{"jsonrpc": "2.0", "id": q.ID}
		if rpcErr != nil {
			m["error"] = rpcErr
		} else {
			m["result"] = res
		}
		out = append(out, m)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (n *node) answer(q rpcReq) (any, any) {
	str := func(i int) string {
		var s string
		_ = json.Unmarshal(q.Params[i], &s)
		return s
	}
	switch q.Method {
	case "getGenesisHash":
		return n.fx.GenesisHash, nil
	case "getSlot":
		return n.slot.Load(), nil
	case "getSignaturesForAddress":
		return n.signatures(q)
	case "getTransaction":
		var opt struct {
			Encoding string `json:"encoding"`
			Version  *int   `json:"maxSupportedTransactionVersion"`
		}
		_ = json.Unmarshal(q.Params[1], &opt)
		if opt.Encoding != "jsonParsed" || opt.Version == nil || *opt.Version != 0 {
			// What a real node says to a legacy request for a v0 transaction.
			return nil, map[string]any{"code": -32015, "message": "Transaction version (0) is not supported by the requesting client. Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0"}
		}
		if tx, ok := n.fx.Transactions[str(0)]; ok {
			return tx, nil
		}
		return nil, nil
	case "getSignatureStatuses":
		var sigs []string
		_ = json.Unmarshal(q.Params[0], &sigs)
		vals := make([]json.RawMessage, len(sigs))
		for i, s := range sigs {
			vals[i] = n.fx.Statuses.Value[s]
			if vals[i] == nil {
				vals[i] = json.RawMessage("null")
			}
		}
		return map[string]any{"context": n.fx.Statuses.Context, "value": vals}, nil
	case "getBlock":
		var slot uint64
		_ = json.Unmarshal(q.Params[0], &slot)
		b, ok := n.fx.Blocks[strconv.FormatUint(slot, 10)]
		if !ok {
			return nil, map[string]any{"code": -32004, "message": "Block not available for slot " + strconv.FormatUint(slot, 10)}
		}
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != nil {
			return nil, e.Error
		}
		return b, nil
	}
	return nil, map[string]any{"code": -32601, "message": "Method not found"}
}

func TestSolana(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	c, err := solana.New(n.srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	names := n.fx.Names

	if id, err := c.ChainID(ctx); err != nil || id != "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d" {
		t.Fatalf("ChainID = %q %v", id, err)
	}
	if head, err := c.Head(ctx); err != nil || head != 312034650 {
		t.Fatalf("Head = %d %v", head, err)
	}

	sigs := []string{names["sig_usdc"], names["sig_sol"], names["sig_failed"], names["sig_decoy"], names["sig_unknown"]}
	before := n.requests.Load()
	txs, err := c.Transactions(ctx, sigs)
	if err != nil {
		t.Fatal(err)
	}
	// One batch for the transactions and their statuses, one for the
	// blockhashes of the three distinct slots.
	if got := n.requests.Load() - before; got != 2 {
		t.Fatalf("Transactions took %d round trips, want 2", got)
	}
	credit := func(tx settlement.Tx, asset, from, to string, amount int64) {
		t.Helper()
		for _, c := range tx.Credits {
			if c.Asset == asset && c.To == to {
				if c.From != from || c.Amount.Cmp(big.NewInt(amount)) != 0 {
					t.Fatalf("credit %+v, want %d from %s", c, amount, from)
				}
				return
			}
		}
		t.Fatalf("no %s credit to %s in %+v", asset, to, tx.Credits)
	}
	noCredit := func(tx settlement.Tx, asset, to string) {
		t.Helper()
		for _, c := range tx.Credits {
			if c.Asset == asset && c.To == to {
				t.Fatalf("unexpected credit %+v", c)
			}
		}
	}

	usdc := txs[0]
	if !usdc.Found || !usdc.Success || !usdc.Finalized || usdc.BlockNumber != 312034501 ||
		usdc.BlockTime != time.Unix(1733140001, 0).UTC() || usdc.From != names["payer"] || usdc.BlockHash == "" {
		t.Fatalf("usdc: %+v", usdc)
	}
	// 12.5 USDC to the payee's owner (not its token account); the payer's
	// side fell, so no USDC credit to the payer.
	credit(usdc, names["usdcMint"], names["payer"], names["payee"], 12_500_000)
	noCredit(usdc, names["usdcMint"], names["payer"])
	noCredit(usdc, settlement.Native, names["payee"]) // the fee moved no SOL to anyone

	sol := txs[1]
	if !sol.Found || !sol.Success || sol.Finalized || sol.BlockNumber != 312034577 {
		t.Fatalf("sol: %+v", sol)
	}
	credit(sol, settlement.Native, names["payer"], names["payee"], 250_000_000)

	failed := txs[2]
	if !failed.Found || failed.Success || len(failed.Credits) != 0 || !failed.Finalized {
		t.Fatalf("failed: %+v", failed)
	}
	if failed.BlockHash != usdc.BlockHash {
		t.Fatalf("same slot, other blockhash: %s vs %s", failed.BlockHash, usdc.BlockHash)
	}

	decoy := txs[3]
	// The decoy mint is reported as its own asset, to the payee's owner,
	// even though the payee's token account was created in the same
	// transaction (no pre balance). The rent moved SOL to the new token
	// account, not to the payee.
	credit(decoy, names["decoyMint"], names["payer"], names["payee"], 99_000_000)
	noCredit(decoy, names["usdcMint"], names["payee"])
	noCredit(decoy, settlement.Native, names["payee"])
	credit(decoy, settlement.Native, names["payer"], names["payeeDecoyATA"], 2_039_280)

	if txs[4].Found || txs[4].Hash != names["sig_unknown"] {
		t.Fatalf("unknown: %+v", txs[4])
	}

	// Finalized slots' blockhashes are cached: only the confirmed ones are
	// asked again.
	before = n.requests.Load()
	if _, err := c.Transactions(ctx, sigs[:1]); err != nil {
		t.Fatal(err)
	}
	if got := n.requests.Load() - before; got != 1 {
		t.Fatalf("finalized lookup took %d round trips, want 1", got)
	}

	// BlockHashes: present, skipped and not yet produced slots.
	hs, err := c.BlockHashes(ctx, []uint64{312034501, 312034591, 312034700})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[312034501] != usdc.BlockHash {
		t.Fatalf("BlockHashes = %v", hs)
	}

	if _, err := c.Transactions(ctx, []string{"0x" + strings.Repeat("ab", 32)}); err == nil {
		t.Fatal("an EVM hash was accepted as a signature")
	}

	// A failing node is an error (never "not found"), and recovers.
	n.fail.Store(true)
	if _, err := c.Transactions(ctx, sigs); err == nil {
		t.Fatal("no error from a failing node")
	}
	if _, err := c.Head(ctx); err == nil {
		t.Fatal("Head: no error from a failing node")
	}
	n.fail.Store(false)
	if txs, err := c.Transactions(ctx, sigs); err != nil || !txs[0].Found {
		t.Fatalf("after recovery: %v", err)
	}
}
