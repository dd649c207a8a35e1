package voucher

import (
	"context"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/payment"
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

// Settler opens the settlement of a voucher being resolved
// (internal/settlement). Resolve stays one conditional statement: the
// settlement is a column it writes, and its claims are rows written in the
// same transaction.
type Settler interface {
	// Open is the settlement receipts rs start on v, or a validation error
	// for a receipt that can be judged at once (a malformed hash).
	Open(v *ent.Voucher, rs []payment.Receipt, now time.Time) (*payment.Settlement, error)
	// Claim records in tx that v (as resolved) claims its transactions; a
	// transaction another voucher claimed is a validation error.
	Claim(ctx context.Context, tx *ent.Tx, v *ent.Voucher, rs []payment.Receipt) error
	// Verifies reports whether v's payment is checked on chain (its
	// resolve then claims transactions, in a transaction).
	Verifies(v *ent.Voucher) bool
	// Resolved is told after commit, so the watcher looks at v soon.
	Resolved(v *ent.Voucher)
}
