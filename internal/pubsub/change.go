// Package pubsub fans voucher changes out to subscribers: an in-process hub
// on every replica, fed on PostgreSQL by LISTEN/NOTIFY so a change committed
// on one replica reaches subscribers on all of them.
package pubsub

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/jsonx"
)

// Channel names voucher changes among the cross-replica channels. On
// PostgreSQL no change is sent on it: each replica's Notifier sends its
// changes on a channel of its own (ChangeChannel), and each Listener
// LISTENs only on its peers' ones, so no replica hears its own changes
// back. On NATS it is the changes' subjects' middle token (natsbus).
const Channel = "voucher_changes"

// ChangeChannel is the PostgreSQL channel the replica named replica sends
// its voucher changes on: Channel, an underscore and 16 hex digits of the
// name's SHA-256. Replica names are free text of any length, a channel
// name is an identifier of at most 63 bytes; this one is 32 bytes of
// lower-case letters, digits and underscores, the same for a name on every
// replica (the Notifier and its peers' Listeners both derive it).
func ChangeChannel(replica string) string {
	sum := sha256.Sum256([]byte(replica))
	return Channel + "_" + hex.EncodeToString(sum[:8])
}

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

// EncodeChange is c's payload with its state (c.Voucher) as the row when
// it fits: the bytes EncodeNotification(c, jsonx.Marshal(c.Voucher))
// makes, written into one buffer (the keys, then the row encoded in
// place) instead of three. Without a state, keys only.
//
// The buffer is from a pool: a publisher that has handed the payload on
// (its bytes copied into a statement or a NATS buffer) gives it back with
// ReleasePayload, and must not touch it after.
func EncodeChange(c VoucherChange) ([]byte, error) {
	v := c.Voucher
	c.Row, c.Voucher = nil, nil
	buf, err := jsonx.Append((*payloads.Get().(*[]byte))[:0], c)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return buf, nil
	}
	keys := len(buf)
	if buf, err = jsonx.Append(append(buf, '\n'), v); err != nil || len(buf) >= MaxRowPayload {
		// Unencodable or too large: keys only, as EncodeNotification
		// without a row (replicas load it).
		return buf[:keys:keys], nil
	}
	return buf, nil
}

// payloads hold EncodeChange's buffers between a change's encoding and
// its sending: a committing replica encodes one per transition, and none
// outlives its notification.
var payloads = sync.Pool{New: func() any { b := make([]byte, 0, 1536); return &b }}

// ReleasePayload gives back a payload of EncodeChange's once its bytes
// have been copied where they go. One grown past MaxRowPayload's size
// class is left to the collector.
func ReleasePayload(b []byte) {
	if c := cap(b); c < 1536 || c > 2*MaxRowPayload {
		return
	}
	b = b[:0]
	payloads.Put(&b)
}

// EncodeNotification is c's payload, with row when it fits.
func EncodeNotification(c VoucherChange, row []byte) ([]byte, error) {
	c.Row, c.Voucher = nil, nil
	keys, err := jsonx.Marshal(c)
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
	c, row, err := parseKeys(payload)
	if err == nil && row != "" {
		c.Row = json.RawMessage(row)
	}
	return c, err
}

// parseKeys reads a payload's keys, and returns its row's text (not
// copied). The keys' strings share the payload's memory (they are
// substrings of it) unless they needed decoding.
func parseKeys(payload string) (VoucherChange, string, error) {
	keys, row, _ := strings.Cut(payload, "\n")
	if c, ok := scanKeys(keys); ok {
		return c, row, nil
	}
	var c VoucherChange
	if err := json.Unmarshal([]byte(keys), &c); err != nil {
		return c, "", err
	}
	return c, row, nil
}

// scanKeys reads the keys object as the service writes it (EncodeNotification,
// or the statements' json_build_object: string values without escapes,
// integers, null, spaces around the punctuation) without allocating; ok is
// false for anything else (an escape, a nested value, a key it does not
// know), which json.Unmarshal then reads.
func scanKeys(s string) (c VoucherChange, ok bool) {
	i := 0
	space := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r') {
			i++
		}
	}
	str := func() (string, bool) {
		if i >= len(s) || s[i] != '"' {
			return "", false
		}
		j := i + 1
		for j < len(s) && s[j] != '"' {
			if s[j] == '\\' || s[j] < 0x20 {
				return "", false
			}
			j++
		}
		if j >= len(s) {
			return "", false
		}
		v := s[i+1 : j]
		i = j + 1
		return v, true
	}
	space()
	if i >= len(s) || s[i] != '{' {
		return c, false
	}
	i++
	space()
	if i < len(s) && s[i] == '}' {
		i++
		space()
		return c, i == len(s)
	}
	for {
		space()
		key, okk := str()
		if !okk {
			return c, false
		}
		space()
		if i >= len(s) || s[i] != ':' {
			return c, false
		}
		i++
		space()
		if i >= len(s) {
			return c, false
		}
		switch {
		case strings.HasPrefix(s[i:], "null"):
			i += 4
			switch key {
			case "id", "version", "sessionId", "businessId", "payerId", "payeeId":
			default:
				return c, false
			}
		case key == "version":
			j, n := i, 0
			for j < len(s) && s[j] >= '0' && s[j] <= '9' && j-i < 18 {
				n = n*10 + int(s[j]-'0')
				j++
			}
			if j == i || (j < len(s) && s[j] >= '0' && s[j] <= '9') {
				return c, false
			}
			c.Version, i = n, j
		default:
			v, okv := str()
			if !okv {
				return c, false
			}
			switch key {
			case "id":
				c.ID = v
			case "sessionId":
				c.SessionID = v
			case "businessId":
				c.BusinessID = v
			case "payerId":
				c.PayerID = v
			case "payeeId":
				c.PayeeID = v
			default:
				return c, false
			}
		}
		space()
		if i >= len(s) {
			return c, false
		}
		if s[i] == '}' {
			i++
			space()
			return c, i == len(s)
		}
		if s[i] != ',' {
			return c, false
		}
		i++
	}
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
