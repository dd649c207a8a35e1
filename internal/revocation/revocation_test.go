package revocation_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/revocation"
)

func TestCacheAnswersUntilExpiryOrEnd(t *testing.T) {
	c := revocation.NewCache[string, int](0, nil)
	now := time.Now()
	if _, ok := c.Get("k", now); ok {
		t.Fatal("empty cache answered")
	}
	c.Put(c.Begin(), "k", "ses_1", 7, now.Add(time.Minute))
	if v, ok := c.Get("k", now); !ok || v != 7 {
		t.Fatalf("Get = %v %v, want 7 true", v, ok)
	}
	if _, ok := c.Get("k", now.Add(time.Minute)); ok {
		t.Fatal("answered at its expiry")
	}
	c.Put(c.Begin(), "forever", "bak_1", 1, time.Time{})
	if _, ok := c.Get("forever", now.Add(100*365*24*time.Hour)); !ok {
		t.Fatal("an entry without expiry expired")
	}
	c.End("ses_1")
	if _, ok := c.Get("k", now); ok {
		t.Fatal("answered after its principal ended")
	}
	if _, ok := c.Get("forever", now); !ok {
		t.Fatal("another principal's end forgot this one")
	}
}

// A load that began before an end stores nothing: the database may have
// said "live" just before the end committed.
func TestLoadBegunBeforeAnEndStoresNothing(t *testing.T) {
	c := revocation.NewCache[string, struct{}](0, nil)
	ticket := c.Begin()
	c.End("ses_1") // heard while the load was in flight
	c.Put(ticket, "ses_1", "ses_1", struct{}{}, time.Time{})
	if _, ok := c.Get("ses_1", time.Now()); ok {
		t.Fatal("a load begun before an end was stored")
	}
	ticket = c.Begin()
	c.Clear()
	c.Put(ticket, "ses_1", "ses_1", struct{}{}, time.Time{})
	if c.Len() != 0 {
		t.Fatal("a load begun before a Clear was stored")
	}
	c.Put(c.Begin(), "ses_1", "ses_1", struct{}{}, time.Time{})
	if _, ok := c.Get("ses_1", time.Now()); !ok {
		t.Fatal("a load begun after the end was not stored")
	}
}

func TestCacheIsBoundedAndGated(t *testing.T) {
	ready := true
	c := revocation.NewCache[int, int](3, func() bool { return ready })
	for i := range 10 {
		c.Put(c.Begin(), i, "x", i, time.Time{})
		if c.Len() > 3 {
			t.Fatalf("%d entries, bound 3", c.Len())
		}
	}
	if _, ok := c.Get(9, time.Now()); !ok {
		t.Fatal("the newest entry is gone")
	}
	ready = false
	if _, ok := c.Get(9, time.Now()); ok {
		t.Fatal("a cache that may not answer answered")
	}
}

// bus is a fake transport: every replica's listener takes every message
// in one order (as PostgreSQL's NOTIFY delivers them), on its own
// goroutine; a replica can be held (its listener stalls).
type bus struct {
	mu       sync.Mutex
	replicas map[string]*replica
}

type replica struct {
	name  string
	ends  *revocation.Ends
	in    chan [2]string
	mu    sync.Mutex
	held  bool
	queue [][2]string
	heard time.Time
}

func (b *bus) send(channel, payload string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.replicas {
		r.in <- [2]string{channel, payload}
	}
}

func (b *bus) join(t *testing.T, name string, opts revocation.Options) *replica {
	r := &replica{name: name, ends: revocation.New(opts), in: make(chan [2]string, 64), heard: time.Now()}
	b.mu.Lock()
	if b.replicas == nil {
		b.replicas = map[string]*replica{}
	}
	b.replicas[name] = r
	b.mu.Unlock()
	r.ends.Connect(revocation.Transport{Replica: name, Send: b.send,
		Peers: func() []string {
			b.mu.Lock()
			defer b.mu.Unlock()
			var ps []string
			for n := range b.replicas {
				if n != name {
					ps = append(ps, n)
				}
			}
			return ps
		},
		Heard: func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.heard }})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case m := <-r.in:
				r.mu.Lock()
				if r.held {
					r.queue = append(r.queue, m)
					r.mu.Unlock()
					continue
				}
				r.heard = time.Now()
				r.mu.Unlock()
				r.deliver(m)
			}
		}
	}()
	return r
}

func (r *replica) deliver(m [2]string) {
	switch m[0] {
	case revocation.EndedChannel:
		r.ends.Handle(m[1])
	case revocation.AckChannel:
		r.ends.HandleAck(m[1])
	}
}

