package settlement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// Sweeping: moving what arrived at a checkout's deposit address to its
// payout wallet (docs/settlement.md, "Sweeping"). It is optional (a
// network with a Sweeper in Options.Sweepers), holds no key that can move a
// business's funds (the sweep key pays gas; the factory's flush sends a
// deposit address's funds only to its payout wallet), and never loses
// funds: a sweep that fails leaves them where they are, is counted and
// tried again, and anyone's flush still sends them only to the payout.
//
// A sweep becomes due when a deposit checkout's settlement reaches its
// verdict with a paid amount not yet swept (and so again after a later
// payment): the watcher writes deposit.sweep PENDING and sweep_network in
// the verdict's transaction. After each poll the watcher's goroutine sends
// the due ones in batches (one transaction for up to Sweeper.MaxBatch
// addresses) and follows the transaction in flight.

// SweepOrder is one deposit address to flush.
type SweepOrder struct {
	VoucherID string
	// Deposit and Payout are the deposit address and its payout wallet;
	// Token is the due token's contract, "" for the native currency.
	Deposit, Payout, Token string
}

// SweepOutcome is what a sweep transaction did once mined: the amount
// moved from each deposit address it flushed (lower-case hex), in the
// asset's smallest unit. An address absent from Moved moved nothing.
type SweepOutcome struct {
	Mined bool
	Moved map[string]*big.Int
}

// Errors a Sweeper reports.
var (
	// ErrSweepBusy: the previous sweep transaction is still in flight;
	// nothing was sent.
	ErrSweepBusy = errors.New("settlement: a sweep transaction is still in flight")
	// ErrSweepFailed: the sweep transaction was mined and reverted, or is
	// gone: it moved nothing.
	ErrSweepFailed = errors.New("settlement: the sweep transaction moved nothing")
)

// Sweeper sends flush transactions for a network (the EVM one is
// internal/settlement/evm/deposit.Sweeper behind an adapter the
// composition root builds from VOUCHER_SWEEP_KEY).
type Sweeper interface {
	// MaxBatch is the most addresses one Send flushes.
	MaxBatch() int
	// Send sends one transaction flushing orders and returns its hash
	// without waiting for it. ErrSweepBusy: one is in flight already.
	Send(ctx context.Context, orders []SweepOrder) (string, error)
	// Outcome looks the transaction up: not mined yet (Mined false, no
	// error), mined (what it moved), ErrSweepFailed, or the node's error.
	Outcome(ctx context.Context, txHash string) (SweepOutcome, error)
}

// sweepRead bounds the due sweeps one pass reads.
const sweepRead = 500

// sweepDue is v's deposit with a sweep due when next is a verdict whose
// paid amount the sweeps so far have not covered, on a network that
// sweeps; nil when nothing changes.
func (s *Service) sweepDue(n *watched, v *ent.Voucher, next *payment.Settlement) *payment.Deposit {
	if v.Deposit == nil || s.sweepers[n.Name] == nil || !next.Final() || next.PaidAmount == "" {
		return nil
	}
	paid, err := money.ParseAnyScale(next.PaidAmount)
	if err != nil || !paid.IsPositive() || !paid.GreaterThan(amountOr0(v.Deposit.Sweep.Swept)) {
		return nil
	}
	dep := *v.Deposit
	if dep.Sweep.InFlight == "" {
		dep.Sweep.Status = payment.SweepPending
	}
	return &dep
}

func amountOr0(s string) decimal.Decimal {
	d, err := money.ParseAnyScale(s)
	if err != nil {
		return decimal.Zero
	}
	return d
}

// markSweep writes the deposit with its sweep due, in the transaction of
// the verdict (whose statement already moved the version).
func (s *Service) markSweep(ctx context.Context, tx *ent.Tx, n *watched, nv *ent.Voucher, dep *payment.Deposit) error {
	b, err := json.Marshal(dep)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE vouchers SET deposit = ?, sweep_network = ? WHERE id = ?"),
		jsonArg(s.db.Dialect, b), n.Name, nv.ID); err != nil {
		return err
	}
	name := n.Name
	nv.Deposit, nv.SweepNetwork = dep, &name
	return nil
}

