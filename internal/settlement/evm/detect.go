package evm

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/voucherd/voucherd/internal/settlement"
)

// MaxTopicsPerQuery is how many deposit addresses one eth_getLogs asks
// about (geth refuses more than 1,000 alternatives in a topic position;
// providers are often stricter). More addresses are more eth_getLogs in
// the same batch: still one round trip.
const MaxTopicsPerQuery = 500

var (
	_ settlement.Detector = (*Chain)(nil)
	_ settlement.Scanner  = (*Chain)(nil)
)

// Detect implements settlement.Detector (Scan without block hashes).
func (c *Chain) Detect(ctx context.Context, after, upTo uint64, watches []settlement.Watch) ([]settlement.Found, error) {
	found, _, err := c.Scan(ctx, after, upTo, watches, nil)
	return found, err
}

// rpcBlock is the part of eth_getBlockByNumber a scan reads; Transactions
// is filled only when the full block was asked for.
type rpcBlock struct {
	Hash      common.Hash    `json:"hash"`
	Number    *hexutil.Big   `json:"number"`
	Timestamp hexutil.Uint64 `json:"timestamp"`
	// Transactions are hashes when the header was asked for, objects
	// when the full block was: decoded only then.
	Transactions json.RawMessage `json:"transactions"`
}

type rpcFoundLog struct {
	Address     common.Address `json:"address"`
	Topics      []common.Hash  `json:"topics"`
	Data        hexutil.Bytes  `json:"data"`
	BlockNumber hexutil.Uint64 `json:"blockNumber"`
	BlockHash   common.Hash    `json:"blockHash"`
	TxHash      common.Hash    `json:"transactionHash"`
	Removed     bool           `json:"removed"`
}

