package settlement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/predicate"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
)

// pollTimeout bounds one poll, RPC round trips included: a node that hangs
// costs a failed poll (retried with backoff), not a stuck watcher.
const pollTimeout = 30 * time.Second

// Run watches every verified network until ctx ends: one goroutine per
// network (not per voucher), polling at the network's pollInterval, at
// once after a resolve on it, and with exponential backoff (up to
// MaxBackoff) after a failed poll.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range s.networks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.watch(ctx, n)
		}()
	}
	wg.Wait()
}

func (s *Service) watch(ctx context.Context, n *watched) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-n.wake:
			if failures > 0 {
				// Backing off: a resolve does not cut the wait short.
				continue
			}
			timer.Stop()
		}
		delay := n.PollInterval
		start := time.Now()
		err := s.Poll(ctx, n.Name)
		if s.polled != nil && ctx.Err() == nil {
			s.polled(n.Name, err)
		}
		s.sweepAfterPoll(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			delay = backoff(n.PollInterval, failures, s.maxBackoff)
			// The error names the network and the call, never the RPC URL
			// (it may carry a provider's key).
			s.log.WarnContext(ctx, "settlement poll failed; retrying", "network", n.Name, "retryIn", delay.String(), "err", err.Error())
		} else {
			failures = 0
			// A fixed cadence: the next poll is due pollInterval after
			// this one started, so a slow poll does not push every later
			// block's verdicts back by its own length.
			delay = max(delay-time.Since(start), 0)
		}
		timer.Reset(delay)
	}
}

