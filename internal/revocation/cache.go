// Package revocation answers, from memory and with no database round trip,
// whether the grounds of a principal still hold (a resource token's voucher
// session still live; an API key not revoked), and makes an end of those
// grounds (a session closed, a membership ended, a key revoked) hold at the
// caller's next request on every replica.
//
// Two parts:
//
//   - Cache remembers what a lookup found live in the database, until the
//     entry's own expiry or the principal's end, whichever is first. A
//     request that finds its entry needs no statement; a miss reads the
//     database once and remembers the answer.
//   - Ends is how an end travels: the replica that committed it forgets the
//     principal in its caches (and closes its websockets), tells every other
//     replica, and waits until each one it knows of has done the same before
//     the ending request is answered. A replica that cannot be sure it hears
//     ends (its listener silent for longer than Options.Fresh, or
//     reconnected after losing notifications) does not answer from its
//     caches: every lookup goes to the database until it hears again.
//
// Ends are terminal (a closed session never opens again; a revoked key
// stays revoked), so a cache only ever has to forget; it never has to learn
// that something came back.
package revocation

import (
	"sync"
	"time"
)

// Cache maps a lookup key (a session id, an API key's hash) to what the
// database said about it (V), for principals found live. Each entry names
// the principal whose end forgets it, and the time from which it is not
// used (the session's or token's expiry; zero: none).
//
// A load races with an end: the database may have answered "live" just
// before the end committed, and the end may be heard before the answer is
// stored. Begin and Put close that race: Put stores nothing if any end (or
// Clear) happened since the Begin before the load.
type Cache[K comparable, V any] struct {
	mu      sync.RWMutex
	entries map[K]entry[V]
	byID    map[string][]K
	gen     uint64
	max     int
	ready   func() bool
}

type entry[V any] struct {
	v     V
	id    string
	until time.Time
}

// Ticket is the cache's generation before a load (Begin).
type Ticket uint64

// NewCache returns an empty cache of at most max entries (a full cache
// starts again empty). ready says whether the cache may answer now; nil
// means always (a single process: every end is local). NewCacheFor builds
// one whose readiness is the replica's.
func NewCache[K comparable, V any](max int, ready func() bool) *Cache[K, V] {
	if max <= 0 {
		max = 1 << 16
	}
	return &Cache[K, V]{entries: map[K]entry[V]{}, byID: map[string][]K{}, max: max, ready: ready}
}

// Get returns the entry for key when there is one, now is before its
// expiry, and the cache may answer. A nil cache never answers (and Begin
// and Put do nothing on it).
func (c *Cache[K, V]) Get(key K, now time.Time) (V, bool) {
	var zero V
	if c == nil || (c.ready != nil && !c.ready()) {
		return zero, false
	}
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || (!e.until.IsZero() && !now.Before(e.until)) {
		return zero, false
	}
	return e.v, true
}

// Begin is called before the database is read for key; its ticket goes to
// Put.
func (c *Cache[K, V]) Begin() Ticket {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return Ticket(c.gen)
}

// Put remembers v for key, ended by principal id, used until until (zero:
// no expiry), unless an end or a Clear happened since t was issued.
func (c *Cache[K, V]) Put(t Ticket, key K, id string, v V, until time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if uint64(t) != c.gen {
		return
	}
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		c.entries = map[K]entry[V]{}
		c.byID = map[string][]K{}
	}
	if old, ok := c.entries[key]; ok && old.id == id {
		c.entries[key] = entry[V]{v: v, id: id, until: until}
		return
	}
	c.entries[key] = entry[V]{v: v, id: id, until: until}
	c.byID[id] = append(c.byID[id], key)
}

// End forgets every entry of principal id, and makes loads begun before it
// store nothing.
func (c *Cache[K, V]) End(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, k := range c.byID[id] {
		if e, ok := c.entries[k]; ok && e.id == id {
			delete(c.entries, k)
		}
	}
	delete(c.byID, id)
}

// Clear forgets everything (the replica may have missed ends).
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = map[K]entry[V]{}
	c.byID = map[string][]K{}
}

// Len is how many entries the cache holds.
func (c *Cache[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
