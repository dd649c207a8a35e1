package ratelimit

import (
	"context"
	"sync"
	"time"
)

// sweepEvery bounds how often stale counters are collected, in both stores:
// often enough to keep memory (or the table) small, rarely enough that the
// O(n) pass never shows up in request latency.
const sweepEvery = time.Minute

type memKey struct {
	group   Group
	subject string
}

type memBucket struct {
	start int64 // window start, Unix ns; a different start means a new window
	end   time.Time
	used  int
}

// memoryStore keeps one counter per group and caller for the current
// window. It is exact within one process, which is all SQLite deployments
// have.
type memoryStore struct {
	now       func() time.Time
	mu        sync.Mutex
	buckets   map[memKey]*memBucket
	nextSweep time.Time
}

func newMemoryStore(clock func() time.Time) *memoryStore {
	return &memoryStore{now: clock, buckets: make(map[memKey]*memBucket)}
}

func (s *memoryStore) take(_ context.Context, b bucket, cost, limit int) (int, bool, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeSweep()
	k := memKey{b.group, b.subject}
	start := b.start.UnixNano()
	mb := s.buckets[k]
	if mb == nil {
		mb = &memBucket{start: start, end: b.end}
		s.buckets[k] = mb
	} else if mb.start != start {
		*mb = memBucket{start: start, end: b.end}
	}
	if mb.used+cost > limit {
		return mb.used, false, true, nil
	}
	mb.used += cost
	return mb.used, true, true, nil
}

// maybeSweep drops counters whose window has ended, so memory is bounded
// by the callers seen in the last window rather than growing forever.
func (s *memoryStore) maybeSweep() {
	now := s.now()
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(sweepEvery)
	for k, mb := range s.buckets {
		if !now.Before(mb.end) {
			delete(s.buckets, k)
		}
	}
}

func (s *memoryStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets)
}
