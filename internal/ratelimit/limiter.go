// Package ratelimit enforces the spec's per-group, per-caller request budgets.
//
// Budgets use fixed windows aligned to the window length (a window starts at
// floor(now / window), counted from the Unix epoch). Fixed windows were
// chosen over sliding windows or token buckets because they are exact with
// one counter per caller and window: every replica computes the same window
// from the clock alone, a check is a single atomic increment-if-room, and an
// old window simply stops being used, so nothing has to be reset. The cost is
// the usual one: a caller can spend one budget at the end of a window and the
// next at the start of the following one.
//
// On PostgreSQL the counters live in the shared rate_limit_buckets table, so
// all replicas draw on one budget; on SQLite (one process) they live in memory.
//
// The doors do not call Limiter directly but Gate, which names the budget a
// request spends (its operation and its caller) the same way for a REST route
// and its GraphQL twin, and caps concurrent websocket connections and
// subscriptions. docs/rate-limits.md has the whole picture.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
)

// Decision is the outcome of one check, with everything the RateLimit
// headers and a 429 need.
type Decision struct {
	Group   Group
	Allowed bool
	// Limit is the group's budget per window; 0 when rate limiting is off.
	Limit int
	// Remaining is what is left in the window after this check.
	Remaining int
	// Reset is the time until the current window ends.
	Reset time.Duration
	// RetryAfter is set on denials: the wait until the window ends and the
	// budget is whole again.
	RetryAfter time.Duration
	Policy     Policy
}

// store consumes cost units from one window's counter if they all fit.
// used is the counter afterwards (or as seen when denied); known is false
// when a denying store could not see the counter.
type store interface {
	take(ctx context.Context, b bucket, cost, limit int) (used int, ok, known bool, err error)
}

// bucket identifies one caller's counter in one group and window.
type bucket struct {
	group   Group
	subject string
	start   time.Time
	end     time.Time
}

// Limiter checks and spends budgets. It is safe for concurrent use.
type Limiter struct {
	table Table
	store store // nil when off
	now   func() time.Time
}

// New returns a limiter for table, keeping budgets in PostgreSQL when db is
// PostgreSQL (shared by all replicas) and in memory otherwise (db may be
// nil). A nil or empty table turns limiting off: every check is allowed
// without any I/O. clock may be nil for time.Now.
func New(db *storage.DB, table Table, clock func() time.Time) *Limiter {
	if clock == nil {
		clock = time.Now
	}
	l := &Limiter{table: table, now: clock}
	switch {
	case len(table) == 0:
	case db != nil && db.IsPostgres():
		l.store = newPostgresStore(db, clock)
	default:
		l.store = newMemoryStore(clock)
	}
	return l
}

// Enabled reports whether checks can ever deny.
func (l *Limiter) Enabled() bool { return l.store != nil }

// Policy returns group's policy, and false if the group is unknown or
// limiting is off.
func (l *Limiter) Policy(group Group) (Policy, bool) {
	p, ok := l.table[group]
	return p, ok
}

// Allow charges cost units to subject's budget in group, all or nothing: a
// cost beyond what remains is denied and spends nothing. subject identifies
// the caller (token subject, or client address when anonymous); the caller
// is responsible for keeping those two key spaces apart. A cost larger than
// the whole limit is always denied.
//
// An error means the budget could not be checked (database down); it is not
// a denial, and the caller decides whether to fail open or closed.
func (l *Limiter) Allow(ctx context.Context, group Group, subject string, cost int) (Decision, error) {
	if l.store == nil {
		return Decision{Group: group, Allowed: true}, nil
	}
	p, ok := l.table[group]
	if !ok {
		// A group missing from the table is a wiring bug; allowing would
		// silently leave an endpoint unlimited.
		return Decision{}, fmt.Errorf("ratelimit: unknown group %q", group)
	}
	// Whole seconds keep the header's w= exact and the row key unique per window.
	if p.Limit < 1 || p.Window < time.Second || p.Window%time.Second != 0 {
		return Decision{}, fmt.Errorf("ratelimit: invalid policy for group %q: %d per %s", group, p.Limit, p.Window)
	}
	if cost < 1 {
		return Decision{}, fmt.Errorf("ratelimit: cost must be at least 1, got %d", cost)
	}
	if subject == "" {
		return Decision{}, errors.New("ratelimit: empty subject")
	}
	now := l.now()
	w := int64(p.Window)
	n := now.UnixNano()
	startNs := n - n%w
	if n < 0 && n%w != 0 { // floor, not truncation toward zero
		startNs -= w
	}
	b := bucket{group: group, subject: normalizeSubject(subject), start: time.Unix(0, startNs), end: time.Unix(0, startNs+w)}

	used, allowed, known, err := l.store.take(ctx, b, cost, p.Limit)
	if err != nil {
		return Decision{}, err
	}
	remaining := max(p.Limit-used, 0)
	if !allowed {
		// A denial proves fewer than cost units are left; when the store
		// could not see the counter this is the best honest bound.
		if !known {
			remaining = p.Limit
		}
		remaining = min(remaining, cost-1)
	}
	d := Decision{
		Group:     group,
		Allowed:   allowed,
		Limit:     p.Limit,
		Remaining: remaining,
		Reset:     b.end.Sub(now),
		Policy:    p,
	}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d, nil
}

// maxSubject bounds the stored key (the table's id holds 256 characters).
const maxSubject = 128

// normalizeSubject hashes overlong subjects; subjects are otherwise kept
// readable so an operator can see who is being limited.
func normalizeSubject(s string) string {
	if len(s) <= maxSubject {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// key is the bucket's row id. The group contains no '|' and the window start
// is numeric, so any subject (which may contain '|') stays unambiguous.
func (b bucket) key() string {
	return string(b.group) + "|" + strconv.FormatInt(b.start.Unix(), 10) + "|" + b.subject
}
