package settlement

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/detectioncursor"
	"github.com/voucherd/voucherd/ent/settlementclaim"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// Detection: payments no one reported (docs/settlement.md, "Deposit
// addresses and detection"). A checkout on a network with a deposit
// factory is watched from its creation until expiresAt + the settlement
// window, whatever its status: each poll scans the blocks since the last
// scan for payments to the watched deposit addresses (the chain's
// Detector), and a transaction found there is added to that checkout's
// settlement exactly as a receipt naming it would be, then judged by the
// same rules. The first detection resolves a REDEEMED checkout.

// reasonExpired is voucher.ReasonExpired (the voucher package depends on
// this one).
const reasonExpired = "expired"

const (
	// maxScan bounds the blocks one poll scans (a watcher catching up after
	// a pause scans in steps of it, one per poll).
	maxScan = 64
	// startLookback is how far back the very first scan of a network
	// reaches (no cursor recorded yet); after that each scan goes on from
	// the recorded cursor, however long the service was down.
	startLookback = 256
)

// watchEntry is one watched checkout: its deposit address and due asset.
type watchEntry struct {
	id    string
	watch Watch
}

// watchList returns the watches of n's open checkouts. The ids come from
// an index range on (watch_network, expires_at); a checkout's address and
// asset never change, so only the rows of new ids are read.
func (s *Service) watchList(ctx context.Context, n *watched, now time.Time) ([]Watch, error) {
	ids, err := s.db.Voucher.Query().
		Where(entvoucher.WatchNetwork(n.Name), entvoucher.ExpiresAtGT(now.Add(-s.window))).
		IDs(ctx)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*watchEntry, len(ids))
	var fresh []string
	for _, id := range ids {
		if e := n.watches[id]; e != nil {
			next[id] = e
		} else {
			fresh = append(fresh, id)
		}
	}
	changed := len(fresh) > 0 || len(next) != len(n.watches)
	for len(fresh) > 0 {
		m := min(len(fresh), readChunk)
		rows, err := s.db.Voucher.Query().Where(entvoucher.IDIn(fresh[:m]...)).
			Select(entvoucher.FieldID, entvoucher.FieldExpectedPayment, entvoucher.FieldSuppliedPayment, entvoucher.FieldDeposit,
				entvoucher.FieldPayments, entvoucher.FieldNetworks, entvoucher.FieldSolanaPayReference).All(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range rows {
			if !detectable(v) || v.ExpectedPayment == nil {
				continue
			}
			d, err := dueOf(s.reg, v)
			if err != nil {
				s.log.WarnContext(ctx, "settlement: a watched checkout names no payment", "voucher", v.ID, "err", err.Error())
				continue
			}
			asset := Native
			if !d.token.Native {
				asset = d.token.CurrencyAddress
			}
			var w Watch
			if v.SolanaPayReference != nil {
				// Solana: the reference key and the mint, base58 (case
				// matters).
				w = Watch{Address: *v.SolanaPayReference, Asset: asset}
			} else {
				w = Watch{Address: strings.ToLower(v.Deposit.Address), Asset: strings.ToLower(asset)}
			}
			next[v.ID] = &watchEntry{id: v.ID, watch: w}
		}
		fresh = fresh[m:]
	}
	if changed || n.watchList == nil {
		n.watches = next
		n.byWatch = make(map[Watch]string, len(next))
		n.watchList = make([]Watch, 0, len(next))
		for _, id := range ids {
			if e := next[id]; e != nil {
				n.byWatch[e.watch] = id
				n.watchList = append(n.watchList, e.watch)
			}
		}
	}
	return n.watchList, nil
}

// readCursor takes the detection cursor of n from the database (what the
// last scan on any replica, before a restart too, recorded): a replica
// that polls n after another, or after a pause, scans on from there instead
// of from its own memory, so no block is left unscanned. One primary-key
// read a poll on a network with watches.
func (s *Service) readCursor(ctx context.Context, n *watched) error {
	c, err := s.db.DetectionCursor.Get(ctx, n.Name)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	n.scanned, n.saved = uint64(c.Height), uint64(c.Height)
	return nil
}

