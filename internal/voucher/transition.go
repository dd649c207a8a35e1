package voucher

import (
	"context"
	"fmt"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
)

// maxAttempts bounds how often a read-then-write transition re-reads a
// voucher that changed between its read and its write (a concurrent
// negotiate, say). The last try holds the row's lock from its read to its
// write, so it cannot lose that race.
const maxAttempts = 3

var (
	errExpired   = apperr.New(apperr.Expired, "the voucher has expired")
	errDiscarded = apperr.New(apperr.Discarded, "the voucher was discarded")
)

// transition is one state change of a voucher.
type transition struct {
	op   Op
	from []entvoucher.Status
	// wrongState is the spec's code for a live voucher in a state outside from.
	wrongState func(entvoucher.Status) error
	// against holds the body against the voucher, after its state.
	against func(v *ent.Voucher) error
	// sets are the columns the change writes (version is always bumped);
	// cur is nil on the fast path.
	sets func(ctx context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error)
	// fast says sets does not depend on the current row, so the change is
	// tried first as one statement without reading the row.
	fast bool
	// inTx says the change must run in a transaction (with after) even
	// for a voucher without a business.
	inTx func(cur *ent.Voucher) bool
	// after runs in the transaction once the row changed.
	after func(ctx context.Context, tx *ent.Tx, next *ent.Voucher) error
	// stable says sets reads only parts of the row that cannot change while
	// the voucher is in a from state (negotiate reads the expected payment,
	// fixed from redeem on), so the write needs no version guard: the WHERE
	// on state already makes it safe, and concurrent callers do not have to
	// retry each other away.
	stable bool
	// fromTerms says against and sets read nothing of the voucher but its
	// terms (see terms: payer, type, expected payment, expiry, fixed once
	// REDEEMED) and t starts from REDEEMED only, so for a voucher whose
	// terms this replica keeps the change runs as one statement, with no
	// read (Service.applyFromTerms). Implies stable.
	fromTerms bool
}

// mode selects the extra guard of a transition statement.
type mode int

const (
	// modeFast is the one-statement path: no prior read, and only vouchers
	// without a business (those need their events in a transaction).
	modeFast mode = iota
	// modeVersion follows a read: the row must still be the version read.
	modeVersion
	// modeState follows a read for a stable transition: the state
	// conditions alone guard it.
	modeState
)

