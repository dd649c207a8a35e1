// Package solana is the settlement.Chain and settlement.Detector adapter
// for Solana over its JSON-RPC API: a small client (net/http +
// encoding/json, batch requests) rather than a full SDK, since the adapter
// needs six read methods.
//
//   - Transactions: getTransaction (jsonParsed, maxSupportedTransactionVersion
//     0, commitment confirmed) per signature and one getSignatureStatuses,
//     in one batch; then getBlock for the blockhash of each distinct slot not
//     yet known (a second batch; finalized slots are cached).
//   - Head: getSlot (confirmed). ChainID: getGenesisHash.
//   - BlockHashes: getBlock per slot in one batch; a skipped or not
//     (yet/any more) available slot is absent.
//   - Detect: getSignaturesForAddress (confirmed) per Solana Pay reference
//     key, batches sent side by side (detect.go).
//
// Credits come from the balance changes the node records for the
// transaction: for each (owner, mint) the post minus pre SPL token balance
// (meta.preTokenBalances / postTokenBalances, summed over the owner's token
// accounts of that mint), and for each account its SOL (lamports) change;
// positive changes are credits. A failed transaction (meta.err not null)
// moved nothing and has none. Finalized is the signature's
// "finalized" confirmation status.
//
// No Solana validator runs offline, so the tests serve recorded RPC replies
// (testdata/*.json) from a local HTTP server.
package solana

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/settlement"
)

// MaxBatch is the most calls one batch carries (getSignatureStatuses takes
// at most 256 signatures; providers cap batch sizes too).
const MaxBatch = 100

// maxResponse bounds one RPC response body.
const maxResponse = 64 << 20

// Chain is a settlement.Chain over one Solana RPC endpoint. Safe for
// concurrent use.
type Chain struct {
	url    string
	http   *http.Client
	id     atomic.Int64
	mu     sync.Mutex
	hashes map[uint64]string // finalized slot → blockhash
}

var _ settlement.Chain = (*Chain)(nil)

// New makes a client for the endpoint rawURL (http or https). Each request
// is bounded by timeout.
func New(rawURL string, timeout time.Duration) (*Chain, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, errors.New("rpcUrl must be an http or https URL")
	}
	return &Chain{url: rawURL, http: &http.Client{Timeout: timeout}, hashes: map[uint64]string{}}, nil
}

// Close releases idle connections.
func (c *Chain) Close() { c.http.CloseIdleConnections() }

// RPCError is an error the node answered with.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("solana rpc error %d: %s", e.Code, e.Message) }

// Slot-level errors that mean "no block here" rather than a failure.
const (
	errBlockNotAvailable       = -32004 // not yet (or not any more) available
	errSlotSkipped             = -32007
	errLongTermStorageSlotSkip = -32009
	errBlockStatusNotAvailable = -32014
	errSlotNotRooted           = -32016 // not yet rooted on a finalized request
)

type call struct {
	method string
	params []any
	result any       // decoded into when there is no error
	err    *RPCError // the node's error for this call
}

type request struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  []any  `json:"params,omitempty"`
}

type response struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// batch sends calls as JSON-RPC batches of at most MaxBatch. A transport
// error, a bad HTTP status or an unparseable answer fails the whole lookup;
// per-call node errors are left in each call's err for the caller to judge.
func (c *Chain) batch(ctx context.Context, calls []*call) error {
	for len(calls) > 0 {
		n := min(len(calls), MaxBatch)
		if err := c.send(ctx, calls[:n]); err != nil {
			return err
		}
		calls = calls[n:]
	}
	return nil
}

