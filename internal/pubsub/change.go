// Package pubsub fans voucher changes out to subscribers: an in-process hub
// on every replica, fed on PostgreSQL by LISTEN/NOTIFY so a change committed
// on one replica reaches subscribers on all of them.
package pubsub

// Channel is the PostgreSQL NOTIFY channel voucher changes are sent on.
// The voucher service issues pg_notify(Channel, <VoucherChange JSON>) in the
// same transaction as the change, so a notification exists exactly when the
// change committed.
const Channel = "voucher_changes"

// VoucherChange says that a voucher reached a new version. It carries the
// keys subscriptions are filtered by, never the voucher itself (NOTIFY
// payloads are small); each replica loads the voucher once per change.
type VoucherChange struct {
	ID         string `json:"id"`
	Version    int    `json:"version"`
	SessionID  string `json:"sessionId"`
	BusinessID string `json:"businessId,omitempty"`
	PayerID    string `json:"payerId"`
	PayeeID    string `json:"payeeId"`
}

// Publisher delivers a committed change to this replica's subscribers. The
// voucher service calls it after commit on SQLite; on PostgreSQL the
// LISTEN side calls it for every replica's changes.
type Publisher interface {
	Publish(c VoucherChange)
}

// PublisherFunc adapts a func to Publisher.
type PublisherFunc func(VoucherChange)

// Publish calls f.
func (f PublisherFunc) Publish(c VoucherChange) { f(c) }
