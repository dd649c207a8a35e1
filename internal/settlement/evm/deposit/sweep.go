package deposit

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
)

// MaxFlushes is the most deposit addresses one sweep transaction flushes.
// Its gas limit is GasBase + GasPerFlush for each: 15,060,000 for 30, below
// the per-transaction cap of 2^24 (16,777,216) that Ethereum enforces since
// Osaka (EIP-7825).
const MaxFlushes = 30

// The gas limit of a flushMany transaction: a fixed budget per entry (not
// eth_estimateGas, which depends on the state at the moment of the
// estimate). One flush that creates the forwarder and moves an ERC-20 costs
// about 380,000 gas (most of it the forwarder's creation: its 1.2 kB of
// code at 200 gas a byte; later flushes of the same address about 40,000;
// TestFlushGas measures it); the budget leaves room for tokens with
// costlier transfers. Only the gas used is paid,
// but the key's balance must cover the limit times the fee cap.
const (
	GasBase     = 60_000
	GasPerFlush = 500_000
)

// Errors a caller of Send/Flush tells apart; each means "nothing moved,
// try again later" (the funds stay at the deposit addresses).
var (
	// ErrInFlight: the previous sweep transaction is not mined yet and not
	// old enough to be replaced.
	ErrInFlight = errors.New("deposit: the previous sweep transaction is not mined yet")
	// ErrReverted: the sweep transaction was mined and reverted.
	ErrReverted = errors.New("deposit: the sweep transaction reverted")
	// ErrDropped: the node no longer knows the sweep transaction (replaced by
	// a later sweep, or evicted from its pool) and it was never mined.
	ErrDropped = errors.New("deposit: the sweep transaction was dropped")
)

// ParseKey reads a sweep (or deployer) key: 64 hex digits, with or without
// 0x. The error never repeats the input (it is a private key).
func ParseKey(s string) (*ecdsa.PrivateKey, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "0x")
	if len(s) != 64 {
		return nil, errors.New("want 64 hex digits (an secp256k1 private key)")
	}
	k, err := crypto.HexToECDSA(s)
	if err != nil {
		return nil, errors.New("not a valid secp256k1 private key in hex")
	}
	return k, nil
}

// Sweeper sends the factory's flushMany for batches of deposit addresses,
// signed by a key that only pays gas: whatever the batch says, the contract
// moves each address's funds to the payout its address was made for, and
// nowhere else. It talks to the node over the same go-ethereum rpc client as
// the settlement adapter (evm.Chain.RPC()).
//
// Nonces: at most one sweep transaction is in flight per Sweeper. Send uses
// the node's count of the key's transactions, so a transaction refused by the
// node (no gas, a node error) spends no nonce and the next Send reuses it; a
// transaction the node accepted but has not mined makes the next Send answer
// ErrInFlight, until it is older than ReplaceAfter: then the next Send
// replaces it (same nonce, a higher gas price), and the replaced one's
// Outcome becomes ErrDropped. Safe for concurrent use.
type Sweeper struct {
	rpc     *rpc.Client
	factory common.Address
	key     *ecdsa.PrivateKey
	from    common.Address
	signer  types.Signer

	// ReplaceAfter is how long an unmined sweep transaction blocks the next
	// before it is replaced (default 1 minute).
	ReplaceAfter time.Duration
	// PollInterval is how often Flush asks for the receipt (default 1 s).
	PollInterval time.Duration

	mu   sync.Mutex
	last *sent // the last transaction sent, until it is mined or replaced
}

type sent struct {
	hash  common.Hash
	nonce uint64
	fee   fee
	at    time.Time
}

// fee is an EIP-1559 transaction's tip and fee cap.
type fee struct{ tip, cap *big.Int }

