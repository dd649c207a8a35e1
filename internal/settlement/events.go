package settlement

import "github.com/voucherd/voucherd/internal/payment"

// Verdict is the deposit event a final settlement causes: confirmed,
// underpaid, overpaid or failed by its status. A settlement that is not
// final (or none) has no verdict yet.
func Verdict(st *payment.Settlement) (string, bool) {
	if st == nil || !st.Final() {
		return "", false
	}
	switch st.Status {
	case payment.SettlementConfirmed:
		return EventConfirmed, true
	case payment.SettlementUnderpaid:
		return EventUnderpaid, true
	case payment.SettlementOverpaid:
		return EventOverpaid, true
	}
	return EventFailed, true
}

// ResolveEvents are the deposit events the resolve that opened st causes
// at once. A settlement checked on chain causes none: the watcher records
// them from what the chain shows (judge). Trusted receipts (a network
// without a chain) open a final settlement: pending, then its verdict. A
// resolve without a settlement (a voucher service without one) is pending
// only.
func ResolveEvents(st *payment.Settlement) []string {
	if st != nil && st.Verified {
		return nil
	}
	events := []string{EventPending}
	if e, ok := Verdict(st); ok {
		events = append(events, e)
	}
	return events
}
