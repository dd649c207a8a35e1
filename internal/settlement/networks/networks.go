// Package networks connects the finance file's networks to their nodes at
// start: it dials every network that has an rpcUrl, checks that the node
// serves the chain the file names (a mismatch stops the start, naming the
// network), and enforces the production rule that every network with tokens
// is verified unless VOUCHER_TRUST_RECEIPTS=true. The result is the chains
// the settlement watcher polls and the readers price feeds use.
package networks

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"log/slog"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/solana"
)

// Options are the start-up rules.
type Options struct {
	// Production requires an rpcUrl on every network that has tokens,
	// unless TrustReceipts.
	Production    bool
	TrustReceipts bool
	// Timeout bounds each RPC request (and the start-up check).
	Timeout time.Duration
	Log     *slog.Logger
	// SweepKey (VOUCHER_SWEEP_KEY), when set, pays the gas of sweeping
	// the deposit addresses of every network with a depositFactory.
	SweepKey *ecdsa.PrivateKey
}

// Set is the dialed networks.
type Set struct {
	// Chains has one entry per verified network (those with an rpcUrl),
	// keyed by network name: what the settlement watcher polls.
	Chains map[string]settlement.Chain
	// Feeds reads price feeds, one per verified evm network.
	Feeds map[string]finance.FeedReader
	// Sweepers has one entry per network with a depositFactory, when
	// Options.SweepKey is set.
	Sweepers map[string]settlement.Sweeper
	closers  []func()
}

// Close closes every connection.
func (s *Set) Close() {
	for _, c := range s.closers {
		c()
	}
	s.closers = nil
}

// Dial connects every network of reg that has an rpcUrl and checks its
// chain id. Errors name the network and never the URL (it may hold an API
// key).
func Dial(ctx context.Context, reg *finance.Registry, opt Options) (*Set, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{Chains: map[string]settlement.Chain{}, Feeds: map[string]finance.FeedReader{}, Sweepers: map[string]settlement.Sweeper{}}
	for _, n := range reg.Networks() {
		if n.RPCURL == "" {
			if len(reg.Tokens(n.Name)) == 0 {
				continue
			}
			switch {
			case opt.Production && !opt.TrustReceipts:
				s.Close()
				return nil, fmt.Errorf("network %q has tokens but no rpcUrl: in production every such network must be verified on chain (set its rpcUrl in the finance file, or VOUCHER_TRUST_RECEIPTS=true to accept receipts unchecked, which is unsafe)", n.Name)
			case opt.Production:
				log.Warn("UNSAFE: network not verified on chain; receipts are trusted as the payer reports them (VOUCHER_TRUST_RECEIPTS=true)", "network", n.Name)
			default:
				log.Info("network not verified on chain (no rpcUrl); its vouchers say settlement.verified: false", "network", n.Name)
			}
			continue
		}
		c, closer, err := dial(ctx, n, opt.Timeout)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("network %q: %w", n.Name, err)
		}
		s.closers = append(s.closers, closer)
		cctx, cancel := context.WithTimeout(ctx, opt.Timeout)
		got, err := c.ChainID(cctx)
		cancel()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("network %q: reading the chain id from its rpcUrl: %w", n.Name, err)
		}
		if want := expectedChainID(n); got != want {
			s.Close()
			return nil, fmt.Errorf("network %q: its rpcUrl serves chain %s, the finance file says %s (%s)", n.Name, got, want, n.ChainID)
		}
		s.Chains[n.Name] = c
		if fr, ok := c.(finance.FeedReader); ok {
			s.Feeds[n.Name] = fr
		}
		log.Info("network verified on chain", "network", n.Name, "chainId", n.ChainID,
			"confirmations", n.Confirmations, "pollInterval", n.PollInterval.String())
		if n.DepositFactory != "" {
			if err := depositFactory(ctx, s, n, c, opt, log); err != nil {
				s.Close()
				return nil, fmt.Errorf("network %q: depositFactory: %w", n.Name, err)
			}
		}
	}
	return s, nil
}

// depositFactory checks n's deposit factory on its node (code there, and
// its depositAddress equal to this build's: otherwise checkouts would show
// addresses no flush reaches) and, with a sweep key, makes n's sweeper.
func depositFactory(ctx context.Context, s *Set, n finance.Network, c settlement.Chain, opt Options, log *slog.Logger) error {
	ec, ok := c.(*evm.Chain)
	if !ok {
		return fmt.Errorf("deposit addresses need an evm network")
	}
	cctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if opt.SweepKey == nil {
		if err := deposit.Verify(cctx, ec.RPC(), common.HexToAddress(n.DepositFactory)); err != nil {
			return err
		}
		log.Info("deposit addresses not swept (no VOUCHER_SWEEP_KEY): their funds wait for anyone's flush", "network", n.Name, "depositFactory", n.DepositFactory)
		return nil
	}
	sw, err := evm.NewSweeper(cctx, ec, n.DepositFactory, opt.SweepKey)
	if err != nil {
		return err
	}
	s.Sweepers[n.Name] = sw
	log.Info("deposit addresses swept", "network", n.Name, "depositFactory", n.DepositFactory, "sweepAccount", sw.Account())
	return nil
}

func dial(ctx context.Context, n finance.Network, timeout time.Duration) (settlement.Chain, func(), error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch n.Type {
	case chain.TypeEVM:
		c, err := evm.Dial(dctx, n.RPCURL, timeout)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	case chain.TypeSolana:
		c, err := solana.New(n.RPCURL, timeout)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	return nil, nil, fmt.Errorf("no chain adapter for network type %q", n.Type)
}

// expectedChainID is what Chain.ChainID must return for n: the decimal
// chain id on evm; on solana the genesis hash of the named cluster (or the
// chainId itself when it is a genesis hash, for a local validator).
func expectedChainID(n finance.Network) string {
	if n.Type == chain.TypeSolana {
		if h, ok := SolanaGenesis[n.ChainID]; ok {
			return h
		}
	}
	return n.ChainID
}

// SolanaGenesis maps the public clusters' names to their genesis hashes.
var SolanaGenesis = map[string]string{
	"mainnet-beta": "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
	"devnet":       "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG",
	"testnet":      "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY",
}
