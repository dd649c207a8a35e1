package settlement

import (
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
)

// Reasons of INVALID transactions.
const (
	ReasonReverted       = "the transaction reverted"
	ReasonBeforeReserved = "mined before the voucher was reserved"
	ReasonWrongSender    = "not sent from suppliedPayment.wallet.address"
	ReasonNoTransfer     = "moves none of the due currency to the payee's wallet"
	ReasonCustomMismatch = "its to, value or data differ from the payment's input"
	ReasonWindow         = "not confirmed within the settlement window"
)

// observation is what one poll saw of a network.
type observation struct {
	head uint64
	// txs are the transactions looked up in this poll, by canonical hash.
	txs map[string]Tx
}

// judge applies what the chain shows (obs) to v's settlement cur at time
// now. It returns the next settlement (cur itself when nothing changed)
// and the deposit events the change causes. It is the one place that says
// what pays; it does no I/O.
func judge(d due, typ string, v *ent.Voucher, cur *payment.Settlement, obs *observation, now time.Time) (*payment.Settlement, []string) {
	next := *cur
	next.Transactions = slices.Clone(cur.Transactions)
	next.Events = slices.Clone(cur.Events)
	reserved := v.CreatedAt.Truncate(time.Second)
	for i := range next.Transactions {
		t := &next.Transactions[i]
		if t.Status == payment.TxInvalid {
			continue
		}
		if tx, looked := obs.txs[t.TransactionHash]; looked {
			observe(d, typ, t, tx, reserved, obs.head, next.RequiredConfirmations)
			// A checkout's payment mined after it expired is late: still
			// recorded and counted, and its events say so.
			t.Late = detectable(v) && tx.Found && !tx.BlockTime.IsZero() && !tx.BlockTime.Before(v.ExpiresAt)
		} else if t.BlockNumber != nil && typ != chain.TypeSolana {
			// Not looked up: its block is still canonical (see watcher).
			t.Confirmations = confirmations(typ, obs.head, uint64(*t.BlockNumber), false, next.RequiredConfirmations)
			t.Status = minedStatus(t.Confirmations, next.RequiredConfirmations)
		}
	}
	var events []string
	tally(d, &next)
	if next.Status == payment.SettlementPending && !now.Before(*next.Deadline) {
		for i := range next.Transactions {
			t := &next.Transactions[i]
			if t.Status == payment.TxPending || t.Status == payment.TxMined {
				t.Status, t.Reason, t.Confirmations = payment.TxInvalid, ReasonWindow, 0
				t.Amount, t.BlockNumber, t.BlockHash = "", nil, ""
			}
		}
		tally(d, &next)
	}
	if detectable(v) && next.Status == payment.SettlementUnderpaid && now.Before(v.ExpiresAt) {
		// A partial payment to an open checkout: the customer may still
		// pay the rest to the same address (or with the same reference).
		// The verdict waits for the sum or for the checkout's expiry.
		next.Status = payment.SettlementPending
	}
	if anyMined(&next) && !next.SentEvent(EventPending) {
		events = append(events, EventPending)
	}
	if e, ok := Verdict(&next); ok && !next.SentEvent(e) {
		events = append(events, e)
	}
	next.Events = append(next.Events, events...)
	if same(cur, &next) {
		return cur, nil
	}
	return &next, events
}

// detectable reports whether v is a checkout whose payments the watcher
// finds by itself: one with a deposit address (EVM) or a Solana Pay
// reference.
func detectable(v *ent.Voucher) bool { return v.Deposit != nil || v.SolanaPayReference != nil }

// observe sets t from the transaction as the chain shows it now.
func observe(d due, typ string, t *payment.SettlementTransaction, tx Tx, reserved time.Time, head uint64, required int) {
	t.Reason, t.Amount, t.Confirmations, t.BlockNumber, t.BlockHash = "", "", 0, nil, ""
	t.Status = payment.TxPending
	if !tx.Found {
		// Never mined, or its block was reorganised away: it counts again
		// only once mined again.
		return
	}
	bn := int64(tx.BlockNumber)
	t.BlockNumber, t.BlockHash = &bn, tx.BlockHash
	switch {
	case !tx.BlockTime.IsZero() && tx.BlockTime.Before(reserved):
		invalid(t, ReasonBeforeReserved)
		return
	case !tx.Success:
		invalid(t, ReasonReverted)
		return
	}
	if d.custom != nil {
		if !customMatches(typ, d.custom.Input, tx) {
			invalid(t, ReasonCustomMismatch)
			return
		}
	} else {
		if d.sender != "" && !chain.SameAddress(typ, tx.From, d.sender) {
			invalid(t, ReasonWrongSender)
			return
		}
		paid := paidBy(d, typ, tx)
		if paid.Sign() <= 0 {
			invalid(t, ReasonNoTransfer)
			return
		}
		t.Amount = money.Format(units(paid, d.token.Decimals))
	}
	t.Confirmations = confirmations(typ, head, tx.BlockNumber, tx.Finalized, required)
	t.Status = minedStatus(t.Confirmations, required)
}

