// Package evm is the settlement.Chain adapter for EVM networks over
// Ethereum JSON-RPC (go-ethereum's rpc client). Every lookup is a batch
// request: Transactions asks for each hash's transaction and receipt in one
// round trip, plus one more for the timestamps of blocks it has not seen
// before (block hash → time is immutable and cached); BlockHashes asks for
// every height in one round trip. So a poll costs a few round trips whatever
// the number of vouchers, and its size grows with the hashes and heights
// asked about.
//
// The adapter reports what the node shows and judges nothing: which credits
// pay which voucher is the settlement package's business. Addresses are
// lower-case hex; amounts are big.Int in the asset's smallest unit.
package evm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/voucherd/voucherd/internal/settlement"
)

// MaxBatch is the most calls one JSON-RPC batch carries (geth's default
// limit is 1000; public providers are often lower). Larger lookups are split
// into several batches.
const MaxBatch = 200

// transferTopic is keccak256("Transfer(address,address,uint256)").
var transferTopic = crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))

var txHashRe = regexp.MustCompile(`^0x[0-9a-fA-F]{64}$`)

// Chain is a settlement.Chain over one node. It is safe for concurrent use.
type Chain struct {
	rpc      *rpc.Client
	redact   string // the dialed URL, removed from error texts (it may hold an API key)
	times    *lru.Cache[common.Hash, time.Time]
	maxBatch int
}

var _ settlement.Chain = (*Chain)(nil)

// New wraps an RPC client (in-process, HTTP or websocket).
func New(c *rpc.Client) *Chain {
	times, _ := lru.New[common.Hash, time.Time](4096)
	return &Chain{rpc: c, times: times, maxBatch: MaxBatch}
}

// Dial connects to an Ethereum JSON-RPC endpoint (http(s):// or ws(s)://).
// Each HTTP request is bounded by timeout. The URL never appears in errors:
// providers put API keys in it.
func Dial(ctx context.Context, rawURL string, timeout time.Duration) (*Chain, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, errors.New("rpcUrl is not a URL")
	}
	switch u.Scheme {
	case "http", "https", "ws", "wss":
	default:
		return nil, fmt.Errorf("rpcUrl scheme %q: want http, https, ws or wss", u.Scheme)
	}
	c, err := rpc.DialOptions(ctx, rawURL, rpc.WithHTTPClient(&http.Client{Timeout: timeout}))
	if err != nil {
		return nil, redact(err, rawURL)
	}
	ch := New(c)
	ch.redact = rawURL
	return ch, nil
}

// Close closes the underlying client.
func (c *Chain) Close() { c.rpc.Close() }

// RPC is the underlying client (price feeds read contracts through it).
func (c *Chain) RPC() *rpc.Client { return c.rpc }

