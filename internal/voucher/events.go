package voucher

import (
	"context"

	"github.com/voucherd/voucherd/ent"
)

// EventSink receives every voucher change inside the transaction that makes
// it, so what it writes (the webhook outbox) commits or rolls back with the
// change. prev is nil for a newly reserved voucher. Only business vouchers
// produce deposit events, but the sink decides; the voucher service calls it
// for every change of a voucher with a business.
type EventSink interface {
	VoucherChanged(ctx context.Context, tx *ent.Tx, prev, next *ent.Voucher) error
}

// NoEvents is the EventSink that records nothing.
type NoEvents struct{}

// VoucherChanged does nothing.
func (NoEvents) VoucherChanged(context.Context, *ent.Tx, *ent.Voucher, *ent.Voucher) error {
	return nil
}