// Scan implements settlement.Scanner, in one batch request (one round trip
// while it has at most MaxBatch calls): eth_getLogs of the watched tokens'
// Transfer logs whose `to` is a watched address over after+1..upTo (one
// call per MaxTopicsPerQuery addresses, whatever the number of blocks);
// the block at each height of that range (with its transactions when a
// watch is for the native currency, to read their value and `to`; its
// header otherwise) and at each of heights. It returns what pays a watch,
// in chain order, and the canonical hash at each height it read. The block
// times it reads are cached, so looking the found transactions up next
// costs no header round trip.
func (c *Chain) Scan(ctx context.Context, after, upTo uint64, watches []settlement.Watch, heights []uint64) ([]settlement.Found, map[uint64]string, error) {
	hashes := map[uint64]string{}
	if upTo <= after && len(heights) == 0 {
		return nil, hashes, nil
	}
	native := map[common.Address]settlement.Watch{}
	byToken := map[common.Address][]common.Hash{}
	tokenWatch := map[[2]common.Address]settlement.Watch{}
	for _, w := range watches {
		if !common.IsHexAddress(w.Address) {
			return nil, nil, fmt.Errorf("watch address %q: not an EVM address", w.Address)
		}
		a := common.HexToAddress(w.Address)
		if w.Asset == settlement.Native {
			native[a] = w
			continue
		}
		if !common.IsHexAddress(w.Asset) {
			return nil, nil, fmt.Errorf("watch asset %q: not a token address", w.Asset)
		}
		tk := common.HexToAddress(w.Asset)
		if _, dup := tokenWatch[[2]common.Address{tk, a}]; !dup {
			byToken[tk] = append(byToken[tk], common.BytesToHash(a.Bytes()))
		}
		tokenWatch[[2]common.Address{tk, a}] = w
	}
	var elems []rpc.BatchElem
	// Logs: per token, addresses in chunks.
	var logs []*[]rpcFoundLog
	if upTo > after {
		tokens := make([]common.Address, 0, len(byToken))
		for tk := range byToken {
			tokens = append(tokens, tk)
		}
		slices.SortFunc(tokens, func(a, b common.Address) int { return strings.Compare(a.Hex(), b.Hex()) })
		for _, tk := range tokens {
			tos := byToken[tk]
			for len(tos) > 0 {
				k := min(len(tos), MaxTopicsPerQuery)
				out := new([]rpcFoundLog)
				logs = append(logs, out)
				elems = append(elems, rpc.BatchElem{Method: "eth_getLogs", Args: []any{map[string]any{
					"fromBlock": hexutil.Uint64(after + 1), "toBlock": hexutil.Uint64(upTo),
					"address": tk, "topics": []any{transferTopic, nil, tos[:k]},
				}}, Result: out})
				tos = tos[k:]
			}
		}
	}
	// Blocks: the scanned range (full when a watch is native), and the
	// other heights asked about.
	type blockQuery struct {
		height uint64
		full   bool
		raw    json.RawMessage
	}
	var blocks []*blockQuery
	want := map[uint64]bool{}
	for h := after + 1; h <= upTo; h++ {
		want[h] = true
	}
	for _, h := range heights {
		want[h] = true
	}
	ordered := make([]uint64, 0, len(want))
	for h := range want {
		ordered = append(ordered, h)
	}
	slices.Sort(ordered)
	for _, h := range ordered {
		q := &blockQuery{height: h, full: len(native) > 0 && h > after && h <= upTo}
		blocks = append(blocks, q)
		elems = append(elems, rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{"0x" + strconv.FormatUint(h, 16), q.full}, Result: &q.raw})
	}
	if err := c.batch(ctx, elems); err != nil {
		return nil, nil, err
	}
	var found []settlement.Found
	for _, q := range blocks {
		if isNull(q.raw) {
			if q.height <= upTo && q.height > after {
				// A height the node does not have (yet): the range is not
				// scanned; the caller tries again.
				return nil, nil, fmt.Errorf("block %d: not available (reorg or lagging node; retry)", q.height)
			}
			continue
		}
		var b rpcBlock
		if err := json.Unmarshal(q.raw, &b); err != nil {
			return nil, nil, fmt.Errorf("block %d: %w", q.height, err)
		}
		if b.Number == nil || (*big.Int)(b.Number).Uint64() != q.height {
			return nil, nil, fmt.Errorf("block %d: the node answered another height", q.height)
		}
		hash := strings.ToLower(b.Hash.Hex())
		hashes[q.height] = hash
		c.times.Add(b.Hash, time.Unix(int64(b.Timestamp), 0).UTC())
		if !q.full {
			continue
		}
		var txs []rpcTx
		if err := json.Unmarshal(b.Transactions, &txs); err != nil {
			return nil, nil, fmt.Errorf("block %d: transactions: %w", q.height, err)
		}
		for _, tx := range txs {
			if tx.To == nil || tx.Value == nil || (*big.Int)(tx.Value).Sign() <= 0 {
				continue
			}
			if w, ok := native[*tx.To]; ok {
				found = append(found, settlement.Found{Hash: strings.ToLower(tx.Hash.Hex()), Watch: w, BlockNumber: q.height})
			}
		}
	}
	for _, out := range logs {
		for _, l := range *out {
			if l.Removed || len(l.Topics) != 3 || l.Topics[0] != transferTopic || len(l.Data) != 32 {
				continue
			}
			to := common.BytesToAddress(l.Topics[2].Bytes())
			w, ok := tokenWatch[[2]common.Address{l.Address, to}]
			if !ok {
				continue
			}
			if h := hashes[uint64(l.BlockNumber)]; h != "" && h != strings.ToLower(l.BlockHash.Hex()) {
				// The logs and the blocks straddle a reorg: ask again.
				return nil, nil, fmt.Errorf("block %d: logs and block disagree on its hash (reorg in progress; retry)", uint64(l.BlockNumber))
			}
			found = append(found, settlement.Found{Hash: strings.ToLower(l.TxHash.Hex()), Watch: w, BlockNumber: uint64(l.BlockNumber)})
		}
	}
	// Chain order, each transaction once per watch (a transaction with two
	// Transfer logs to the same address is one payment of their sum).
	slices.SortStableFunc(found, func(a, b settlement.Found) int {
		switch {
		case a.BlockNumber != b.BlockNumber:
			if a.BlockNumber < b.BlockNumber {
				return -1
			}
			return 1
		}
		return 0
	})
	seen := map[[2]string]bool{}
	out := found[:0]
	for _, f := range found {
		k := [2]string{f.Hash, f.Watch.Address + "/" + f.Watch.Asset}
		if !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out, hashes, nil
}