// fees tips what the node suggests (eth_maxPriorityFeePerGas) and caps the
// fee at twice the latest base fee plus the tip, so the transaction stays
// includable while the base fee doubles. (A legacy price above the node's
// suggestion would feed back into it on a quiet chain, where the sweep's
// own transactions are the recent tips.)
func (s *Sweeper) fees(ctx context.Context) (fee, error) {
	var tip hexutil.Big
	var head struct {
		BaseFee *hexutil.Big `json:"baseFeePerGas"`
	}
	elems := []rpc.BatchElem{
		{Method: "eth_maxPriorityFeePerGas", Result: &tip},
		{Method: "eth_getBlockByNumber", Args: []any{"latest", false}, Result: &head},
	}
	if err := s.rpc.BatchCallContext(ctx, elems); err != nil {
		return fee{}, err
	}
	for _, e := range elems {
		if e.Error != nil {
			return fee{}, fmt.Errorf("%s: %w", e.Method, e.Error)
		}
	}
	if head.BaseFee == nil {
		return fee{}, errors.New("deposit: the chain's blocks have no base fee (EIP-1559 is required)")
	}
	t := new(big.Int).Set((*big.Int)(&tip))
	c := new(big.Int).Mul((*big.Int)(head.BaseFee), big.NewInt(2))
	return fee{tip: t, cap: c.Add(c, t)}, nil
}

// bumped is f raised by 12.5% (and 1 wei), what nodes require of a
// replacement.
func (f fee) bumped() fee {
	up := func(x *big.Int) *big.Int {
		y := new(big.Int).Mul(x, big.NewInt(9))
		return y.Div(y, big.NewInt(8)).Add(y, big.NewInt(1))
	}
	return fee{tip: up(f.tip), cap: up(f.cap)}
}

// atLeast is f with each part raised to at least min's.
func (f fee) atLeast(min fee) fee {
	out := f
	if min.tip.Cmp(out.tip) > 0 {
		out.tip = min.tip
	}
	if min.cap.Cmp(out.cap) > 0 {
		out.cap = min.cap
	}
	return out
}

// Verify checks, in one round trip, that the node has the factory at
// factory and that its depositAddress agrees with Address: a factory built
// from other bytecode (an older or newer build of the contracts) would
// make the service show deposit addresses no flush can reach. The service
// runs it once per network at start.
func Verify(ctx context.Context, c *rpc.Client, factory common.Address) error {
	var code hexutil.Bytes
	var out hexutil.Bytes
	probe := Salt("deposit factory probe")
	payout := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	elems := []rpc.BatchElem{
		{Method: "eth_getCode", Args: []any{factory, "latest"}, Result: &code},
		{Method: "eth_call", Args: []any{map[string]any{"to": factory, "data": hexutil.Bytes(DepositAddressData(payout, probe))}, "latest"}, Result: &out},
	}
	if err := c.BatchCallContext(ctx, elems); err != nil {
		return fmt.Errorf("deposit factory %s: %w", factory.Hex(), err)
	}
	if elems[0].Error != nil {
		return fmt.Errorf("deposit factory %s: %w", factory.Hex(), elems[0].Error)
	}
	if len(code) == 0 {
		return fmt.Errorf("deposit factory %s: no contract at that address on this chain", factory.Hex())
	}
	if elems[1].Error != nil || len(out) != 32 || common.BytesToAddress(out) != Address(factory, payout, probe) {
		return fmt.Errorf("deposit factory %s: its depositAddress differs from this build's (another version of the contract)", factory.Hex())
	}
	return nil
}

// NewSweeper checks the factory (Verify) and reads the chain id the
// transactions are signed for.
func NewSweeper(ctx context.Context, c *rpc.Client, factory common.Address, key *ecdsa.PrivateKey) (*Sweeper, error) {
	if err := Verify(ctx, c, factory); err != nil {
		return nil, err
	}
	var id hexutil.Big
	if err := c.CallContext(ctx, &id, "eth_chainId"); err != nil {
		return nil, err
	}
	return &Sweeper{
		rpc: c, factory: factory, key: key, from: crypto.PubkeyToAddress(key.PublicKey),
		signer:       types.LatestSignerForChainID((*big.Int)(&id)),
		ReplaceAfter: time.Minute, PollInterval: time.Second,
	}, nil
}

// Address is the sweep key's account (it needs native currency for gas).
func (s *Sweeper) Address() common.Address { return s.from }

// Factory is the factory the Sweeper calls.
func (s *Sweeper) Factory() common.Address { return s.factory }

// Deposit is the deposit address of f under this Sweeper's factory.
func (s *Sweeper) Deposit(f Flush) common.Address { return Address(s.factory, f.Payout, f.Salt) }

