// Package pubsub fans voucher changes out to subscribers: an in-process hub
// on every replica, fed on PostgreSQL by LISTEN/NOTIFY so a change committed
// on one replica reaches subscribers on all of them.
package pubsub

import (
	"encoding/json"
	"strings"

	"github.com/voucherd/voucherd/ent"
)

// Channel is the PostgreSQL NOTIFY channel voucher changes are sent on.
// The voucher service issues pg_notify(Channel, <VoucherChange JSON>) in the
// same transaction as the change, so a notification exists exactly when the
// change committed.
const Channel = "voucher_changes"

// EndedChannel carries, from replica to replica, the id of a principal
// whose grounds ended (a closed session's ses_ id, a usr_ id whose
// membership was made INACTIVE), so that every replica closes its
// websockets (Notifier.Send, ListenerOptions.Handlers).
const EndedChannel = "voucher_principals_ended"

// VoucherChange says that a voucher reached a new version. It carries the
// keys subscriptions are filtered by and, when it fits, the new state
// itself, so a replica dispatches it without reading the database; a change
// without it is loaded once per replica.
type VoucherChange struct {
	ID         string `json:"id"`
	Version    int    `json:"version"`
	SessionID  string `json:"sessionId"`
	BusinessID string `json:"businessId,omitempty"`
	PayerID    string `json:"payerId"`
	PayeeID    string `json:"payeeId"`
	// Row is the voucher's new row as PostgreSQL's row_to_json renders it
	// (column name to value), when the notification carried it (see
	// ParseNotification); ent.Voucher's JSON names are the column names.
	Row json.RawMessage `json:"-"`
	// Voucher is the new state handed over in process by the replica that
	// made the change (never sent anywhere). Subscribers only read it.
	Voucher *ent.Voucher `json:"-"`
}

// MaxRowPayload bounds a notification that carries the row: PostgreSQL
// refuses NOTIFY payloads of 8000 bytes or more (and the statement with
// them), so a larger change goes out with its keys only and is loaded.
const MaxRowPayload = 7900

// A notification's payload is the change's keys as a JSON object, then,
// when the whole fits in MaxRowPayload, a newline and the voucher's row as
// a JSON object. Keys first and apart let a replica decode only them to see
// whether anyone there follows the voucher (most changes concern nobody on
// a given replica); the row, behind the first newline (no JSON text
// PostgreSQL or encoding/json writes contains a raw one), is decoded only
// for changes someone follows.

// EncodeNotification is c's payload, with row when it fits.
func EncodeNotification(c VoucherChange, row []byte) ([]byte, error) {
	c.Row, c.Voucher = nil, nil
	keys, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if len(row) == 0 || len(keys)+1+len(row) >= MaxRowPayload {
		return keys, nil
	}
	return append(append(keys, '\n'), row...), nil
}

// ParseNotification reads a payload written by EncodeNotification or by
// the voucher statements' pg_notify.
func ParseNotification(payload string) (VoucherChange, error) {
	keys, row, _ := strings.Cut(payload, "\n")
	var c VoucherChange
	if err := json.Unmarshal([]byte(keys), &c); err != nil {
		return c, err
	}
	if row != "" {
		c.Row = json.RawMessage(row)
	}
	return c, nil
}

// WithState returns c carrying v in process.
func (c VoucherChange) WithState(v *ent.Voucher) VoucherChange {
	c.Voucher = v
	return c
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

// Publishers publishes to each in turn.
type Publishers []Publisher

// Publish calls every publisher.
func (ps Publishers) Publish(c VoucherChange) {
	for _, p := range ps {
		p.Publish(c)
	}
}