func (c *Chain) send(ctx context.Context, calls []*call) error {
	reqs := make([]request, len(calls))
	byID := make(map[int64]*call, len(calls))
	for i, cl := range calls {
		id := c.id.Add(1)
		reqs[i] = request{JSONRPC: "2.0", ID: id, Method: cl.method, Params: cl.params}
		byID[id] = cl
	}
	body, err := json.Marshal(reqs)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return c.redact(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.redact(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return c.redact(err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("solana rpc: HTTP %d", resp.StatusCode)
	}
	if len(data) > maxResponse {
		return errors.New("solana rpc: response too large")
	}
	var resps []response
	if err := json.Unmarshal(data, &resps); err != nil {
		// A node may answer a whole batch with one error object.
		var one response
		if json.Unmarshal(data, &one) == nil && one.Error != nil {
			return one.Error
		}
		return fmt.Errorf("solana rpc: unreadable answer: %w", err)
	}
	got := 0
	for _, r := range resps {
		cl, ok := byID[r.ID]
		if !ok {
			continue
		}
		delete(byID, r.ID)
		got++
		if r.Error != nil {
			cl.err = r.Error
			continue
		}
		if err := json.Unmarshal(r.Result, cl.result); err != nil {
			return fmt.Errorf("solana rpc %s: %w", cl.method, err)
		}
	}
	if got != len(calls) {
		return fmt.Errorf("solana rpc: %d of %d answers missing", len(calls)-got, len(calls))
	}
	return nil
}

// redact keeps the endpoint URL (which may hold an API key) out of errors.
func (c *Chain) redact(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, c.url) {
		return err
	}
	short := "the rpcUrl"
	if u, perr := url.Parse(c.url); perr == nil {
		short = u.Scheme + "://" + u.Host
	}
	return errors.New(strings.ReplaceAll(msg, c.url, short))
}

func (c *Chain) one(ctx context.Context, method string, params []any, result any) error {
	cl := &call{method: method, params: params, result: result}
	if err := c.send(ctx, []*call{cl}); err != nil {
		return err
	}
	if cl.err != nil {
		return cl.err
	}
	return nil
}

// ChainID implements settlement.Chain: the genesis hash.
func (c *Chain) ChainID(ctx context.Context) (string, error) {
	var h string
	err := c.one(ctx, "getGenesisHash", nil, &h)
	return h, err
}

// Head implements settlement.Chain: the newest confirmed slot.
func (c *Chain) Head(ctx context.Context) (uint64, error) {
	var s uint64
	err := c.one(ctx, "getSlot", []any{map[string]any{"commitment": "confirmed"}}, &s)
	return s, err
}

type uiAmount struct {
	Amount   string `json:"amount"`
	Decimals int    `json:"decimals"`
}

type tokenBalance struct {
	AccountIndex int      `json:"accountIndex"`
	Mint         string   `json:"mint"`
	Owner        string   `json:"owner"`
	UITokenAmt   uiAmount `json:"uiTokenAmount"`
}

type accountKey struct {
	Pubkey string `json:"pubkey"`
	Signer bool   `json:"signer"`
}

type txResult struct {
	Slot      uint64 `json:"slot"`
	BlockTime *int64 `json:"blockTime"`
	Meta      *struct {
		Err               json.RawMessage `json:"err"`
		PreBalances       []uint64        `json:"preBalances"`
		PostBalances      []uint64        `json:"postBalances"`
		PreTokenBalances  []tokenBalance  `json:"preTokenBalances"`
		PostTokenBalances []tokenBalance  `json:"postTokenBalances"`
	} `json:"meta"`
	Transaction struct {
		Signatures []string `json:"signatures"`
		Message    struct {
			AccountKeys []accountKey `json:"accountKeys"`
		} `json:"message"`
	} `json:"transaction"`
}

type sigStatus struct {
	Slot               uint64          `json:"slot"`
	Err                json.RawMessage `json:"err"`
	ConfirmationStatus string          `json:"confirmationStatus"`
}

type sigStatuses struct {
	Value []*sigStatus `json:"value"`
}

type blockResult struct {
	Blockhash string `json:"blockhash"`
	BlockTime *int64 `json:"blockTime"`
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// Transactions implements settlement.Chain.
func (c *Chain) Transactions(ctx context.Context, sigs []string) ([]settlement.Tx, error) {
	out := make([]settlement.Tx, len(sigs))
	if len(sigs) == 0 {
		return out, nil
	}
	for _, s := range sigs {
		if !validSignature(s) {
			return nil, fmt.Errorf("signature %q: want base58 of 64 bytes", s)
		}
	}
	for start := 0; start < len(sigs); start += MaxBatch / 2 {
		end := min(start+MaxBatch/2, len(sigs))
		if err := c.transactions(ctx, sigs[start:end], out[start:end]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *Chain) transactions(ctx context.Context, sigs []string, out []settlement.Tx) error {
	txs := make([]json.RawMessage, len(sigs))
	var st sigStatuses
	calls := make([]*call, 0, len(sigs)+1)
	for i, s := range sigs {
		calls = append(calls, &call{method: "getTransaction", params: []any{s, map[string]any{
			"encoding": "jsonParsed", "maxSupportedTransactionVersion": 0, "commitment": "confirmed",
		}}, result: &txs[i]})
	}
	calls = append(calls, &call{method: "getSignatureStatuses", params: []any{sigs, map[string]any{"searchTransactionHistory": true}}, result: &st})
	if err := c.send(ctx, calls); err != nil {
		return err
	}
	for _, cl := range calls {
		if cl.err != nil {
			return fmt.Errorf("%s: %w", cl.method, cl.err)
		}
	}
	if len(st.Value) != len(sigs) {
		return fmt.Errorf("getSignatureStatuses: %d statuses for %d signatures", len(st.Value), len(sigs))
	}

	var slots []uint64
	need := map[uint64]bool{}
	for i, s := range sigs {
		t := &out[i]
		t.Hash = s
		if isNull(txs[i]) {
			continue // unknown, or not yet confirmed
		}
		var r txResult
		if err := json.Unmarshal(txs[i], &r); err != nil {
			return fmt.Errorf("transaction %s: %w", s, err)
		}
		if r.Meta == nil {
			return fmt.Errorf("transaction %s: no meta (the node does not keep transaction status)", s)
		}
		keys := r.Transaction.Message.AccountKeys
		if len(keys) == 0 || len(r.Meta.PreBalances) != len(keys) || len(r.Meta.PostBalances) != len(keys) {
			return fmt.Errorf("transaction %s: account keys and balances do not line up", s)
		}
		t.Found = true
		t.Success = isNull(r.Meta.Err)
		t.BlockNumber = r.Slot
		if r.BlockTime != nil {
			t.BlockTime = time.Unix(*r.BlockTime, 0).UTC()
		}
		t.From = keys[0].Pubkey // the fee payer
		if status := st.Value[i]; status != nil {
			t.Finalized = status.ConfirmationStatus == "finalized" && status.Slot == r.Slot
		}
		if t.Success {
			cr, err := credits(keys, r)
			if err != nil {
				return fmt.Errorf("transaction %s: %w", s, err)
			}
			t.Credits = cr
		}
		c.mu.Lock()
		h, ok := c.hashes[r.Slot]
		c.mu.Unlock()
		if ok {
			t.BlockHash = h
		} else if !need[r.Slot] {
			need[r.Slot] = true
			slots = append(slots, r.Slot)
		}
	}
	if len(slots) == 0 {
		return nil
	}
	got, err := c.blocks(ctx, slots)
	if err != nil {
		return err
	}
	for i := range out {
		if !out[i].Found || out[i].BlockHash != "" {
			continue
		}
		b, ok := got[out[i].BlockNumber]
		if !ok {
			// The transaction's slot has no block on the node's fork any
			// more: it is between forks right now. Ask again next poll.
			return fmt.Errorf("slot %d of transaction %s has no block (fork switch in progress; retry)", out[i].BlockNumber, out[i].Hash)
		}
		out[i].BlockHash = b
		if out[i].Finalized {
			c.mu.Lock()
			c.hashes[out[i].BlockNumber] = b
			c.mu.Unlock()
		}
	}
	return nil
}

// credits turns a successful transaction's balance changes into credits.
func credits(keys []accountKey, r txResult) ([]settlement.Credit, error) {
	var out []settlement.Credit
	// SOL: each account's lamport change.
	var payers []string
	for i, k := range keys {
		pre, post := r.Meta.PreBalances[i], r.Meta.PostBalances[i]
		switch {
		case post > pre:
			out = append(out, settlement.Credit{Asset: settlement.Native, To: k.Pubkey, Amount: new(big.Int).SetUint64(post - pre)})
		case post < pre:
			payers = append(payers, k.Pubkey)
		}
	}
	if len(payers) > 0 {
		for i := range out {
			out[i].From = payers[0] // the fee payer, or the account that sent the SOL when it is another
			if len(payers) > 1 && payers[0] == keys[0].Pubkey {
				out[i].From = payers[1]
			}
		}
	}

	// SPL: per (owner, mint), post − pre summed over the owner's token
	// accounts (an owner may hold a mint in several accounts).
	type key struct{ owner, mint string }
	delta := map[key]*big.Int{}
	var order []key
	add := func(b tokenBalance, sign int) error {
		if b.AccountIndex < 0 || b.AccountIndex >= len(keys) {
			return fmt.Errorf("token balance for account index %d out of range", b.AccountIndex)
		}
		if b.Owner == "" {
			return fmt.Errorf("token balance of account %s has no owner (the node is too old to say)", keys[b.AccountIndex].Pubkey)
		}
		v, ok := new(big.Int).SetString(b.UITokenAmt.Amount, 10)
		if !ok || v.Sign() < 0 {
			return fmt.Errorf("token amount %q is not a whole number", b.UITokenAmt.Amount)
		}
		k := key{b.Owner, b.Mint}
		d, ok := delta[k]
		if !ok {
			d = new(big.Int)
			delta[k] = d
			order = append(order, k)
		}
		if sign < 0 {
			d.Sub(d, v)
		} else {
			d.Add(d, v)
		}
		return nil
	}
	for _, b := range r.Meta.PreTokenBalances {
		if err := add(b, -1); err != nil {
			return nil, err
		}
	}
	for _, b := range r.Meta.PostTokenBalances {
		if err := add(b, +1); err != nil {
			return nil, err
		}
	}
	for _, k := range order {
		d := delta[k]
		if d.Sign() <= 0 {
			continue
		}
		from := keys[0].Pubkey
		for _, k2 := range order { // the owner whose balance of the mint fell, when there is one
			if k2.mint == k.mint && delta[k2].Sign() < 0 {
				from = k2.owner
				break
			}
		}
		out = append(out, settlement.Credit{Asset: k.mint, From: from, To: k.owner, Amount: new(big.Int).Set(d)})
	}
	return out, nil
}

// blocks asks for the block at each slot; slots without one are absent.
func (c *Chain) blocks(ctx context.Context, slots []uint64) (map[uint64]string, error) {
	res := make([]*blockResult, len(slots))
	calls := make([]*call, len(slots))
	for i, s := range slots {
		res[i] = new(blockResult)
		calls[i] = &call{method: "getBlock", params: []any{s, map[string]any{
			"encoding": "json", "transactionDetails": "none", "rewards": false,
			"maxSupportedTransactionVersion": 0, "commitment": "confirmed",
		}}, result: &res[i]}
	}
	if err := c.batch(ctx, calls); err != nil {
		return nil, err
	}
	out := make(map[uint64]string, len(slots))
	for i, cl := range calls {
		if cl.err != nil {
			switch cl.err.Code {
			case errBlockNotAvailable, errSlotSkipped, errLongTermStorageSlotSkip, errBlockStatusNotAvailable, errSlotNotRooted:
				continue
			}
			return nil, fmt.Errorf("getBlock %d: %w", slots[i], cl.err)
		}
		if res[i] == nil || res[i].Blockhash == "" {
			continue
		}
		out[slots[i]] = res[i].Blockhash
	}
	return out, nil
}

// BlockHashes implements settlement.Chain.
func (c *Chain) BlockHashes(ctx context.Context, slots []uint64) (map[uint64]string, error) {
	if len(slots) == 0 {
		return map[uint64]string{}, nil
	}
	return c.blocks(ctx, slots)
}

// validSignature: base58 of exactly 64 bytes (at most 88 digits; checked
// first to keep the decoder away from long input).
func validSignature(s string) bool {
	if s == "" || len(s) > 88 {
		return false
	}
	b, err := chain.DecodeBase58(s)
	return err == nil && len(b) == 64
}