// saveCursor records how far n's detection has scanned, once it moved.
func (s *Service) saveCursor(ctx context.Context, n *watched, now time.Time) error {
	if n.scanned == n.saved {
		return nil
	}
	err := s.db.DetectionCursor.Create().SetID(n.Name).SetHeight(int64(n.scanned)).SetUpdatedAt(now).
		OnConflictColumns(detectioncursor.FieldID).UpdateNewValues().Exec(ctx)
	if err != nil {
		return err
	}
	n.saved = n.scanned
	return nil
}

// scanRange is the blocks this poll scans: from the last scanned height,
// less the network's confirmations (a reorg of a block already scanned may
// bring a payment that was not there; a payment already recorded is not
// recorded twice), up to the head, at most maxScan blocks.
func (n *watched) scanRange(head uint64) (after, upTo uint64) {
	if n.typ == chain.TypeSolana {
		// A reference's signatures cost one call whatever range they
		// span, and a reference is fresh for its checkout: the first scan
		// after a start takes every slot (payments made while the service
		// was down are found however long that was; what is recorded
		// already is not added twice), then each scan the slots since the
		// last, up to the head. Confirmed slots are not rolled back, so
		// there is no margin.
		if n.scanned > head {
			n.scanned = 0
		}
		return n.scanned, head
	}
	if n.scanned == 0 || n.scanned > head {
		n.scanned = head - min(head, startLookback)
	}
	back := uint64(n.Confirmations)
	after = n.scanned - min(n.scanned, back)
	upTo = min(head, n.scanned+maxScan)
	return after, upTo
}

// detection is what a poll adds to one checkout from what it found.
type detection struct {
	// resolve: the checkout was REDEEMED and the payment was mined before
	// it expired; the change resolves it (as submit-payment would).
	resolve bool
	hashes  []string
}

