// Package ids makes the service's opaque identifiers: a type prefix and a
// time-ordered random part (ULID layout, Crockford base32, lower case), so ids
// are unguessable, sort roughly by creation and say what they name. The prefix
// doubles as the GraphQL global-id type tag.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Prefixes of every id the service issues.
const (
	User              = "usr_"
	Device            = "dev_"
	Session           = "ses_"
	Voucher           = "vch_"
	Payment           = "pmt_"
	Business          = "biz_"
	BusinessUser      = "bzu_"
	WebhookEndpoint   = "whe_"
	Event             = "evt_"
	Delivery          = "dlv_"
	DeliveryAttempt   = "dla_"
	InteropSubmission = "isb_"
	Token             = "tok_"
	Widget            = "wgt_"
	// Checkout is the payer of a checkout voucher: whoever holds its
	// checkout token (internal/widget).
	Checkout = "chk_"
	// APIKey is a business's API key (the key itself is vsk_…, never an id).
	APIKey = "bak_"
)

// tables maps a prefix to the ent table holding that kind of node.
var tables = map[string]string{
	User:            "users",
	Device:          "devices",
	Session:         "voucher_sessions",
	Voucher:         "vouchers",
	Business:        "businesses",
	BusinessUser:    "business_users",
	WebhookEndpoint: "webhook_endpoints",
	Event:           "events",
	Delivery:        "webhook_deliveries",
	Widget:          "widgets",
}

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// New returns prefix followed by 26 characters: 48 bits of milliseconds and
// 80 bits from crypto/rand.
func New(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(fmt.Sprintf("ids: crypto/rand failed: %v", err))
	}
	var out [26]byte
	// 128 bits as 26 base32 digits, most significant first (the top digit holds 3 bits).
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + string(out[:])
}

// Generator returns a func making ids with prefix (for ent defaults).
func Generator(prefix string) func() string {
	return func() string { return New(prefix) }
}

// HasPrefix reports whether id is syntactically an id of the given kind.
func HasPrefix(id, prefix string) bool {
	return len(id) == len(prefix)+26 && strings.HasPrefix(id, prefix)
}

// Table returns the ent table of the node id names, for GraphQL node(id:).
func Table(id string) (string, error) {
	if i := strings.IndexByte(id, '_'); i > 0 {
		if t, ok := tables[id[:i+1]]; ok && len(id) == i+1+26 {
			return t, nil
		}
	}
	return "", fmt.Errorf("ids: %q is not a node id", id)
}

// Time returns when id was made (its ULID milliseconds), if id is one of
// this package's ids.
func Time(id string) (time.Time, bool) {
	_, rest, ok := strings.Cut(id, "_")
	if !ok || len(rest) != 26 {
		return time.Time{}, false
	}
	var ms uint64
	// The first 10 characters carry the top 48 bits (3 + 9 × 5): the
	// milliseconds.
	for _, c := range rest[:10] {
		i := strings.IndexRune(alphabet, c)
		if i < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(i)
	}
	return time.UnixMilli(int64(ms)), true
}
