package evm

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
)

// Sweeper is the settlement.Sweeper of one EVM network: deposit.Sweeper
// (the factory's flushMany signed by a gas-only key) over this adapter's
// rpc client, in the settlement package's chain-neutral terms.
type Sweeper struct {
	s *deposit.Sweeper
}

var _ settlement.Sweeper = (*Sweeper)(nil)

// NewSweeper checks the factory on c's node (deposit.Verify) and returns
// its sweeper with key.
func NewSweeper(ctx context.Context, c *Chain, factory string, key *ecdsa.PrivateKey) (*Sweeper, error) {
	s, err := deposit.NewSweeper(ctx, c.rpc, common.HexToAddress(factory), key)
	if err != nil {
		return nil, redact(err, c.redact)
	}
	return &Sweeper{s: s}, nil
}

// Account is the sweep key's address (it pays the gas).
func (w *Sweeper) Account() string { return w.s.Address().Hex() }

// MaxBatch implements settlement.Sweeper.
func (w *Sweeper) MaxBatch() int { return deposit.MaxFlushes }

// Send implements settlement.Sweeper: one flushMany for orders. Each
// order's salt is its voucher id's; an order whose deposit address is not
// the one the factory gives (payout, salt) is refused before anything is
// sent.
func (w *Sweeper) Send(ctx context.Context, orders []settlement.SweepOrder) (string, error) {
	fs := make([]deposit.Flush, len(orders))
	for i, o := range orders {
		if !common.IsHexAddress(o.Payout) || (o.Token != "" && !common.IsHexAddress(o.Token)) {
			return "", fmt.Errorf("sweep of %s: payout or token is not an address", o.VoucherID)
		}
		f := deposit.Flush{Payout: common.HexToAddress(o.Payout), Salt: deposit.Salt(o.VoucherID)}
		if o.Token != "" {
			f.Token = common.HexToAddress(o.Token)
		}
		if got := w.s.Deposit(f); !strings.EqualFold(got.Hex(), o.Deposit) {
			return "", fmt.Errorf("sweep of %s: its deposit address %s is not the factory's %s for its payout", o.VoucherID, o.Deposit, got.Hex())
		}
		fs[i] = f
	}
	h, err := w.s.Send(ctx, fs)
	if errors.Is(err, deposit.ErrInFlight) {
		return "", settlement.ErrSweepBusy
	}
	if err != nil {
		return "", err
	}
	return strings.ToLower(h.Hex()), nil
}

// Outcome implements settlement.Sweeper.
func (w *Sweeper) Outcome(ctx context.Context, txHash string) (settlement.SweepOutcome, error) {
	if !txHashRe.MatchString(txHash) {
		return settlement.SweepOutcome{}, fmt.Errorf("sweep transaction hash %q: want 0x and 64 hex digits", txHash)
	}
	o, err := w.s.Outcome(ctx, common.HexToHash(txHash))
	if errors.Is(err, deposit.ErrReverted) || errors.Is(err, deposit.ErrDropped) {
		return settlement.SweepOutcome{}, fmt.Errorf("%w: %v", settlement.ErrSweepFailed, err)
	}
	if err != nil {
		return settlement.SweepOutcome{}, err
	}
	out := settlement.SweepOutcome{Mined: o.Mined}
	if o.Mined {
		out.Moved = map[string]*big.Int{}
		for d, v := range o.Moved() {
			out.Moved[lower(d)] = v
		}
	}
	return out, nil
}