func invalid(t *payment.SettlementTransaction, reason string) {
	t.Status, t.Reason, t.Confirmations, t.Amount = payment.TxInvalid, reason, 0, ""
}

// paidBy sums what tx moved of the due asset to the payee: the due token's
// own credits (logs of any other contract never count), or native credits.
func paidBy(d due, typ string, tx Tx) *big.Int {
	asset := Native
	if !d.token.Native {
		asset = d.token.CurrencyAddress
	}
	sum := new(big.Int)
	for _, c := range tx.Credits {
		if c.Amount == nil || c.Amount.Sign() <= 0 || !chain.SameAddress(typ, c.To, d.payee) {
			continue
		}
		if c.Asset == asset || (asset != Native && typ == chain.TypeEVM && strings.EqualFold(c.Asset, asset)) {
			sum.Add(sum, c.Amount)
		}
	}
	if asset == Native && typ == chain.TypeEVM && !chain.SameAddress(typ, tx.To, d.payee) {
		// Native value pays only as the transaction's own value to the
		// payee (docs/settlement.md, "What pays"), whatever an adapter reports besides.
		return new(big.Int)
	}
	return sum
}

// customMatches compares a CUSTOM instruction with the transaction: to,
// value and data equal (hex case-insensitive).
func customMatches(typ string, in payment.TransactionInput, tx Tx) bool {
	if !chain.SameAddress(typ, tx.To, in.To) {
		return false
	}
	want, ok := new(big.Int).SetString(in.Value, 10)
	if !ok {
		return false
	}
	got := tx.Value
	if got == nil {
		got = new(big.Int)
	}
	if want.Cmp(got) != 0 {
		return false
	}
	data := strings.TrimPrefix(strings.ToLower(in.Data), "0x")
	return data == hexOf(tx.Data)
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// confirmations counts a mined transaction's confirmations: head − block + 1
// on evm; on solana the finalized commitment is the required count.
func confirmations(typ string, head, block uint64, finalized bool, required int) int {
	if typ == chain.TypeSolana {
		if finalized {
			return required
		}
		return 0
	}
	if head < block {
		return 0
	}
	return int(head - block + 1)
}

func minedStatus(confs, required int) string {
	if confs >= required {
		return payment.TxConfirmed
	}
	return payment.TxMined
}

// tally derives the settlement's own fields from its transactions:
// PENDING while any transaction that may still pay is unconfirmed; once
// every such transaction is confirmed, the verdict on their sum; FAILED
// when none pays.
func tally(d due, s *payment.Settlement) {
	var paid decimal.Decimal
	minConfs, mined, open, confirmed := -1, false, false, false
	for _, t := range s.Transactions {
		switch t.Status {
		case payment.TxInvalid:
			continue
		case payment.TxPending:
			open = true
			continue
		case payment.TxMined:
			open = true
		case payment.TxConfirmed:
			confirmed = true
		}
		mined = true
		if minConfs < 0 || t.Confirmations < minConfs {
			minConfs = t.Confirmations
		}
		if t.Amount != "" {
			if a, err := money.ParseAnyScale(t.Amount); err == nil {
				paid = paid.Add(a)
			}
		}
	}
	s.Confirmations = max(minConfs, 0)
	s.PaidAmount = ""
	if mined && d.custom == nil {
		s.PaidAmount = money.Format(paid)
	}
	switch {
	case open:
		s.Status = payment.SettlementPending
	case !confirmed:
		s.Status = payment.SettlementFailed
	case d.custom != nil:
		s.Status = payment.SettlementConfirmed
	default:
		s.Status = verdict(paid, d.amount)
	}
}

func anyMined(s *payment.Settlement) bool {
	for _, t := range s.Transactions {
		if t.Status == payment.TxMined || t.Status == payment.TxConfirmed {
			return true
		}
	}
	return false
}

// same reports whether two settlements show the same thing.
func same(a, b *payment.Settlement) bool {
	if a.Status != b.Status || a.Confirmations != b.Confirmations || a.PaidAmount != b.PaidAmount ||
		len(a.Transactions) != len(b.Transactions) || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Transactions {
		x, y := a.Transactions[i], b.Transactions[i]
		if x.Late != y.Late || x.Status != y.Status || x.Reason != y.Reason || x.Confirmations != y.Confirmations || x.Amount != y.Amount ||
			x.BlockHash != y.BlockHash || (x.BlockNumber == nil) != (y.BlockNumber == nil) ||
			(x.BlockNumber != nil && *x.BlockNumber != *y.BlockNumber) {
			return false
		}
	}
	return true
}