// apply runs t on voucher id for p. A fromTerms transition on a voucher
// whose terms this replica keeps is one statement (applyFromTerms); when
// that does not succeed, it goes on as any other. The fast path is one
// statement; when it changes nothing (or t needs the row first) the row is
// read once, which either explains the failure with the right code or lets
// the change go ahead guarded by the version read: in a transaction with
// the event sink for a business voucher, as one statement otherwise.
func (s *Service) apply(ctx context.Context, p *auth.Principal, id string, t *transition) (*ent.Voucher, error) {
	dialect := s.db.Dialect
	if t.fromTerms {
		if v, err := s.applyFromTerms(ctx, p, id, t); v != nil || err != nil {
			return v, err
		}
	}
	if t.fast {
		now := s.clock()
		sets, err := t.sets(ctx, nil, now)
		if err != nil {
			return nil, err
		}
		q, args := transitionStatement(dialect, t, p.ID, id, sets, now, modeFast, 0)
		v, err := queryVoucher(ctx, s.db.Prepared, dialect, q, args...)
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		if v != nil {
			stampCommit(ctx)
			s.terms.observe(v)
			s.published(v)
			return v, nil
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, err := s.load(ctx, s.db.Prepared, id, false)
		if err != nil {
			return nil, err
		}
		now := s.clock()
		if err := s.decide(ctx, s.db.Client, p, t, cur, now); err != nil {
			return nil, err
		}
		var next *ent.Voucher
		// The last try locks the row (applyInTx) rather than hoping it
		// holds still: a voucher that changed under every guarded write
		// (a stream of negotiations ahead of a resolve) is then changed
		// once the change ahead commits, or refused for what it became.
		if cur.BusinessID != nil || (t.inTx != nil && t.inTx(cur)) || attempt == maxAttempts-1 {
			next, err = s.applyInTx(ctx, p, id, t)
		} else {
			next, err = s.applyGuarded(ctx, s.db.Prepared, p, id, t, cur, now)
		}
		if err != nil {
			return nil, err
		}
		if next != nil {
			stampCommit(ctx)
			s.terms.observe(next)
			s.published(next)
			return next, nil
		}
		// The row changed between the read and the write: read it again.
	}
	return nil, apperr.InternalError(fmt.Errorf("voucher %s kept changing during %s", id, t.op))
}

// applyFromTerms runs t (a fromTerms transition) from the terms this
// replica keeps for voucher id, without reading the row: the body is held
// against the terms, sets computed from them, and the statement is the
// read path's own (modeState: id, the caller as payer, the starting state,
// not expired). A row back is the change done. It returns nil and no error
// for anything else short of a failed statement (no terms kept, a body the
// terms refuse, a quote that failed, no row), and the caller then takes
// the read path, which answers exactly as it would have without the cache
// (state before the body, the quote's error only for a voucher still
// REDEEMED). A stale entry is therefore harmless: the terms themselves
// never change while the voucher is REDEEMED, and whatever else changed
// (resolved, discarded, expired) the statement's WHERE refuses. A failed
// statement is an internal error, as the read path's write would return:
// running the change again after a statement whose outcome is unknown
// could apply it twice.
func (s *Service) applyFromTerms(ctx context.Context, p *auth.Principal, id string, t *transition) (*ent.Voucher, error) {
	kept, ok := s.terms.get(id)
	now := s.clock()
	// A caller who is not the payer, or a voucher past its expiry, would
	// change nothing: the read path answers without a wasted statement.
	if !ok || kept.payerID != p.ID || !now.Before(kept.expiresAt) {
		return nil, nil
	}
	cur := kept.voucher(id)
	if t.against != nil && t.against(cur) != nil {
		return nil, nil
	}
	sets, err := t.sets(ctx, cur, now)
	if err != nil {
		return nil, nil
	}
	stmt, args := transitionStatement(s.db.Dialect, t, p.ID, id, sets, now, modeState, 0)
	next, err := queryVoucher(ctx, s.db.Prepared, s.db.Dialect, stmt, args...)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if next == nil {
		return nil, nil
	}
	stampCommit(ctx)
	s.terms.observe(next)
	s.published(next)
	return next, nil
}

// applyGuarded writes t's change if the voucher is still at cur's version
// (or, for a stable transition, still in a state it starts from). It
// returns nil (and no error) when it is not.
func (s *Service) applyGuarded(ctx context.Context, q querier, p *auth.Principal, id string, t *transition, cur *ent.Voucher, now time.Time) (*ent.Voucher, error) {
	sets, err := t.sets(ctx, cur, now)
	if err != nil {
		return nil, err
	}
	m := modeVersion
	if t.stable {
		m = modeState
	}
	stmt, args := transitionStatement(s.db.Dialect, t, p.ID, id, sets, now, m, cur.Version)
	next, err := queryVoucher(ctx, q, s.db.Dialect, stmt, args...)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return next, nil
}

// applyInTx changes a business voucher: the row is locked, checked again,
// changed and handed to the event sink in one transaction, so the deposit
// events commit exactly when the change does.
func (s *Service) applyInTx(ctx context.Context, p *auth.Principal, id string, t *transition) (*ent.Voucher, error) {
	var next *ent.Voucher
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		prev, err := s.load(ctx, tx, id, true)
		if err != nil {
			return err
		}
		now := s.clock()
		if err := s.decide(ctx, tx.Client(), p, t, prev, now); err != nil {
			return err
		}
		next, err = s.applyGuarded(ctx, tx, p, id, t, prev, now)
		if err != nil || next == nil {
			return err
		}
		if t.after != nil {
			if err := t.after(ctx, tx, next); err != nil {
				return err
			}
		}
		if next.BusinessID == nil {
			return nil
		}
		if err := s.events.VoucherChanged(ctx, tx, prev, next); err != nil {
			return apperr.From(err)
		}
		return nil
	})
	if err != nil {
		return nil, apperr.From(err)
	}
	return next, nil
}

// load reads the stored row (without the read model: transitions judge
// expiry themselves). A missing voucher is not_found.
func (s *Service) load(ctx context.Context, q querier, id string, lock bool) (*ent.Voucher, error) {
	v, err := queryVoucher(ctx, q, s.db.Dialect, selectStatement(s.db.Dialect, lock), id)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if v == nil {
		return nil, errNotFound
	}
	s.terms.observe(v)
	return v, nil
}

// decide says whether t may change cur for p, in the order docs/vouchers.md gives ("Order of errors"):
// visibility, then state (expired/discarded, then the spec's state codes),
// then the body against the voucher. The body's own shape was checked
// before (and a body that failed it never reaches here).
func (s *Service) decide(ctx context.Context, c *ent.Client, p *auth.Principal, t *transition, cur *ent.Voucher, now time.Time) error {
	r, err := rolesIn(ctx, c, p, cur)
	if err != nil {
		return err
	}
	if r&rolesFor(t.op) == 0 {
		return errNotFound
	}
	if err := businessActiveFor(ctx, c, t.op, cur); err != nil {
		return err
	}
	if err := stateErr(cur, now, t.from, t.wrongState); err != nil {
		return err
	}
	if t.against != nil {
		return t.against(cur)
	}
	return nil
}

// stateErr judges v's state for a transition allowed from the from states.
func stateErr(v *ent.Voucher, now time.Time, from []entvoucher.Status, wrong func(entvoucher.Status) error) error {
	if isExpired(v, now) {
		return errExpired
	}
	if v.Status == entvoucher.StatusDISCARDED {
		if v.DiscardReason != nil && *v.DiscardReason == ReasonExpired {
			return errExpired
		}
		return errDiscarded
	}
	for _, f := range from {
		if v.Status == f {
			return nil
		}
	}
	return wrong(v.Status)
}

// needsRedeemed is the state rule of operations on a redeemed voucher.
func needsRedeemed(st entvoucher.Status) error {
	if st == entvoucher.StatusRESERVED {
		return apperr.New(apperr.NotRedeemed, "the voucher is not redeemed yet")
	}
	return apperr.New(apperr.AlreadyResolved, "the voucher is already resolved")
}
