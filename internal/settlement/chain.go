// Package settlement decides, from what a chain shows, whether a resolved
// voucher was paid: it checks receipts, keeps the voucher's settlement state,
// follows confirmations and reorgs, and hands verdicts to the webhook outbox.
//
// This file is the contract with the chain adapters (internal/settlement/evm,
// internal/settlement/solana). Adapters only report what the chain shows, in
// chain-neutral terms; every rule about what counts as paying lives in this
// package, once for all chains.
package settlement

import (
	"context"
	"math/big"
	"time"
)

// Native is the Asset of a chain's native currency credit (ETH, POL, SOL).
const Native = "native"

// Credit is value that a transaction moved to an account, as the chain
// records it. On EVM: one Transfer(address,address,uint256) log (Asset is the
// emitting contract's address, lower-case), or the transaction's native value
// to its `to` (Asset Native). On Solana: a positive change of an owner's SPL
// token balance for a mint (Asset is the mint), or of an account's SOL balance
// (Asset Native). Amount is in the asset's smallest unit and never negative.
type Credit struct {
	Asset  string
	From   string
	To     string
	Amount *big.Int
}

// Tx is one transaction as the chain shows it at the moment of the lookup.
type Tx struct {
	Hash string
	// Found is false when the node knows no such transaction, or knows it
	// only as not yet included (no receipt).
	Found bool
	// Success is the receipt status (EVM status 1; Solana meta.err == null).
	Success     bool
	BlockNumber uint64 // EVM block number; Solana slot
	BlockHash   string // EVM block hash; Solana blockhash of the slot
	BlockTime   time.Time
	From        string   // EVM sender; Solana fee payer
	To          string   // EVM `to` (empty for contract creation); Solana: empty
	Value       *big.Int // EVM native value sent; Solana: nil
	Data        []byte   // EVM input data; Solana: nil
	Credits     []Credit
	// Finalized is Solana's `finalized` commitment for the transaction.
	// EVM adapters leave it false: confirmations are head − block + 1.
	Finalized bool
}

// Chain is what the settlement watcher needs from one network's node. Each
// method is one round trip (implementations batch JSON-RPC requests), so the
// cost of a poll grows with the number of distinct blocks and unmined
// transactions, not with the number of vouchers.
type Chain interface {
	// ChainID is the network's identity as the finance file names it:
	// evm: the decimal eth_chainId; solana: the genesis hash.
	ChainID(ctx context.Context) (string, error)
	// Head is the newest block number (EVM) or the newest slot at the
	// adapter's commitment (Solana).
	Head(ctx context.Context) (uint64, error)
	// Transactions looks up many transactions in one batch; the result has
	// one entry per hash, in order. A hash the node does not know gives
	// Found: false, not an error; an error means the lookup itself failed
	// (retry later).
	Transactions(ctx context.Context, hashes []string) ([]Tx, error)
	// BlockHashes returns the canonical block hash at each height, in one
	// batch, so that a reorg shows as another hash at a height. A height the
	// chain does not have (yet, or any more) is absent from the map.
	BlockHashes(ctx context.Context, heights []uint64) (map[uint64]string, error)
}

// Watch is one address the watcher looks for payments to, on behalf of one
// open checkout: on EVM its deposit address (lower-case hex) and the token
// contract due (lower-case) or Native; on Solana its Solana Pay reference
// key (base58) and the mint due or Native.
type Watch struct {
	Address string
	Asset   string
}

// Found is a transaction a Detector found paying to a watched address.
type Found struct {
	Hash        string
	Watch       Watch
	BlockNumber uint64 // EVM block number; Solana slot
}

// Detector is what a Chain adds when it can find payments no one reported:
// transactions that pay a watched address, found from the chain alone (EVM:
// the due token's Transfer logs to a deposit address and native value sent
// to one; Solana: getSignaturesForAddress of a reference key). The watcher
// then looks the found transactions up with Transactions and judges them by
// the same rules as a submitted hash. Detect is at most one round trip (a
// batch), and its cost grows with the blocks scanned and the matching
// transfers, not with the number of watches where the chain allows it.
type Detector interface {
	// Detect returns the transactions in blocks after..upTo (after
	// excluded, upTo included) that pay one of watches, each once per
	// watch it pays, in chain order.
	Detect(ctx context.Context, after, upTo uint64, watches []Watch) ([]Found, error)
}

// Scanner is a Detector that reads the scanned blocks themselves (EVM: by
// number), so it can tell, in the same round trip, the canonical hash at
// each scanned height and at the other heights asked about: the watcher
// then needs no separate BlockHashes round trip for mined payments. A
// chain whose Detector does not read blocks (Solana) needs not implement
// it.
type Scanner interface {
	Detector
	// Scan is Detect plus the canonical block hash at every height of
	// after+1..upTo and of heights (a height the chain does not have is
	// absent).
	Scan(ctx context.Context, after, upTo uint64, watches []Watch, heights []uint64) ([]Found, map[uint64]string, error)
}