// backoff doubles the wait with each consecutive failure, up to limit.
func backoff(interval time.Duration, failures int, limit time.Duration) time.Duration {
	d := interval
	for i := 0; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// lockKey is the advisory lock that keeps one network's poll to one
// replica at a time on PostgreSQL (the conditional update already makes a
// second one harmless; the lock spares the node the repeated calls).
func lockKey(network string) int64 {
	h := fnv.New64a()
	h.Write([]byte("settlement:" + network))
	return int64(h.Sum64() & 0x7fffffffffffffff)
}

// Poll looks once at what network's chain shows for every settlement
// pending on it, and records each change. Its RPC cost is at most three
// round trips (the head, the block hashes of the heights holding mined
// payments, the transactions not yet mined or whose block changed), each a
// batch sized by distinct blocks and unmined transactions, not by vouchers.
// An RPC failure records nothing (the next poll starts over), so no event
// is lost or doubled.
func (s *Service) Poll(ctx context.Context, network string) error {
	n := s.networks[network]
	if n == nil {
		return fmt.Errorf("settlement: %s is not a verified network", network)
	}
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	return s.db.WithTryLock(ctx, lockKey(network), func(ctx context.Context) error {
		return s.poll(ctx, n)
	})
}

func (s *Service) poll(ctx context.Context, n *watched) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	vs, err := s.pending(ctx, n)
	if err != nil {
		return err
	}
	var watches []Watch
	if n.detector != nil {
		if watches, err = s.watchList(ctx, n, s.now()); err != nil {
			return err
		}
	}
	if len(vs) == 0 && len(watches) == 0 {
		return nil
	}
	head, err := n.Chain.Head(ctx)
	if err != nil {
		return fmt.Errorf("settlement: %s: head: %w", n.Name, err)
	}
	solana := n.typ == chain.TypeSolana
	var heights []uint64
	seenHeight := map[uint64]bool{}
	var lookups []string
	seenHash := map[string]bool{}
	lookup := func(h string) {
		if !seenHash[h] {
			seenHash[h] = true
			lookups = append(lookups, h)
		}
	}
	for _, v := range vs {
		if v.Settlement == nil {
			continue
		}
		for _, t := range v.Settlement.Transactions {
			switch {
			case t.Status == payment.TxPending:
				lookup(t.TransactionHash)
			case t.Status == payment.TxInvalid || t.BlockNumber == nil:
			case solana:
				// Finalized is final; anything else is asked again.
				if t.Status == payment.TxMined {
					lookup(t.TransactionHash)
				}
			default:
				if h := uint64(*t.BlockNumber); !seenHeight[h] {
					seenHeight[h] = true
					heights = append(heights, h)
				}
			}
		}
	}
	// Detection: the blocks since the last scan, for payments to the
	// watched deposit addresses. A Scanner reads the block hashes of the
	// mined payments' heights in the same round trip.
	var found []Found
	var blocks map[uint64]string
	scannedTo := n.scanned
	if len(watches) > 0 {
		if err := s.readCursor(ctx, n); err != nil {
			return fmt.Errorf("settlement: %s: detection cursor: %w", n.Name, err)
		}
		after, upTo := n.scanRange(head)
		if sc, ok := n.detector.(Scanner); ok {
			found, blocks, err = sc.Scan(ctx, after, upTo, watches, heights)
			heights = nil
		} else {
			found, err = n.detector.Detect(ctx, after, upTo, watches)
		}
		if err != nil {
			return fmt.Errorf("settlement: %s: detect: %w", n.Name, err)
		}
		scannedTo = upTo
	}
	if len(heights) > 0 {
		if blocks, err = n.Chain.BlockHashes(ctx, heights); err != nil {
			return fmt.Errorf("settlement: %s: block hashes: %w", n.Name, err)
		}
	}
	if blocks != nil {
		// A mined payment whose block is no longer canonical (another hash
		// at its height, or no block there) is looked up again: it may be
		// gone (back to PENDING) or mined elsewhere.
		for _, v := range vs {
			if v.Settlement == nil {
				continue
			}
			for _, t := range v.Settlement.Transactions {
				if (t.Status == payment.TxMined || t.Status == payment.TxConfirmed) && t.BlockNumber != nil && !solana &&
					blocks[uint64(*t.BlockNumber)] != t.BlockHash {
					lookup(t.TransactionHash)
				}
			}
		}
	}
	detectedRows, detectedHashes, err := s.detected(ctx, n, found, vs)
	if err != nil {
		return fmt.Errorf("settlement: %s: detected payments: %w", n.Name, err)
	}
	for _, hs := range detectedHashes {
		for _, h := range hs {
			lookup(h)
		}
	}
	obs := &observation{head: head, txs: make(map[string]Tx, len(lookups))}
	if len(lookups) > 0 {
		txs, err := n.Chain.Transactions(ctx, lookups)
		if err != nil {
			return fmt.Errorf("settlement: %s: transactions: %w", n.Name, err)
		}
		if len(txs) != len(lookups) {
			return fmt.Errorf("settlement: %s: asked for %d transactions, got %d", n.Name, len(lookups), len(txs))
		}
		for i, h := range lookups {
			obs.txs[h] = txs[i]
			// A block made between the head's round trip and this one:
			// the chain is at least as high as a block holding one of
			// ours (else a payment mined there would count 0
			// confirmations, head - block + 1).
			if txs[i].Found && txs[i].BlockNumber > obs.head {
				obs.head = txs[i].BlockNumber
			}
		}
	}
	now := s.now()
	var errs []error
	var changes, detections []change
	for id, v := range detectedRows {
		d, err := dueOf(s.reg, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hs := detectedHashes[id]
		if n.typ == chain.TypeSolana {
			// A Solana Pay reference is found in every transaction that
			// names it, whatever it moved (anyone may name a public key):
			// one that moves none of the due currency to the payee is no
			// payment of the checkout, and is neither recorded nor claimed.
			hs = slices.DeleteFunc(slices.Clone(hs), func(h string) bool {
				tx := obs.txs[h]
				return tx.Found && (!tx.Success || paidBy(d, n.typ, tx).Sign() <= 0)
			})
			if len(hs) == 0 {
				delete(detectedRows, id)
				continue
			}
		}
		// Resolve on the first payment mined before the checkout expired
		// (as submit-payment would); anything else is recorded on the
		// checkout as it stands (a later or a late payment).
		resolve := false
		// (Past its expiry an unswept REDEEMED row reads DISCARDED,
		// reason expired; resolveStatement's guard tells them apart.)
		if v.Status == entvoucher.StatusREDEEMED || (v.Status == entvoucher.StatusDISCARDED && v.Settlement == nil &&
			v.DiscardReason != nil && *v.DiscardReason == reasonExpired) {
			for _, h := range hs {
				if tx := obs.txs[h]; tx.Found && tx.BlockTime.Before(v.ExpiresAt) {
					resolve = true
				}
			}
		}
		cur := s.withDetected(n, d, v, hs, now)
		next, events := judge(d, n.typ, v, cur, obs, now)
		detections = append(detections, change{v: v, next: next, events: events, detect: &detection{resolve: resolve, hashes: hs}})
	}
	for _, v := range vs {
		if detectedRows[v.ID] != nil {
			continue
		}
		if v.Settlement == nil || !v.Settlement.Verified || v.Settlement.Final() {
			continue
		}
		d, err := dueOf(s.reg, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next, events := judge(d, n.typ, v, v.Settlement, obs, now)
		if next != v.Settlement {
			changes = append(changes, change{v: v, next: next, events: events})
		}
	}
	// Changes that cause events (a payment first mined, a verdict) commit
	// first, in their own transactions, so their deliveries do not wait
	// behind the confirmation counts every new block moves on every other
	// pending settlement; those follow, a statement for many.
	var counts []change
	for _, c := range changes {
		if len(c.events) == 0 && !c.next.Final() {
			counts = append(counts, c)
		}
	}
	changes = slices.DeleteFunc(changes, func(c change) bool { return len(c.events) == 0 && !c.next.Final() })
	for len(detections) > 0 {
		k := min(len(detections), batchSize)
		if err := s.commitDetections(ctx, n, detections[:k], now); err != nil {
			errs = append(errs, err)
		}
		detections = detections[k:]
	}
	for len(changes) > 0 {
		k := min(len(changes), batchSize)
		if err := s.commit(ctx, n, changes[:k], now); err != nil {
			errs = append(errs, err)
		}
		changes = changes[k:]
	}
	for len(counts) > 0 {
		k := min(len(counts), batchSize)
		if err := s.commitCounts(ctx, n, counts[:k], now); err != nil {
			errs = append(errs, err)
		}
		counts = counts[k:]
	}
	if len(errs) == 0 {
		// Everything found up to scannedTo is recorded: the next scan
		// starts there (less the reorg margin).
		n.scanned = scannedTo
		if err := s.saveCursor(ctx, n, now); err != nil {
			errs = append(errs, fmt.Errorf("settlement: %s: detection cursor: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// readChunk bounds the ids of one IN list (SQLite takes at most 32,766
// parameters in a statement).
const readChunk = 1000

// pending reads the vouchers pending on n: their ids and versions (an
// index range on settlement_network), then the rows of only those the
// watcher does not hold at that version. A resolved voucher's row changes
// only with its version (every writer bumps it; the watcher keeps what it
// wrote itself), so a poll of a thousand pending settlements reads a
// thousand (id, version) pairs, not a thousand rows and their JSON.
func (s *Service) pending(ctx context.Context, n *watched) ([]*ent.Voucher, error) {
	where := func(more ...predicate.Voucher) []predicate.Voucher {
		// Any status: a checkout's settlement may be pending after it
		// expired (a late payment to its deposit address).
		return append([]predicate.Voucher{entvoucher.SettlementNetwork(n.Name)}, more...)
	}
	keys, err := s.db.Voucher.Query().Where(where()...).Select(entvoucher.FieldID, entvoucher.FieldVersion).All(ctx)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*ent.Voucher, len(keys))
	var stale []string
	for _, k := range keys {
		if v := n.pending[k.ID]; v != nil && v.Version == k.Version {
			next[k.ID] = v
		} else {
			stale = append(stale, k.ID)
		}
	}
	for len(stale) > 0 {
		m := min(len(stale), readChunk)
		rows, err := s.db.Voucher.Query().Where(where(entvoucher.IDIn(stale[:m]...))...).All(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range rows {
			next[v.ID] = v
		}
		stale = stale[m:]
	}
	n.pending = next
	vs := make([]*ent.Voucher, 0, len(next))
	for _, k := range keys {
		if v := next[k.ID]; v != nil {
			vs = append(vs, v)
		}
	}
	return vs, nil
}

// batchSize bounds how many settlement changes share one database
// transaction or statement: a block that confirms a thousand payments
// commits a few times, not a thousand (the commit, not the statements, is
// what costs).
const batchSize = 1000

// change is one voucher's settlement change, judged from one poll.
type change struct {
	v      *ent.Voucher
	next   *payment.Settlement
	events []string
	// detect is set for a change a detection made (commitDetections).
	detect *detection
}

// updateStatement is a settlement change: one conditional UPDATE, guarded
// by the version the watcher judged. Settlement never changes a voucher's
// status; it touches only vouchers that have one (resolved, or a
// checkout paid to its deposit address after it expired).
const updateStatement = "UPDATE vouchers SET settlement = ?, settlement_network = ?, updated_at = ?, version = version + 1" +
	" WHERE id = ? AND version = ? AND settlement IS NOT NULL"

// jsonArg is a JSON column's parameter: text on PostgreSQL (lib/pq sends
// []byte in binary form, which jsonb would read as its binary format),
// bytes on SQLite.
func jsonArg(dialect string, b []byte) any {
	if dialect == storage.Postgres {
		return string(b)
	}
	return b
}

// commit records settlement changes, each one conditional UPDATE of its
// voucher (guarded by the version the watcher judged, so of two replicas
// judging the same poll exactly one writes it) with the events it causes,
// in one transaction; then each change is published to voucherUpdated. A
// voucher that moved since it was read is skipped (the next poll judges
// it again).
func (s *Service) commit(ctx context.Context, n *watched, cs []change, now time.Time) error {
	written := make([]*ent.Voucher, 0, len(cs))
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		written = written[:0]
		var evVouchers []*ent.Voucher
		var evTypes [][]string
		for _, c := range cs {
			val, err := json.Marshal(c.next)
			if err != nil {
				return fmt.Errorf("settlement: encode: %w", err)
			}
			var network any
			if !c.next.Final() && c.v.SettlementNetwork != nil {
				network = *c.v.SettlementNetwork
			}
			res, err := tx.ExecContext(ctx, s.updateText, jsonArg(s.db.Dialect, val), network, now, c.v.ID, c.v.Version)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				continue
			}
			nv := *c.v
			nv.Settlement, nv.Version, nv.UpdatedAt = c.next, c.v.Version+1, now
			if c.next.Final() {
				nv.SettlementNetwork = nil
			}
			if dep := s.sweepDue(n, c.v, c.next); dep != nil {
				if err := s.markSweep(ctx, tx, n, &nv, dep); err != nil {
					return err
				}
			}
			if len(c.events) > 0 {
				evVouchers, evTypes = append(evVouchers, &nv), append(evTypes, c.events)
			}
			written = append(written, &nv)
		}
		if s.events != nil && len(evVouchers) > 0 {
			return s.events.SettlementsChanged(ctx, tx, evVouchers, evTypes)
		}
		return nil
	})
	if err != nil {
		for _, c := range cs {
			delete(n.pending, c.v.ID)
		}
		return fmt.Errorf("settlement: record %d changes: %w", len(cs), err)
	}
	for _, c := range cs {
		delete(n.pending, c.v.ID)
	}
	for _, v := range written {
		if !v.Settlement.Final() {
			n.pending[v.ID] = v
		}
		s.pub.Publish(pubsub.ChangeOf(v).WithState(v))
	}
	return nil
}

// countsStatement (PostgreSQL) is updateStatement for many settlement
// changes that cause no event (the confirmation counts a new block moves on every
// pending settlement, a reorg putting a transaction back to PENDING) in
// one statement: head, then row once per change (id, the version the
// watcher judged, the new settlement), then tail. Each row is guarded as
// updateStatement's is; RETURNING names the ones written. Neither
// settlement_network nor the voucher's status moves.
func countsStatement() (head, row, tail string) {
	return "UPDATE vouchers AS v SET settlement = CAST(x.column3 AS jsonb), updated_at = ?, version = v.version + 1 FROM (VALUES ",
		"(?, CAST(? AS bigint), ?)",
		") AS x WHERE v.id = x.column1 AND v.version = x.column2 AND v.settlement IS NOT NULL RETURNING v.id"
}

// commitCounts records settlement changes that cause no event, then
// publishes each written one to voucherUpdated. A voucher that moved since
// it was read is skipped (the next poll judges it again). On PostgreSQL
// they are one statement (countsStatement): one round trip, not one per
// voucher. On SQLite, in process, a statement is a function call, not a
// round trip, and its planner does not join a VALUES list to the primary
// key (measured: 4x the CPU of one UPDATE per row); there they are
// updateStatement prepared once and run per voucher, in one transaction.
func (s *Service) commitCounts(ctx context.Context, n *watched, cs []change, now time.Time) error {
	vals := make([]any, len(cs))
	for i, c := range cs {
		val, err := json.Marshal(c.next)
		if err != nil {
			return fmt.Errorf("settlement: encode: %w", err)
		}
		vals[i] = jsonArg(s.db.Dialect, val)
		// Held again only as written (below).
		delete(n.pending, c.v.ID)
	}
	var ok map[string]bool
	var err error
	if s.db.IsPostgres() {
		ok, err = s.countsInOne(ctx, cs, vals, now)
	} else {
		ok, err = s.countsPrepared(ctx, cs, vals, now)
	}
	if err != nil {
		return fmt.Errorf("settlement: record %d changes: %w", len(cs), err)
	}
	for _, c := range cs {
		if !ok[c.v.ID] {
			continue
		}
		nv := *c.v
		nv.Settlement, nv.Version, nv.UpdatedAt = c.next, c.v.Version+1, now
		n.pending[nv.ID] = &nv
		s.pub.Publish(pubsub.ChangeOf(&nv).WithState(&nv))
	}
	return nil
}

// countsInOne runs countsStatement and returns the ids it wrote.
func (s *Service) countsInOne(ctx context.Context, cs []change, vals []any, now time.Time) (map[string]bool, error) {
	var b strings.Builder
	b.WriteString(s.countsHead)
	args := make([]any, 0, 1+3*len(cs))
	args = append(args, now)
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.countsRow)
		args = append(args, c.v.ID, c.v.Version, vals[i])
	}
	b.WriteString(s.countsTail)
	rows, err := s.db.SQL.QueryContext(ctx, s.db.Rebind(b.String()), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ok := make(map[string]bool, len(cs))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ok[id] = true
	}
	return ok, rows.Err()
}

// countsPrepared runs updateStatement, prepared once, for each change in
// one transaction and returns the ids it wrote.
func (s *Service) countsPrepared(ctx context.Context, cs []change, vals []any, now time.Time) (map[string]bool, error) {
	tx, err := s.db.SQL.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	stmt, err := tx.PrepareContext(ctx, s.updateText)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	ok := make(map[string]bool, len(cs))
	for i, c := range cs {
		res, err := stmt.ExecContext(ctx, vals[i], *c.v.SettlementNetwork, now, c.v.ID, c.v.Version)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 1 {
			ok[c.v.ID] = true
		}
	}
	return ok, tx.Commit()
}
