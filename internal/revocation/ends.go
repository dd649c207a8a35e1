package revocation

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Transport carries ends between replicas (on PostgreSQL: the pubsub
// notifier and listener). Messages sent on one channel reach every
// replica's listener, the sender's own included, in the order they were
// committed.
type Transport struct {
	// Replica is this process's name among the replicas (no spaces).
	Replica string
	// Send queues payload on channel for every replica's listener; it must
	// not block, and it sends even when no other replica is known.
	Send func(channel, payload string)
	// Peers are the other replicas this one currently hears.
	Peers func() []string
	// Heard is when this replica's listener last took in a notification.
	Heard func() time.Time
}

// Channels an Ends uses on its Transport (listeners route them to Handle
// and HandleAck).
const (
	// EndedChannel: "<principal id> <origin replica> <nonce>" (an older
	// replica sends the bare principal id, and waits for no one).
	EndedChannel = "voucher_principals_ended"
	// AckChannel: "<origin replica> <nonce> <acking replica>".
	AckChannel = "voucher_principals_ended_ack"
)

// Options tune an Ends; zero values take the defaults.
type Options struct {
	// Wait bounds how long End waits for the other replicas (default 5 s,
	// the listeners' PeerTimeout: a replica silent that long is taken for
	// gone).
	Wait time.Duration
	// Fresh: a replica whose listener took in nothing for this long does
	// not answer from its caches (default 3 s; every replica's notifier says
	// it is alive every second, its own listener included).
	Fresh time.Duration
	Log   *slog.Logger
}

// Ends spreads the ends of principals over the replicas (see the package
// comment). The zero value is not usable; New makes one. Before Connect
// (and for good on SQLite, one process) an end is local only.
type Ends struct {
	opts Options
	// hooks guards local and lost: caches may be added while the listener
	// already delivers ends.
	hooks sync.RWMutex
	local []func(id string)
	lost  []func()

	tr    atomic.Pointer[Transport]
	mu    sync.Mutex
	waits map[string]*waiter // by nonce
}

type waiter struct {
	echoed bool
	acked  map[string]bool
	wake   chan struct{}
}

// New returns an Ends with no transport: ends are local.
func New(opts Options) *Ends {
	if opts.Wait <= 0 {
		opts.Wait = 5 * time.Second
	}
	if opts.Fresh <= 0 {
		opts.Fresh = 3 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Ends{opts: opts, waits: map[string]*waiter{}}
}

// OnEnd adds f to what an end does on each replica (forget the principal in
// a cache, close its websockets). f must not block.
func (e *Ends) OnEnd(f func(id string)) {
	e.hooks.Lock()
	e.local = append(e.local, f)
	e.hooks.Unlock()
}

// endLocal runs what an end does on this replica.
func (e *Ends) endLocal(id string) {
	e.hooks.RLock()
	fs := e.local
	e.hooks.RUnlock()
	for _, f := range fs {
		f(id)
	}
}

// NewCacheFor returns a cache that answers only while this replica hears ends,
// forgets a principal when it ends anywhere, and is cleared when ends may
// have been missed.
func NewCacheFor[K comparable, V any](e *Ends, max int) *Cache[K, V] {
	c := NewCache[K, V](max, e.Ready)
	e.OnEnd(c.End)
	e.hooks.Lock()
	e.lost = append(e.lost, c.Clear)
	e.hooks.Unlock()
	return c
}

// Connect makes ends travel over t from now on.
func (e *Ends) Connect(t Transport) { e.tr.Store(&t) }

// Ready says whether this replica's caches may answer: always with no
// transport; otherwise while its listener took in a notification within
// Fresh.
func (e *Ends) Ready() bool {
	t := e.tr.Load()
	return t == nil || time.Since(t.Heard()) < e.opts.Fresh
}

// Lost tells e that notifications may have been lost (the listener
// resyncs: its connection was re-established, a replica went silent or
// said it dropped notifications): every cache is cleared, since an end sent
// meanwhile may not have been heard.
func (e *Ends) Lost() {
	e.hooks.RLock()
	fs := e.lost
	e.hooks.RUnlock()
	for _, f := range fs {
		f()
	}
}

// End ends principal id: here at once, then on every other replica. It
// returns once every replica this one hears has acknowledged the end, or
// after Wait (a replica that does not acknowledge in time has a listener
// silent long enough that its caches no longer answer, or is gone). Call
// it after the end committed.
func (e *Ends) End(id string) {
	e.endLocal(id)
	t := e.tr.Load()
	if t == nil || strings.ContainsAny(id, " \x00") {
		return
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	w := &waiter{acked: map[string]bool{}, wake: make(chan struct{}, 1)}
	e.mu.Lock()
	e.waits[nonce] = w
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.waits, nonce)
		e.mu.Unlock()
	}()
	t.Send(EndedChannel, id+" "+t.Replica+" "+nonce)

	deadline := time.NewTimer(e.opts.Wait)
	defer deadline.Stop()
	recheck := time.NewTicker(100 * time.Millisecond)
	defer recheck.Stop()
	// First our own listener's echo: every replica that announced itself
	// before the end was sent is then known (the listener takes messages
	// in commit order); one that announces itself later reads the session
	// (or key) after the end committed.
	var waitFor []string
	for {
		e.mu.Lock()
		echoed := w.echoed
		var missing []string
		if echoed {
			if waitFor == nil {
				waitFor = append([]string{}, t.Peers()...)
			}
			current := map[string]bool{}
			for _, p := range t.Peers() {
				current[p] = true
			}
			for _, p := range waitFor {
				// A replica taken for gone meanwhile no longer counts.
				if current[p] && !w.acked[p] {
					missing = append(missing, p)
				}
			}
		}
		e.mu.Unlock()
		if echoed && len(missing) == 0 {
			return
		}
		select {
		case <-w.wake:
		case <-recheck.C:
		case <-deadline.C:
			e.opts.Log.Warn("revocation: an end was not acknowledged by every replica in time",
				"echoed", echoed, "missing", len(missing), "wait", e.opts.Wait.String())
			return
		}
	}
}

// Handle is the listener's handler for EndedChannel: it ends the principal
// on this replica and acknowledges to the replica that sent it (its own
// echo wakes that replica's End). It does not block.
func (e *Ends) Handle(payload string) {
	id, rest, _ := strings.Cut(payload, " ")
	origin, nonce, _ := strings.Cut(rest, " ")
	t := e.tr.Load()
	if t != nil && origin == t.Replica {
		e.mu.Lock()
		if w := e.waits[nonce]; w != nil {
			w.echoed = true
			poke(w.wake)
		}
		e.mu.Unlock()
		return
	}
	if id == "" {
		return
	}
	e.endLocal(id)
	if t != nil && origin != "" && nonce != "" {
		t.Send(AckChannel, origin+" "+nonce+" "+t.Replica)
	}
}

// HandleAck is the listener's handler for AckChannel.
func (e *Ends) HandleAck(payload string) {
	t := e.tr.Load()
	f := strings.Fields(payload)
	if t == nil || len(f) != 3 || f[0] != t.Replica {
		return
	}
	e.mu.Lock()
	if w := e.waits[f[1]]; w != nil {
		w.acked[f[2]] = true
		poke(w.wake)
	}
	e.mu.Unlock()
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