func (r *replica) hold(on bool) {
	r.mu.Lock()
	r.held = on
	q := r.queue
	r.queue = nil
	if !on {
		r.heard = time.Now()
	}
	r.mu.Unlock()
	for _, m := range q {
		r.deliver(m)
	}
}

// An end on one replica has been applied on every other by the time End
// returns: the other's cache forgot the principal, its sockets' hook ran.
func TestEndHoldsOnEveryReplicaWhenItReturns(t *testing.T) {
	var b bus
	a := b.join(t, "rpl_a", revocation.Options{})
	other := b.join(t, "rpl_b", revocation.Options{})
	third := b.join(t, "rpl_c", revocation.Options{})
	caches := map[string]*revocation.Cache[string, struct{}]{}
	var mu sync.Mutex
	ended := map[string][]string{}
	for _, r := range []*replica{a, other, third} {
		c := revocation.NewCacheFor[string, struct{}](r.ends, 0)
		c.Put(c.Begin(), "ses_1", "ses_1", struct{}{}, time.Time{})
		caches[r.name] = c
		name := r.name
		r.ends.OnEnd(func(id string) { mu.Lock(); ended[name] = append(ended[name], id); mu.Unlock() })
	}
	// Slow the others' listeners: End must wait for them, not race them.
	other.hold(true)
	third.hold(true)
	returned := make(chan struct{})
	go func() { a.ends.End("ses_1"); close(returned) }()
	select {
	case <-returned:
		t.Fatal("End returned before the other replicas took the end in")
	case <-time.After(200 * time.Millisecond):
	}
	other.hold(false)
	select {
	case <-returned:
		t.Fatal("End returned before the third replica took the end in")
	case <-time.After(200 * time.Millisecond):
	}
	third.hold(false)
	<-returned
	for name, c := range caches {
		if _, ok := c.Get("ses_1", time.Now()); ok {
			t.Errorf("%s still remembers the ended session", name)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"rpl_a", "rpl_b", "rpl_c"} {
		if strings.Join(ended[name], ",") != "ses_1" {
			t.Errorf("%s ended %v, want [ses_1] once", name, ended[name])
		}
	}
}

// A replica that never acknowledges bounds End by Wait; meanwhile its
// listener is silent, so its caches stopped answering long before.
func TestSilentReplicaBoundsTheWaitAndStopsAnswering(t *testing.T) {
	var b bus
	opts := revocation.Options{Wait: 300 * time.Millisecond, Fresh: 100 * time.Millisecond}
	a := b.join(t, "rpl_a", opts)
	stuck := b.join(t, "rpl_b", opts)
	c := revocation.NewCacheFor[string, struct{}](stuck.ends, 0)
	c.Put(c.Begin(), "ses_1", "ses_1", struct{}{}, time.Time{})
	stuck.hold(true)
	start := time.Now()
	a.ends.End("ses_1")
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("End returned after %v without the stuck replica's acknowledgement", d)
	}
	if _, ok := c.Get("ses_1", time.Now()); ok {
		t.Fatal("a replica whose listener is silent answered from its cache")
	}
	stuck.hold(false)
	if _, ok := c.Get("ses_1", time.Now()); ok {
		t.Fatal("the end, heard late, did not forget the session")
	}
}

// Lost notifications (a reconnect) clear every cache; an old replica's bare
// id still ends the principal (and waits for nothing).
func TestLostAndBareEnds(t *testing.T) {
	e := revocation.New(revocation.Options{})
	c := revocation.NewCacheFor[string, struct{}](e, 0)
	c.Put(c.Begin(), "ses_1", "ses_1", struct{}{}, time.Time{})
	c.Put(c.Begin(), "ses_2", "ses_2", struct{}{}, time.Time{})
	e.Handle("ses_1")
	if _, ok := c.Get("ses_1", time.Now()); ok {
		t.Fatal("a bare id did not end the principal")
	}
	if _, ok := c.Get("ses_2", time.Now()); !ok {
		t.Fatal("ses_2 was forgotten")
	}
	e.Lost()
	if c.Len() != 0 {
		t.Fatal("Lost did not clear the cache")
	}
	// With no transport an end is local and returns at once.
	c.Put(c.Begin(), "ses_3", "ses_3", struct{}{}, time.Time{})
	e.End("ses_3")
	if _, ok := c.Get("ses_3", time.Now()); ok {
		t.Fatal("a local end did not forget the session")
	}
}