func (s *Sweeper) count(ctx context.Context, block string) (uint64, error) {
	var n hexutil.Uint64
	err := s.rpc.CallContext(ctx, &n, "eth_getTransactionCount", s.from, block)
	return uint64(n), err
}

// known tells whether the node has the transaction (in its pool or mined).
func (s *Sweeper) known(ctx context.Context, h common.Hash) (bool, error) {
	var tx json.RawMessage
	if err := s.rpc.CallContext(ctx, &tx, "eth_getTransactionByHash", h); err != nil {
		return false, err
	}
	return !isNull(tx), nil
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// Send signs and sends one flushMany transaction for fs (1 to MaxFlushes
// entries, no deposit address twice) and returns its hash without waiting
// for it to be mined; Outcome tells what it moved. An error means no
// transaction is on its way (retry later), except ctx's: the node may have
// taken it, and the next Send finds out.
func (s *Sweeper) Send(ctx context.Context, fs []Flush) (common.Hash, error) {
	if len(fs) == 0 || len(fs) > MaxFlushes {
		return common.Hash{}, fmt.Errorf("deposit: a sweep flushes 1 to %d deposit addresses, not %d", MaxFlushes, len(fs))
	}
	seen := make(map[common.Address]bool, len(fs))
	for _, f := range fs {
		d := s.Deposit(f)
		if seen[d] {
			return common.Hash{}, fmt.Errorf("deposit: %s twice in one sweep", d.Hex())
		}
		seen[d] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var h common.Hash
		var retry bool
		if h, retry, err = s.send(ctx, fs); err == nil || !retry {
			return h, err
		}
		select { // the node's pending count may lag its pool for a moment
		case <-ctx.Done():
			return common.Hash{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return common.Hash{}, err
}

// send is one attempt; retry reports a refusal that another attempt with
// fresh nonces may not meet (another sender used the key meanwhile).
func (s *Sweeper) send(ctx context.Context, fs []Flush) (h common.Hash, retry bool, err error) {
	mined, err := s.count(ctx, "latest")
	if err != nil {
		return h, false, err
	}
	pending, err := s.count(ctx, "pending")
	if err != nil {
		return h, false, err
	}
	nonce := max(mined, pending)
	fee, err := s.fees(ctx)
	if err != nil {
		return h, false, err
	}
	if last := s.last; last != nil {
		switch known, err := s.known(ctx, last.hash); {
		case err != nil:
			return h, false, err
		case last.nonce < mined:
			s.last = nil // mined (its Outcome tells what it moved), or replaced
		case !known:
			// Never reached the node, or evicted: the node's count above
			// already leaves its nonce free.
			s.last = nil
		case time.Since(last.at) < s.ReplaceAfter:
			return h, false, ErrInFlight
		default:
			// Stuck in the pool: replace it at the same nonce, priced at
			// least 12.5% above it (what nodes require of a replacement).
			nonce = last.nonce
			fee = fee.atLeast(last.fee.bumped())
		}
	}
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID: s.signer.ChainID(), Nonce: nonce, GasTipCap: fee.tip, GasFeeCap: fee.cap,
		Gas: GasBase + GasPerFlush*uint64(len(fs)), To: &s.factory, Data: FlushManyData(fs),
	}), s.signer, s.key)
	if err != nil {
		return h, false, err
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		return h, false, err
	}
	h = tx.Hash()
	var got common.Hash
	err = s.rpc.CallContext(ctx, &got, "eth_sendRawTransaction", hexutil.Bytes(raw))
	if err != nil {
		msg := strings.ToLower(err.Error())
		switch {
		case strings.Contains(msg, "already known") || strings.Contains(msg, "already imported"):
			// This very transaction is in the pool: sent.
		case strings.Contains(msg, "nonce too low") || strings.Contains(msg, "replacement transaction underpriced"):
			return common.Hash{}, true, fmt.Errorf("deposit: sweep refused: %w", err)
		default:
			if ctx.Err() == nil {
				return common.Hash{}, false, fmt.Errorf("deposit: sweep refused: %w", err)
			}
			// The context ended mid-call: the node may have it. Remember
			// it, so the next Send waits for it or reuses its nonce.
			s.last = &sent{hash: h, nonce: nonce, fee: fee, at: time.Now()}
			return common.Hash{}, false, err
		}
	}
	s.last = &sent{hash: h, nonce: nonce, fee: fee, at: time.Now()}
	return h, false, nil
}

// Outcome is what a sweep transaction did.
type Outcome struct {
	// Mined: the transaction has a receipt (in Block). A transaction not
	// mined yet and still known to the node is Mined false, no error.
	Mined bool
	Block uint64
	// Flushed lists each entry that succeeded, from the factory's Flushed
	// logs; an entry absent from it failed (its funds stayed; retry later).
	Flushed []Flushed
}

// Flushed is one Flushed(deposit, payout, token, amount) log.
type Flushed struct {
	Deposit, Payout, Token common.Address
	Amount                 *big.Int
}

// Moved is the amount moved from each deposit address that was flushed
// (absent: that entry failed).
func (o Outcome) Moved() map[common.Address]*big.Int {
	out := make(map[common.Address]*big.Int, len(o.Flushed))
	for _, f := range o.Flushed {
		out[f.Deposit] = f.Amount
	}
	return out
}

type receipt struct {
	Status      *hexutil.Uint64 `json:"status"`
	BlockNumber *hexutil.Big    `json:"blockNumber"`
	Logs        []struct {
		Address common.Address `json:"address"`
		Topics  []common.Hash  `json:"topics"`
		Data    hexutil.Bytes  `json:"data"`
		Removed bool           `json:"removed"`
	} `json:"logs"`
}

// Outcome looks up the sweep transaction h: not mined yet (Mined false),
// mined (what each entry moved), or an error: ErrReverted (mined, moved
// nothing), ErrDropped (the node does not know it), or the node's.
func (s *Sweeper) Outcome(ctx context.Context, h common.Hash) (Outcome, error) {
	var raw json.RawMessage
	if err := s.rpc.CallContext(ctx, &raw, "eth_getTransactionReceipt", h); err != nil {
		return Outcome{}, err
	}
	if isNull(raw) {
		known, err := s.known(ctx, h)
		if err != nil {
			return Outcome{}, err
		}
		if !known {
			return Outcome{}, ErrDropped
		}
		return Outcome{}, nil
	}
	var rc receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		return Outcome{}, fmt.Errorf("receipt %s: %w", h.Hex(), err)
	}
	if rc.Status == nil || rc.BlockNumber == nil {
		return Outcome{}, fmt.Errorf("receipt %s: no status or block number", h.Hex())
	}
	o := Outcome{Mined: true, Block: (*big.Int)(rc.BlockNumber).Uint64()}
	if *rc.Status != 1 {
		return o, ErrReverted
	}
	for _, l := range rc.Logs {
		if l.Removed || l.Address != s.factory || len(l.Topics) != 4 || l.Topics[0] != FlushedTopic || len(l.Data) != 32 {
			continue
		}
		o.Flushed = append(o.Flushed, Flushed{
			Deposit: common.BytesToAddress(l.Topics[1].Bytes()),
			Payout:  common.BytesToAddress(l.Topics[2].Bytes()),
			Token:   common.BytesToAddress(l.Topics[3].Bytes()),
			Amount:  new(big.Int).SetBytes(l.Data),
		})
	}
	return o, nil
}

// Flush is Send, then Outcome every PollInterval until the transaction is
// mined (or ctx ends): its hash and what it moved from each deposit address
// (absent: that entry failed; retry it later). An error means nothing is
// known to have moved; the funds are where they were, and a later Flush
// moves them.
func (s *Sweeper) Flush(ctx context.Context, fs []Flush) (common.Hash, map[common.Address]*big.Int, error) {
	h, err := s.Send(ctx, fs)
	if err != nil {
		return h, nil, err
	}
	for {
		o, err := s.Outcome(ctx, h)
		if err != nil {
			return h, nil, err
		}
		if o.Mined {
			return h, o.Moved(), nil
		}
		select {
		case <-ctx.Done():
			return h, nil, ctx.Err()
		case <-time.After(s.PollInterval):
		}
	}
}