// detected turns found transactions into the checkouts' new settlement
// transactions. vs are the vouchers pending on the network (the rest are
// read); it returns, by voucher id, the voucher and what to add, and the
// hashes to look up. A transaction already in the checkout's settlement (a
// submitted hash, an earlier scan) is not added again.
func (s *Service) detected(ctx context.Context, n *watched, found []Found, vs []*ent.Voucher) (map[string]*ent.Voucher, map[string][]string, error) {
	byID := map[string][]string{}
	for _, f := range found {
		id := n.byWatch[f.Watch]
		if id == "" || slices.Contains(byID[id], f.Hash) {
			continue
		}
		byID[id] = append(byID[id], f.Hash)
	}
	if len(byID) == 0 {
		return nil, nil, nil
	}
	rows := make(map[string]*ent.Voucher, len(byID))
	for _, v := range vs {
		if byID[v.ID] != nil {
			rows[v.ID] = v
		}
	}
	var read []string
	for id := range byID {
		if rows[id] == nil {
			read = append(read, id)
		}
	}
	if len(read) > 0 {
		got, err := s.db.Voucher.Query().Where(entvoucher.IDIn(read...)).All(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, v := range got {
			rows[v.ID] = v
		}
	}
	var all []string
	for id, hs := range byID {
		v := rows[id]
		if v == nil {
			delete(byID, id)
			continue
		}
		keep := hs[:0]
		for _, h := range hs {
			if !hasTx(v.Settlement, h) {
				keep = append(keep, h)
			}
		}
		if len(keep) == 0 {
			delete(byID, id)
			continue
		}
		byID[id] = keep
		all = append(all, keep...)
	}
	if len(all) == 0 {
		return nil, nil, nil
	}
	// A deposit address is its checkout's alone (a fresh CREATE2 address),
	// so no claim takes a credit to it away from that checkout: not a
	// receipt another voucher handed in first (one naming the deposit
	// address as its own wallet), nor another deposit address paid by the
	// same transaction (a batched withdrawal pays each its own transfer).
	// A checkout found by a Solana Pay reference is paid to the widget's
	// own wallet, which its other checkouts share: there one transaction
	// counts for one voucher at most, the first to claim it (within this
	// poll, the first in chain order), as for submitted receipts.
	var shared []string
	for id, hs := range byID {
		if rows[id].Deposit == nil {
			shared = append(shared, hs...)
		}
	}
	if len(shared) > 0 {
		claims, err := s.db.SettlementClaim.Query().
			Where(settlementclaim.Network(n.Name), settlementclaim.TransactionHashIn(shared...)).All(ctx)
		if err != nil {
			return nil, nil, err
		}
		taker := make(map[string]string, len(claims))
		for _, c := range claims {
			taker[c.TransactionHash] = c.VoucherID
		}
		for _, f := range found {
			if id := n.byWatch[f.Watch]; id != "" && rows[id] != nil && rows[id].Deposit == nil && taker[f.Hash] == "" &&
				slices.Contains(byID[id], f.Hash) {
				taker[f.Hash] = id
			}
		}
		for id, hs := range byID {
			if rows[id].Deposit != nil {
				continue
			}
			keep := hs[:0]
			for _, h := range hs {
				if t := taker[h]; t == id {
					keep = append(keep, h)
				} else {
					s.log.WarnContext(ctx, "settlement: a detected payment is claimed by another voucher",
						"network", n.Name, "transaction", h, "voucher", id, "claimedBy", t)
				}
			}
			if len(keep) == 0 {
				delete(byID, id)
			} else {
				byID[id] = keep
			}
		}
	}
	for id := range rows {
		if byID[id] == nil {
			delete(rows, id)
		}
	}
	return rows, byID, nil
}

func hasTx(st *payment.Settlement, h string) bool {
	if st == nil {
		return false
	}
	for _, t := range st.Transactions {
		if t.TransactionHash == h {
			return true
		}
	}
	return false
}

// withDetected is v's settlement with the detected transactions added
// (PENDING; the judge observes them next), opened when v had none, and
// PENDING again on the network when it was decided (a later payment).
func (s *Service) withDetected(n *watched, d due, v *ent.Voucher, hashes []string, now time.Time) *payment.Settlement {
	var st payment.Settlement
	if v.Settlement != nil && v.Settlement.Verified {
		st = *v.Settlement
		st.Transactions = slices.Clone(v.Settlement.Transactions)
		st.Events = slices.Clone(v.Settlement.Events)
	} else {
		st = payment.Settlement{Verified: true, RequiredConfirmations: n.Confirmations, Currency: d.currency}
	}
	st.Status, st.Network = payment.SettlementPending, n.Name
	deadline := now.Add(s.window)
	if st.Deadline == nil || st.Deadline.Before(deadline) {
		st.Deadline = &deadline
	}
	for _, h := range hashes {
		st.Transactions = append(st.Transactions, payment.SettlementTransaction{TransactionHash: h, Status: payment.TxPending, Detected: true})
	}
	return &st
}

// Statements of a detection's change: resolveStatement resolves a REDEEMED
// checkout with its settlement (as a resolve would); recordStatement adds
// to the settlement of a checkout in any other state (a later payment, a
// late one). Both are guarded by the version the watcher judged.
const (
	resolveStatement = "UPDATE vouchers SET status = 'RESOLVED', receipts = ?, live_code = NULL, settlement = ?, settlement_network = ?, updated_at = ?, version = version + 1" +
		" WHERE id = ? AND version = ? AND status = 'REDEEMED'"
	recordStatement = "UPDATE vouchers SET settlement = ?, settlement_network = ?, updated_at = ?, version = version + 1" +
		" WHERE id = ? AND version = ?"
)

// commitDetections records the changes detections made, each with the
// claims of its new transactions and the events it causes, in one
// transaction; then publishes each. Any failure records nothing (the next
// poll scans the same blocks again).
func (s *Service) commitDetections(ctx context.Context, n *watched, cs []change, now time.Time) error {
	written := make([]*ent.Voucher, 0, len(cs))
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		written = written[:0]
		var evVouchers []*ent.Voucher
		var evTypes [][]string
		var claims, depositClaims []*ent.SettlementClaimCreate
		for _, c := range cs {
			val, err := json.Marshal(c.next)
			if err != nil {
				return fmt.Errorf("settlement: encode: %w", err)
			}
			var network any
			if !c.next.Final() {
				network = n.Name
			}
			nv := *c.v
			wrote := false
			if c.detect.resolve {
				rs := []payment.Receipt{{PaymentID: c.v.ExpectedPayment.ID, TransactionHash: c.detect.hashes[0]}}
				rb, err := json.Marshal(rs)
				if err != nil {
					return err
				}
				if wrote, err = execOne(ctx, tx, s.db.Rebind(resolveStatement), jsonArg(s.db.Dialect, rb), jsonArg(s.db.Dialect, val), network, now, c.v.ID, c.v.Version); err != nil {
					return err
				}
				if wrote {
					nv.Status, nv.Receipts, nv.LiveCode = entvoucher.StatusRESOLVED, rs, nil
				}
			}
			if !wrote {
				// Not REDEEMED any more (the expiry sweep recorded it
				// DISCARDED): the payment is recorded on it as it stands.
				var err error
				if wrote, err = execOne(ctx, tx, s.db.Rebind(recordStatement), jsonArg(s.db.Dialect, val), network, now, c.v.ID, c.v.Version); err != nil {
					return err
				}
			}
			if !wrote {
				// Moved since it was read (a resolve, the expiry sweep):
				// the next poll reads it again and scans the same blocks.
				return fmt.Errorf("settlement: voucher %s changed while its payment was detected; retrying", c.v.ID)
			}
			nv.Settlement, nv.Version, nv.UpdatedAt = c.next, c.v.Version+1, now
			nv.SettlementNetwork = nil
			if !c.next.Final() {
				name := n.Name
				nv.SettlementNetwork = &name
			}
			if dep := s.sweepDue(n, c.v, c.next); dep != nil {
				if err := s.markSweep(ctx, tx, n, &nv, dep); err != nil {
					return err
				}
			}
			for _, h := range c.detect.hashes {
				cl := tx.SettlementClaim.Create().SetNetwork(n.Name).SetTransactionHash(h).SetVoucherID(c.v.ID).SetCreatedAt(now)
				if c.v.Deposit != nil {
					depositClaims = append(depositClaims, cl)
				} else {
					claims = append(claims, cl)
				}
			}
			if len(c.events) > 0 {
				evVouchers, evTypes = append(evVouchers, &nv), append(evTypes, c.events)
			}
			written = append(written, &nv)
		}
		// A deposit address's payment is claimed where no voucher has
		// claimed it yet, so a later submit-payment naming it on another
		// voucher is refused; a claim already there stays and takes
		// nothing from the checkout (detected). A reference's payment was
		// checked unclaimed (detected): a claim made since (a concurrent
		// resolve) fails the transaction, and the next poll drops it.
		if len(depositClaims) > 0 {
			if err := tx.SettlementClaim.CreateBulk(depositClaims...).OnConflict().DoNothing().Exec(ctx); err != nil {
				return fmt.Errorf("settlement: claim detected transactions: %w", err)
			}
		}
		if len(claims) > 0 {
			if err := tx.SettlementClaim.CreateBulk(claims...).Exec(ctx); err != nil {
				return fmt.Errorf("settlement: claim detected transactions: %w", err)
			}
		}
		if s.events != nil && len(evVouchers) > 0 {
			return s.events.SettlementsChanged(ctx, tx, evVouchers, evTypes)
		}
		return nil
	})
	for _, c := range cs {
		delete(n.pending, c.v.ID)
	}
	if err != nil {
		return fmt.Errorf("settlement: record %d detections: %w", len(cs), err)
	}
	for _, v := range written {
		if !v.Settlement.Final() {
			n.pending[v.ID] = v
		}
		s.pub.Publish(pubsub.ChangeOf(v).WithState(v))
	}
	return nil
}

// execOne runs a guarded statement and reports whether it changed a row.
func execOne(ctx context.Context, tx *ent.Tx, q string, args ...any) (bool, error) {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	k, err := res.RowsAffected()
	return k == 1, err
}