// Sweep makes one pass over the network's due sweeps: it follows the
// transaction in flight (DONE with what each address moved, FAILED for
// one that moved nothing) and sends the next batch. A failure is recorded
// on the voucher (FAILED, tried again after a backoff) and counted.
func (s *Service) Sweep(ctx context.Context, network string) error {
	n, sw := s.networks[network], s.sweepers[network]
	if n == nil || sw == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	return s.db.WithTryLock(ctx, lockKey("sweep:"+network), func(ctx context.Context) error {
		n.mu.Lock() // the watcher's cache of pending rows is n's
		defer n.mu.Unlock()
		return s.sweep(ctx, n, sw)
	})
}

func (s *Service) sweep(ctx context.Context, n *watched, sw Sweeper) error {
	rows, err := s.db.Voucher.Query().Where(entvoucher.SweepNetwork(n.Name)).
		Order(ent.Asc(entvoucher.FieldUpdatedAt), ent.Asc(entvoucher.FieldID)).Limit(sweepRead).All(ctx)
	if err != nil || len(rows) == 0 {
		return err
	}
	now := s.now()
	inFlight := map[string][]*ent.Voucher{}
	var due []*ent.Voucher
	for _, v := range rows {
		switch dep := v.Deposit; {
		case dep == nil:
			continue
		case dep.Sweep.InFlight != "":
			inFlight[dep.Sweep.InFlight] = append(inFlight[dep.Sweep.InFlight], v)
		case dep.Sweep.Status == payment.SweepFailed && now.Before(v.UpdatedAt.Add(backoff(n.PollInterval, dep.Sweep.Attempts, s.maxBackoff*10))):
			// Tried and failed: wait before the next try.
		default:
			due = append(due, v)
		}
	}
	var errs []error
	for h, vs := range inFlight {
		out, err := sw.Outcome(ctx, h)
		switch {
		case errors.Is(err, ErrSweepFailed):
			s.sweepFailed(n.Name, len(vs))
			s.log.WarnContext(ctx, "sweep failed; the funds stay at the deposit addresses and are tried again", "network", n.Name, "transaction", h)
			errs = append(errs, s.writeSweeps(ctx, n, vs, func(v *ent.Voucher, dep *payment.Deposit) {
				dep.Sweep.Status, dep.Sweep.InFlight, dep.Sweep.Target = payment.SweepFailed, "", ""
				dep.Sweep.Attempts++
			}))
		case err != nil:
			errs = append(errs, fmt.Errorf("settlement: %s: sweep %s: %w", n.Name, h, err))
		case out.Mined:
			errs = append(errs, s.writeSweeps(ctx, n, vs, func(v *ent.Voucher, dep *payment.Deposit) {
				// Absent: that address's flush failed. Present with 0: it
				// succeeded and found nothing (anyone's flush, a stranger's,
				// moved the funds to the payout already): done.
				moved, ok := out.Moved[strings.ToLower(dep.Address)]
				if !ok || moved == nil || moved.Sign() < 0 {
					s.sweepFailed(n.Name, 1)
					dep.Sweep.Status, dep.Sweep.InFlight, dep.Sweep.Target = payment.SweepFailed, "", ""
					dep.Sweep.Attempts++
					return
				}
				d, _ := dueOf(s.reg, v)
				dep.Sweep.Status, dep.Sweep.TransactionHash = payment.SweepDone, h
				dep.Sweep.Amount = money.Format(units(moved, d.token.Decimals))
				dep.Sweep.Swept, dep.Sweep.InFlight, dep.Sweep.Target, dep.Sweep.Attempts = dep.Sweep.Target, "", "", 0
			}))
		}
	}
	if len(due) > 0 && len(inFlight) == 0 {
		k := min(len(due), max(sw.MaxBatch(), 1))
		batch := due[:k]
		orders := make([]SweepOrder, 0, k)
		for _, v := range batch {
			d, err := dueOf(s.reg, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tok := ""
			if !d.token.Native {
				tok = d.token.CurrencyAddress
			}
			orders = append(orders, SweepOrder{VoucherID: v.ID, Deposit: v.Deposit.Address, Payout: v.Deposit.PayoutAddress, Token: tok})
		}
		h, err := sw.Send(ctx, orders)
		switch {
		case errors.Is(err, ErrSweepBusy):
		case err != nil:
			s.sweepFailed(n.Name, len(batch))
			s.log.WarnContext(ctx, "sweep not sent; the funds stay at the deposit addresses and are tried again", "network", n.Name, "err", err.Error())
			errs = append(errs, s.writeSweeps(ctx, n, batch, func(v *ent.Voucher, dep *payment.Deposit) {
				dep.Sweep.Status = payment.SweepFailed
				dep.Sweep.Attempts++
			}))
		default:
			errs = append(errs, s.writeSweeps(ctx, n, batch, func(v *ent.Voucher, dep *payment.Deposit) {
				dep.Sweep.Status, dep.Sweep.InFlight = payment.SweepPending, h
				dep.Sweep.Target = ""
				if v.Settlement != nil {
					dep.Sweep.Target = v.Settlement.PaidAmount
				}
			}))
		}
	}
	return errors.Join(errs...)
}

func (s *Service) sweepFailed(network string, k int) {
	if s.onSweepFailed != nil {
		s.onSweepFailed(network, k)
	}
}

// writeSweeps applies edit to each voucher's deposit and records it, each
// guarded by the version read; one that moved since is left for the next
// pass. The sweep stays due (sweep_network) until a DONE sweep covered the
// settlement's paid amount.
func (s *Service) writeSweeps(ctx context.Context, n *watched, vs []*ent.Voucher, edit func(v *ent.Voucher, dep *payment.Deposit)) error {
	now := s.now()
	var written []*ent.Voucher
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		written = written[:0]
		for _, v := range vs {
			dep := *v.Deposit
			edit(v, &dep)
			var network any = n.Name
			if dep.Sweep.Status == payment.SweepDone && v.Settlement != nil && v.Settlement.Final() &&
				!amountOr0(v.Settlement.PaidAmount).GreaterThan(amountOr0(dep.Sweep.Swept)) {
				network = nil
			} else if dep.Sweep.Status == payment.SweepDone {
				// A later payment arrived while this sweep was in flight.
				dep.Sweep.Status = payment.SweepPending
			}
			b, err := json.Marshal(&dep)
			if err != nil {
				return err
			}
			ok, err := execOne(ctx, tx, s.db.Rebind("UPDATE vouchers SET deposit = ?, sweep_network = ?, updated_at = ?, version = version + 1 WHERE id = ? AND version = ?"),
				jsonArg(s.db.Dialect, b), network, now, v.ID, v.Version)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			nv := *v
			nv.Deposit, nv.Version, nv.UpdatedAt = &dep, v.Version+1, now
			nv.SweepNetwork = nil
			if network != nil {
				name := n.Name
				nv.SweepNetwork = &name
			}
			written = append(written, &nv)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settlement: %s: record sweeps: %w", n.Name, err)
	}
	for _, v := range written {
		delete(n.pending, v.ID) // its version moved
		s.pub.Publish(pubsub.ChangeOf(v).WithState(v))
	}
	return nil
}

// sweepEvery runs after each poll of a network that sweeps.
func (s *Service) sweepAfterPoll(ctx context.Context, n *watched) {
	if s.sweepers[n.Name] == nil || ctx.Err() != nil {
		return
	}
	if err := s.Sweep(ctx, n.Name); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "sweep pass failed; retrying", "network", n.Name, "err", err.Error())
	}
}