// redact removes the endpoint URL (and its path and query, where API keys
// live) from an error's text.
func redact(err error, rawURL string) error {
	if err == nil || rawURL == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, rawURL) {
		if u, perr := url.Parse(rawURL); perr == nil && u.Path != "" && strings.Contains(msg, u.Path) {
			msg = strings.ReplaceAll(msg, u.Path, "/…")
		} else {
			return err
		}
	}
	short := rawURL
	if u, perr := url.Parse(rawURL); perr == nil {
		short = u.Scheme + "://" + u.Host
	}
	return &redactedError{msg: strings.ReplaceAll(msg, rawURL, short), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (c *Chain) call(ctx context.Context, result any, method string, args ...any) error {
	return redact(c.rpc.CallContext(ctx, result, method, args...), c.redact)
}

// batch runs elems in batches of at most maxBatch; any transport or
// per-call error fails the whole lookup (the caller retries later).
func (c *Chain) batch(ctx context.Context, elems []rpc.BatchElem) error {
	for len(elems) > 0 {
		n := min(len(elems), c.maxBatch)
		if err := c.rpc.BatchCallContext(ctx, elems[:n]); err != nil {
			return redact(err, c.redact)
		}
		for _, e := range elems[:n] {
			if e.Error != nil {
				return fmt.Errorf("%s: %w", e.Method, redact(e.Error, c.redact))
			}
		}
		elems = elems[n:]
	}
	return nil
}

// ChainID implements settlement.Chain: eth_chainId in decimal.
func (c *Chain) ChainID(ctx context.Context) (string, error) {
	var id hexutil.Big
	if err := c.call(ctx, &id, "eth_chainId"); err != nil {
		return "", err
	}
	return (*big.Int)(&id).String(), nil
}

// Head implements settlement.Chain: eth_blockNumber.
func (c *Chain) Head(ctx context.Context) (uint64, error) {
	var n hexutil.Uint64
	if err := c.call(ctx, &n, "eth_blockNumber"); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// rpcTx is the part of eth_getTransactionByHash this adapter reads. It is
// decoded field by field (not as types.Transaction) so that transaction
// types go-ethereum does not know, such as OP-stack deposits on Base, do not
// break a lookup.
type rpcTx struct {
	Hash        common.Hash     `json:"hash"`
	From        common.Address  `json:"from"`
	To          *common.Address `json:"to"`
	Value       *hexutil.Big    `json:"value"`
	Input       hexutil.Bytes   `json:"input"`
	BlockNumber *hexutil.Big    `json:"blockNumber"`
	BlockHash   *common.Hash    `json:"blockHash"`
}

type rpcLog struct {
	Address common.Address `json:"address"`
	Topics  []common.Hash  `json:"topics"`
	Data    hexutil.Bytes  `json:"data"`
	Removed bool           `json:"removed"`
}

type rpcReceipt struct {
	Status      *hexutil.Uint64 `json:"status"`
	BlockNumber *hexutil.Big    `json:"blockNumber"`
	BlockHash   common.Hash     `json:"blockHash"`
	Logs        []rpcLog        `json:"logs"`
}

type rpcHeader struct {
	Hash      common.Hash    `json:"hash"`
	Number    *hexutil.Big   `json:"number"`
	Timestamp hexutil.Uint64 `json:"timestamp"`
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// Transactions implements settlement.Chain. One batch asks for every
// transaction and receipt; a second asks for the headers of the blocks
// whose time is not cached yet (distinct blocks, each once). A hash the node
// does not know, or knows only as pending (no receipt), is Found: false.
// Credits are empty for a transaction that failed (it moved nothing).
func (c *Chain) Transactions(ctx context.Context, hashes []string) ([]settlement.Tx, error) {
	out := make([]settlement.Tx, len(hashes))
	if len(hashes) == 0 {
		return out, nil
	}
	txs := make([]json.RawMessage, len(hashes))
	rcs := make([]json.RawMessage, len(hashes))
	elems := make([]rpc.BatchElem, 0, 2*len(hashes))
	for i, h := range hashes {
		if !txHashRe.MatchString(h) {
			return nil, fmt.Errorf("transaction hash %q: want 0x and 64 hex digits", h)
		}
		elems = append(elems,
			rpc.BatchElem{Method: "eth_getTransactionByHash", Args: []any{h}, Result: &txs[i]},
			rpc.BatchElem{Method: "eth_getTransactionReceipt", Args: []any{h}, Result: &rcs[i]})
	}
	if err := c.batch(ctx, elems); err != nil {
		return nil, err
	}

	var missing []common.Hash
	seen := map[common.Hash]bool{}
	for i, h := range hashes {
		out[i].Hash = h
		if isNull(rcs[i]) {
			continue // unknown, or pending: not found until mined
		}
		if isNull(txs[i]) {
			return nil, fmt.Errorf("transaction %s: the node has a receipt but no transaction (inconsistent node; retry)", h)
		}
		var tx rpcTx
		if err := json.Unmarshal(txs[i], &tx); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", h, err)
		}
		var rc rpcReceipt
		if err := json.Unmarshal(rcs[i], &rc); err != nil {
			return nil, fmt.Errorf("receipt %s: %w", h, err)
		}
		if rc.BlockNumber == nil || rc.Status == nil {
			return nil, fmt.Errorf("receipt %s: no block number or status (pre-Byzantium receipts are not supported)", h)
		}
		if tx.BlockHash == nil || *tx.BlockHash != rc.BlockHash {
			// The two answers straddle a reorg (or come from two nodes
			// behind a balancer): ask again next poll.
			return nil, fmt.Errorf("transaction %s: transaction and receipt disagree on the block (reorg in progress; retry)", h)
		}
		t := &out[i]
		t.Found = true
		t.Success = *rc.Status == 1
		t.BlockNumber = (*big.Int)(rc.BlockNumber).Uint64()
		t.BlockHash = strings.ToLower(rc.BlockHash.Hex())
		t.From = lower(tx.From)
		if tx.To != nil {
			t.To = lower(*tx.To)
		}
		t.Value = new(big.Int)
		if tx.Value != nil {
			t.Value = (*big.Int)(tx.Value)
		}
		t.Data = tx.Input
		if t.Success {
			t.Credits = credits(tx, rc.Logs)
		}
		if _, ok := c.times.Get(rc.BlockHash); !ok && !seen[rc.BlockHash] {
			seen[rc.BlockHash] = true
			missing = append(missing, rc.BlockHash)
		}
	}

	if len(missing) > 0 {
		heads := make([]json.RawMessage, len(missing))
		elems = elems[:0]
		for i, bh := range missing {
			elems = append(elems, rpc.BatchElem{Method: "eth_getBlockByHash", Args: []any{bh, false}, Result: &heads[i]})
		}
		if err := c.batch(ctx, elems); err != nil {
			return nil, err
		}
		for i, bh := range missing {
			if isNull(heads[i]) {
				// The block was reorged away between the two batches.
				return nil, fmt.Errorf("block %s: gone (reorg in progress; retry)", bh.Hex())
			}
			var hd rpcHeader
			if err := json.Unmarshal(heads[i], &hd); err != nil {
				return nil, fmt.Errorf("block %s: %w", bh.Hex(), err)
			}
			c.times.Add(bh, time.Unix(int64(hd.Timestamp), 0).UTC())
		}
	}
	for i := range out {
		if out[i].Found {
			bt, _ := c.times.Get(common.HexToHash(out[i].BlockHash))
			if bt.IsZero() { // evicted between the two steps (more distinct blocks than the cache holds)
				return nil, fmt.Errorf("block %s: time not available; retry", out[i].BlockHash)
			}
			out[i].BlockTime = bt
		}
	}
	return out, nil
}

// credits turns a successful transaction into what it moved: each
// Transfer(address indexed, address indexed, uint256) log (three topics and
// a 32-byte data word, which tells an ERC-20 Transfer from an ERC-721 one
// with the same topic), and the native value to its `to`.
func credits(tx rpcTx, logs []rpcLog) []settlement.Credit {
	var out []settlement.Credit
	if tx.To != nil && tx.Value != nil && (*big.Int)(tx.Value).Sign() > 0 {
		out = append(out, settlement.Credit{
			Asset:  settlement.Native,
			From:   lower(tx.From),
			To:     lower(*tx.To),
			Amount: new(big.Int).Set((*big.Int)(tx.Value)),
		})
	}
	for _, l := range logs {
		if l.Removed || len(l.Topics) != 3 || l.Topics[0] != transferTopic || len(l.Data) != 32 {
			continue
		}
		out = append(out, settlement.Credit{
			Asset:  lower(l.Address),
			From:   lower(common.BytesToAddress(l.Topics[1].Bytes())),
			To:     lower(common.BytesToAddress(l.Topics[2].Bytes())),
			Amount: new(big.Int).SetBytes(l.Data),
		})
	}
	return out
}

func lower(a common.Address) string { return strings.ToLower(a.Hex()) }

// BlockHashes implements settlement.Chain: eth_getBlockByNumber for every
// height in one batch; a height past the head is absent.
func (c *Chain) BlockHashes(ctx context.Context, heights []uint64) (map[uint64]string, error) {
	out := make(map[uint64]string, len(heights))
	if len(heights) == 0 {
		return out, nil
	}
	heads := make([]json.RawMessage, len(heights))
	elems := make([]rpc.BatchElem, len(heights))
	for i, h := range heights {
		elems[i] = rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{"0x" + strconv.FormatUint(h, 16), false}, Result: &heads[i]}
	}
	if err := c.batch(ctx, elems); err != nil {
		return nil, err
	}
	for i, h := range heights {
		if isNull(heads[i]) {
			continue
		}
		var hd rpcHeader
		if err := json.Unmarshal(heads[i], &hd); err != nil {
			return nil, fmt.Errorf("block %d: %w", h, err)
		}
		if hd.Number == nil || (*big.Int)(hd.Number).Uint64() != h {
			return nil, fmt.Errorf("block %d: the node answered another height", h)
		}
		out[h] = strings.ToLower(hd.Hash.Hex())
		c.times.Add(hd.Hash, time.Unix(int64(hd.Timestamp), 0).UTC())
	}
	return out, nil
}
