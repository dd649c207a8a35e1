package solana_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/solana"
)

// signatures answers getSignaturesForAddress as a node does: the
// transactions that name the address, newest first, those in slots the
// node has confirmed, from before (excluded) on, at most limit (1000 by
// default and at most); a minContextSlot above the node's slot is error
// -32016.
func (n *node) signatures(q rpcReq) (any, any) {
	var p sigParams
	if len(q.Params) < 1 || json.Unmarshal(q.Params[0], &p.Address) != nil {
		return nil, map[string]any{"code": -32602, "message": "Invalid params"}
	}
	if len(q.Params) > 1 {
		_ = json.Unmarshal(q.Params[1], &p.Opt)
	}
	n.mu.Lock()
	n.asked = append(n.asked, p)
	n.mu.Unlock()
	if b, err := chain.DecodeBase58(p.Address); err != nil || len(b) != 32 {
		return nil, map[string]any{"code": -32602, "message": "Invalid param: Invalid"}
	}
	if p.Opt.Commitment == "processed" {
		return nil, map[string]any{"code": -32602, "message": "Method does not support commitment below `confirmed`"}
	}
	slot := n.slot.Load()
	if p.Opt.MinContextSlot != nil && *p.Opt.MinContextSlot > slot {
		return nil, map[string]any{"code": -32016, "message": "Minimum context slot has not been reached", "data": map[string]any{"contextSlot": slot}}
	}
	limit := 1000
	if p.Opt.Limit != nil {
		limit = *p.Opt.Limit
	}
	if limit < 1 || limit > 1000 {
		return nil, map[string]any{"code": -32602, "message": "Invalid limit; max 1000"}
	}
	list, ok := n.fx.Signatures[p.Address]
	if !ok {
		list = n.extra[p.Address]
	}
	out := []sigEntry{}
	started := p.Opt.Before == ""
	for _, e := range list {
		if !started {
			started = e.Signature == p.Opt.Before
			continue
		}
		if e.Slot > slot {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

func (n *node) askedFor() []sigParams {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]sigParams(nil), n.asked...)
}

// TestDetect finds Solana Pay payments by their reference keys from
// recorded-shape getSignaturesForAddress replies (testdata/references.json,
// written by hand from the documented reply shape and the transactions of
// testdata/mainnet.json: no validator is reachable offline).
func TestDetect(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	c, err := solana.New(n.srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	names := n.fx.Names
	usdcWatch := settlement.Watch{Address: names["refUSDC"], Asset: names["usdcMint"]}
	solWatch := settlement.Watch{Address: names["refSOL"], Asset: settlement.Native}
	idleWatch := settlement.Watch{Address: names["refIdle"], Asset: names["usdcMint"]}
	watches := []settlement.Watch{usdcWatch, solWatch, idleWatch}
	const after, head = 312034500, 312034650

	// The node has moved on since the head was read: it lists sig_later
	// (slot 312034660), which is past upTo and left for the next range.
	n.slot.Store(312034660)
	before := n.requests.Load()
	found, err := c.Detect(ctx, after, head, watches)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.requests.Load() - before; got != 1 {
		t.Fatalf("Detect took %d round trips, want 1", got)
	}
	want := []settlement.Found{
		{Hash: names["sig_usdc"], Watch: usdcWatch, BlockNumber: 312034501},
		{Hash: names["sig_sol"], Watch: solWatch, BlockNumber: 312034577},
		{Hash: names["sig_decoy"], Watch: usdcWatch, BlockNumber: 312034590},
	}
	// sig_failed (same reference, slot 312034501, err set) moved nothing.
	if fmt.Sprint(found) != fmt.Sprint(want) {
		t.Fatalf("Detect =\n%v\nwant\n%v", found, want)
	}
	asked := n.askedFor()
	if len(asked) != 3 {
		t.Fatalf("asked %d references, want 3", len(asked))
	}
	for _, a := range asked {
		if a.Opt.Commitment != "confirmed" || a.Opt.Limit == nil || *a.Opt.Limit != solana.SignaturesPage ||
			a.Opt.MinContextSlot == nil || *a.Opt.MinContextSlot != head || a.Opt.Before != "" {
			t.Fatalf("asked %+v", a)
		}
	}

	// What the watcher does next: look the found signatures up. Each
	// names its reference as an account, and the settlement rules see
	// what it paid (the decoy pays another mint).
	hashes := make([]string, len(found))
	for i, f := range found {
		hashes[i] = f.Hash
	}
	txs, err := c.Transactions(ctx, hashes)
	if err != nil {
		t.Fatal(err)
	}
	for i, tx := range txs {
		if !tx.Found || !tx.Success || tx.BlockNumber != found[i].BlockNumber {
			t.Fatalf("lookup of %s: %+v", found[i].Hash, tx)
		}
	}
	paid := func(tx settlement.Tx, asset string) bool {
		for _, cr := range tx.Credits {
			if cr.Asset == asset && cr.To == names["payee"] {
				return true
			}
		}
		return false
	}
	if !paid(txs[0], names["usdcMint"]) || !paid(txs[1], settlement.Native) || paid(txs[2], names["usdcMint"]) || !paid(txs[2], names["decoyMint"]) {
		t.Fatalf("credits: %+v / %+v / %+v", txs[0].Credits, txs[1].Credits, txs[2].Credits)
	}

	// The range: after excluded, upTo included.
	found, err = c.Detect(ctx, 312034501, 312034590, watches)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found[0].Hash != names["sig_sol"] || found[1].Hash != names["sig_decoy"] {
		t.Fatalf("Detect(501, 590] = %v", found)
	}
	// The next range picks sig_later up.
	found, err = c.Detect(ctx, head, 312034660, watches)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Hash != names["sig_later"] || found[0].Watch != solWatch || found[0].BlockNumber != 312034660 {
		t.Fatalf("Detect(650, 660] = %v", found)
	}

	// Two watches on one reference: one call, each watch reported.
	other := settlement.Watch{Address: names["refSOL"], Asset: names["usdcMint"]}
	n.mu.Lock()
	n.asked = nil
	n.mu.Unlock()
	found, err = c.Detect(ctx, 312034570, 312034580, []settlement.Watch{solWatch, other, solWatch})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found[0].Watch != solWatch || found[1].Watch != other || found[0].Hash != names["sig_sol"] || found[1].Hash != names["sig_sol"] {
		t.Fatalf("two watches on one reference: %v", found)
	}
	if a := n.askedFor(); len(a) != 1 {
		t.Fatalf("one reference asked %d times", len(a))
	}

	// A node that has not reached upTo answers an error, never a short
	// list (the range would not be asked again).
	n.slot.Store(head)
	if _, err := c.Detect(ctx, head, head+5, watches); err == nil || !strings.Contains(err.Error(), "-32016") {
		t.Fatalf("lagging node: %v", err)
	}
	// Nothing to ask: no request.
	before = n.requests.Load()
	if f, err := c.Detect(ctx, after, head, nil); err != nil || f != nil {
		t.Fatalf("no watches: %v %v", f, err)
	}
	if f, err := c.Detect(ctx, head, head, watches); err != nil || f != nil {
		t.Fatalf("empty range: %v %v", f, err)
	}
	if n.requests.Load() != before {
		t.Fatal("a request for nothing")
	}
	// An EVM address is no reference.
	if _, err := c.Detect(ctx, after, head, []settlement.Watch{{Address: "0x" + strings.Repeat("ab", 20), Asset: settlement.Native}}); err == nil {
		t.Fatal("an EVM address was taken for a reference")
	}
	// A failing node is an error, and recovers.
	n.fail.Store(true)
	if _, err := c.Detect(ctx, after, head, watches); err == nil {
		t.Fatal("no error from a failing node")
	}
	n.fail.Store(false)
	if found, err := c.Detect(ctx, after, head, watches); err != nil || len(found) != 3 {
		t.Fatalf("after recovery: %v %v", found, err)
	}
}

// sig is a well-formed, made-up signature (base58 of 64 bytes) numbered i.
func sig(i int) string {
	b := make([]byte, 64)
	b[0] = 0x5a
	b[62], b[63] = byte(i>>8), byte(i)
	return chain.EncodeBase58(b)
}

// ref is a made-up reference key (base58 of 32 bytes) numbered i.
func ref(i int) string {
	b := make([]byte, 32)
	b[0] = 0x7c
	b[30], b[31] = byte(i>>8), byte(i)
	return chain.EncodeBase58(b)
}

// TestDetectManyReferences: 1,000 open references are asked side by side
// (batches of solana.MaxBatch in flight at once), so a poll waits one round
// trip, not ten.
func TestDetectManyReferences(t *testing.T) {
	n := newNode(t)
	const refs = 1000
	batches := (refs + solana.MaxBatch - 1) / solana.MaxBatch
	// Each batch is held until all are in flight (or 10 s pass): a Detect
	// that sent them one after another would have one in flight at a time.
	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	n.onSignatures = func() {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == batches {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
	}
	n.extra = map[string][]sigEntry{ref(7): {{Signature: sig(1), Slot: 312034600, ConfirmationStatus: "confirmed", Err: json.RawMessage("null")}}}
	c, err := solana.New(n.srv.URL, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]settlement.Watch, refs)
	for i := range ws {
		ws[i] = settlement.Watch{Address: ref(i), Asset: settlement.Native}
	}
	before := n.requests.Load()
	found, err := c.Detect(context.Background(), 312034500, 312034650, ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.requests.Load() - before; got != int64(batches) {
		t.Fatalf("%d HTTP requests, want %d batches", got, batches)
	}
	if most != batches {
		t.Fatalf("at most %d of %d batches were in flight at once", most, batches)
	}
	if len(found) != 1 || found[0].Hash != sig(1) || found[0].Watch != ws[7] {
		t.Fatalf("found %v", found)
	}
	if a := n.askedFor(); len(a) != refs {
		t.Fatalf("asked %d references, want %d", len(a), refs)
	}
}

// TestDetectPagesAFullList: a reference named by more than a page of
// transactions in the range (here 1,200 failed ones, spam, above the
// payment) is paged further until the range is covered; the payment at the
// bottom is found.
func TestDetectPagesAFullList(t *testing.T) {
	n := newNode(t)
	spammed := ref(1)
	var list []sigEntry
	for i := 0; i < 1200; i++ { // newest first
		list = append(list, sigEntry{Signature: sig(1000 + i), Slot: 312034640 - uint64(i/10), ConfirmationStatus: "confirmed",
			Err: json.RawMessage(`{"InstructionError":[0,{"Custom":1}]}`)})
	}
	list = append(list, sigEntry{Signature: sig(1), Slot: 312034510, ConfirmationStatus: "finalized", Err: json.RawMessage("null")})
	list = append(list, sigEntry{Signature: sig(2), Slot: 312034400, ConfirmationStatus: "finalized", Err: json.RawMessage("null")})
	n.extra = map[string][]sigEntry{spammed: list}
	c, err := solana.New(n.srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := settlement.Watch{Address: spammed, Asset: settlement.Native}
	idle := settlement.Watch{Address: n.fx.Names["refIdle"], Asset: settlement.Native}
	before := n.requests.Load()
	found, err := c.Detect(context.Background(), 312034500, 312034650, []settlement.Watch{idle, w})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.requests.Load() - before; got != 2 {
		t.Fatalf("%d round trips, want 2 (one more page for the spammed reference only)", got)
	}
	if len(found) != 1 || found[0].Hash != sig(1) || found[0].BlockNumber != 312034510 {
		t.Fatalf("found %v", found)
	}
	asked := n.askedFor()
	if len(asked) != 3 || asked[2].Address != spammed || asked[2].Opt.Before != sig(1000+solana.SignaturesPage-1) {
		t.Fatalf("asked %+v", asked)
	}
}
