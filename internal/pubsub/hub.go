package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/jsonx"
)

// Kind is what a subscription follows.
type Kind uint8

// Subscription kinds: one voucher, every voucher of a payer's session, or
// every voucher of a business.
const (
	ByVoucher Kind = iota
	BySession
	ByBusiness
	numKinds
)

// ErrSlow ends a subscription whose reader fell too far behind: more
// distinct vouchers changed than it may have waiting. Coalescing already
// folds repeated changes of one voucher into its latest version, so this
// only happens to a business-wide subscriber that stopped reading.
var ErrSlow = errors.New("pubsub: subscriber fell behind")

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("pubsub: subscription closed")

// Loader reads vouchers for the hub. The hub loads each change once per
// replica, however many subscribers receive it.
type Loader interface {
	// Load returns the current state of the vouchers with these ids;
	// ids that no longer exist are left out.
	Load(ctx context.Context, ids []string) ([]*ent.Voucher, error)
	// ChangedSince lists the vouchers changed at or after t (keys only),
	// to re-send what a listener gap may have lost.
	ChangedSince(ctx context.Context, t time.Time) ([]VoucherChange, error)
}

// Options tune a Hub; zero values take the defaults.
type Options struct {
	// Shards is the number of loader goroutines. A voucher always goes
	// through the same shard, which keeps its versions in order.
	Shards int
	// MaxPending bounds the distinct vouchers waiting for one subscriber
	// before it is dropped with ErrSlow (default 64).
	MaxPending int
	// MaxBatch bounds how many vouchers one load reads (default 256).
	MaxBatch int
	// Prepare applies the read model to a voucher decoded from a change's
	// Row, as the loader's client does to what it loads (an expired
	// voucher shows as DISCARDED). Nil leaves the row as stored.
	Prepare func(*ent.Voucher)
	Log     *slog.Logger
}

// Hub fans voucher changes out to this replica's subscribers. Publish is
// cheap and never blocks on a subscriber: changes nobody follows are dropped
// at once; a change this replica committed, with few subscribers, goes to
// their mailboxes from the publishing goroutine (Publish); the rest go to a
// shard worker, which takes the new state from the
// change itself when it carries it (its Row, or the Voucher of an in-process
// publish) and otherwise loads it (one query per batch), and hands it to
// each subscriber's mailbox, where repeated changes of one voucher coalesce
// to the newest version.
type Hub struct {
	loader     Loader
	prepare    func(*ent.Voucher)
	log        *slog.Logger
	maxPending int
	maxBatch   int

	mu    sync.RWMutex
	index [numKinds]map[string][]*Subscription
	count atomic.Int64

	shards []*shard
	stop   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool

	delivered atomic.Int64
	dropped   atomic.Int64
}

// NewHub starts a hub reading vouchers through loader. Close stops it.
func NewHub(loader Loader, opts Options) *Hub {
	if opts.Shards <= 0 {
		opts.Shards = 4
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 64
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	h := &Hub{loader: loader, prepare: opts.Prepare, log: opts.Log, maxPending: opts.MaxPending, maxBatch: opts.MaxBatch, stop: make(chan struct{})}
	for k := range h.index {
		h.index[k] = map[string][]*Subscription{}
	}
	h.shards = make([]*shard, opts.Shards)
	for i := range h.shards {
		s := &shard{hub: h, pending: map[string]pendingChange{}, wake: make(chan struct{}, 1), seen: newVersionMemo(50_000)}
		h.shards[i] = s
		h.wg.Add(1)
		go s.run()
	}
	return h
}

// Close stops the shard workers and ends every subscription.
func (h *Hub) Close() {
	if !h.closed.CompareAndSwap(false, true) {
		return
	}
	close(h.stop)
	h.wg.Wait()
	h.mu.Lock()
	var all []*Subscription
	for k := range h.index {
		for _, subs := range h.index[k] {
			all = append(all, subs...)
		}
		h.index[k] = map[string][]*Subscription{}
	}
	h.mu.Unlock()
	for _, s := range all {
		s.end(ErrClosed)
	}
}

// Stats are the hub's counters, for metrics and benchmarks.
type Stats struct {
	// Subscriptions is how many are open now.
	Subscriptions int64
	// Delivered counts events handed to subscribers' mailboxes.
	Delivered int64
	// Dropped counts subscribers ended with ErrSlow.
	Dropped int64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{Subscriptions: h.count.Load(), Delivered: h.delivered.Load(), Dropped: h.dropped.Load()}
}

// inlineMax is how many subscribers an in-process change may have for its
// publisher to hand it to them itself (Publish).
const inlineMax = 8

// Publish records that a voucher changed. It implements Publisher.
//
// A change that carries its new state (c.Voucher: this replica committed
// it; c.Row: another replica's notification) is handed over by the
// publishing goroutine itself (the committing request, or the listener
// that read the notification, both already running) when at most
// inlineMax subscribers follow it and its shard's worker is not sending at
// that moment. Waking the shard's worker for it cost a scheduling delay on
// a busy machine (about 150 µs a change on average in a runtime trace of
// the commit→subscriber phase at load 20, and the tail of that delay was
// the p99). A larger fan-out (a business's dashboard), a row that does not
// decode, and a change without its state still go to the worker, so the
// publisher never waits for thousands of mailboxes or a load.
func (h *Hub) Publish(c VoucherChange) { h.publish(c, true) }

// publish is Publish; with write false the subscribers queued in line are
// told to write the change from their own transports' workers (Notify's
// now false), not from this goroutine.
func (h *Hub) publish(c VoucherChange, write bool) {
	if c.ID == "" || !h.interested(c) {
		return
	}
	s := h.shardFor(c.ID)
	if (c.Voucher != nil || len(c.Row) > 0) && !h.closed.Load() && s.sendMu.TryLock() {
		var arr [inlineMax]*Subscription
		queued, done := s.sendInline(c, arr[:0])
		s.sendMu.Unlock()
		if done {
			// Outside the shard's lock: the subscriber's transport may
			// now render and write the change from this goroutine.
			for i, sub := range queued {
				sub.notifyNow(write)
				queued[i] = nil
			}
			return
		}
	}
	s.add(c, false)
}

// PublishNotification publishes the change a notification payload
// (EncodeNotification's, or the statements' pg_notify) describes, as the
// listener and the NATS bus hear it from other replicas. It reads the
// keys first, without allocating, and copies the row out of the payload
// only for a change someone here follows and the hub has not dispatched
// at that version yet: most notifications a replica hears are for
// vouchers nobody there follows. (A replica's own changes do not come
// back: on PostgreSQL it does not LISTEN on its own change channel, and
// the NATS bus drops them by their subject before decoding. The exception
// is a rolling deploy from the shared channel: while a replica of that
// version is heard, the others' changes come twice and a replica's own
// once, on the shared channel, each a version dispatched already.)
func (h *Hub) PublishNotification(payload string) error {
	return h.publishNotification(payload, true)
}

// PublishNotificationBehind is PublishNotification for a notification
// that others wait behind on the caller's goroutine (the listener or the
// NATS subscription has more already read): the subscribers here are told
// to write it from their transports' workers rather than from the
// caller's goroutine, so the notifications behind it wait only for its
// decoding, not for its writes, and a burst's frames go out in parallel.
// (A notification alone is still written in line: that saves the
// hand-off, which on a busy machine is a wait in the run queue.)
func (h *Hub) PublishNotificationBehind(payload string) error {
	return h.publishNotification(payload, false)
}

func (h *Hub) publishNotification(payload string, write bool) error {
	c, row, err := parseKeys(payload)
	if err != nil {
		return err
	}
	if c.ID == "" {
		return errors.New("pubsub: a change notification without an id")
	}
	if !h.interested(c) || h.dispatched(c) {
		return nil // as Publish would: nobody to send it to, or sent
	}
	if row != "" {
		c.Row = json.RawMessage(row)
	}
	// The keys' strings share the payload's memory; the hub keeps them
	// only while the change waits for its shard (what it remembers, the
	// version memo, is keyed by the decoded or loaded voucher's id).
	h.publish(c, write)
	return nil
}

// dispatched reports whether c's version was already dispatched, when that
// can be told without waiting for the shard's lock (false otherwise).
func (h *Hub) dispatched(c VoucherChange) bool {
	if c.Version <= 0 {
		return false
	}
	s := h.shardFor(c.ID)
	if !s.sendMu.TryLock() {
		return false
	}
	last, ok := s.seen.get(c.ID)
	s.sendMu.Unlock()
	return ok && c.Version <= last
}

// Resync sends what this replica may have missed after changes could have
// been lost (a LISTEN connection that dropped, a replica that went silent
// or dropped notifications): every followed voucher is loaded, and so is
// every voucher of a followed session or business changed at or after
// since, and each is sent unless this hub already dispatched that version.
// A resync reaches back a margin before the loss (a minute by default), so
// most of what it loads was delivered already; re-sending all of it would
// flood business-wide subscribers with repeats (past their MaxPending, which
// ends them with ErrSlow) for changes nobody missed. A version the hub's
// memo has forgotten is sent again, marked Resync: versions may repeat, they
// never go back.
func (h *Hub) Resync(ctx context.Context, since time.Time) error {
	changes, err := h.loader.ChangedSince(ctx, since)
	if err != nil {
		return err
	}
	// One reload per voucher, however it is followed.
	todo := map[string]VoucherChange{}
	for _, c := range changes {
		if h.interested(c) {
			todo[c.ID] = c
		}
	}
	h.mu.RLock()
	for id := range h.index[ByVoucher] {
		if _, ok := todo[id]; !ok {
			todo[id] = VoucherChange{ID: id}
		}
	}
	h.mu.RUnlock()
	for _, c := range todo {
		h.shardFor(c.ID).add(c, true)
	}
	return nil
}

// CatchUp sends what changed at or after since and was not dispatched
// here: every voucher changed since then that a subscription here follows
// (by id, session or business), loaded once, unless this hub already
// dispatched that version (then it costs neither a load nor a send). It is
// Resync for a loss that is known to hold only changes made since since:
// the notifications a peer sent on its change channel before this
// replica's LISTEN on it was in effect (Listener), each of them a change
// the peer committed after it started, after this listener started and
// after it was last dropped. Resync also reloads every voucher followed
// by id, whatever its age, which such a loss cannot have touched; with
// many subscribers (every checkout page follows one voucher by id) that
// is a load per subscribed voucher on every join, for nothing. What it
// sends is not marked Resync: each is a version no subscriber here was
// sent, and one the memo forgot is a repeat subscribers drop as such.
//
// With no subscription open it asks nothing (a replica just started has
// none yet): a change notified before a subscription existed is one the
// hub drops anyway, and from now on the peer's LISTEN is in effect.
func (h *Hub) CatchUp(ctx context.Context, since time.Time) error {
	if h.count.Load() == 0 {
		return nil
	}
	changes, err := h.loader.ChangedSince(ctx, since)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if h.interested(c) {
			h.shardFor(c.ID).add(c, false)
		}
	}
	return nil
}

func (h *Hub) interested(c VoucherChange) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.index[ByVoucher][c.ID]) > 0 ||
		(c.SessionID != "" && len(h.index[BySession][c.SessionID]) > 0) ||
		(c.BusinessID != "" && len(h.index[ByBusiness][c.BusinessID]) > 0)
}

func (h *Hub) shardFor(id string) *shard {
	f := fnv.New32a()
	_, _ = f.Write([]byte(id))
	return h.shards[f.Sum32()%uint32(len(h.shards))]
}

// Subscribe follows key (a voucher, session or business id). The caller
// has already checked that it may; it must Close the subscription when done
// (typically with context.AfterFunc on the request's context, so no
// goroutine waits for it).
func (h *Hub) Subscribe(kind Kind, key string) *Subscription {
	s := &Subscription{hub: h, kind: kind, key: key, ready: make(chan struct{}, 1)}
	if h.closed.Load() {
		s.err = ErrClosed
		return s
	}
	h.mu.Lock()
	h.index[kind][key] = append(h.index[kind][key], s)
	h.mu.Unlock()
	h.count.Add(1)
	return s
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := h.index[s.kind][s.key]
	for i, x := range subs {
		if x == s {
			last := len(subs) - 1
			subs[i] = subs[last]
			subs[last] = nil
			subs = subs[:last]
			if len(subs) == 0 {
				delete(h.index[s.kind], s.key)
			} else {
				h.index[s.kind][s.key] = subs
			}
			h.count.Add(-1)
			return
		}
	}
}

// followers lists (into buf) every subscriber following v's voucher,
// session or business.
func (h *Hub) followers(v *ent.Voucher, buf []*Subscription) []*Subscription {
	buf = buf[:0]
	h.mu.RLock()
	buf = append(buf, h.index[ByVoucher][v.ID]...)
	buf = append(buf, h.index[BySession][v.SessionID]...)
	if v.BusinessID != nil {
		buf = append(buf, h.index[ByBusiness][*v.BusinessID]...)
	}
	h.mu.RUnlock()
	return buf
}

// dispatch hands ev to every subscriber following its voucher, session or
// business. It never blocks on a subscriber.
func (h *Hub) dispatch(ev *Event, buf []*Subscription) []*Subscription {
	return h.deliverTo(ev, h.followers(ev.Voucher, buf))
}

// deliverTo hands ev to the subscribers in buf.
func (h *Hub) deliverTo(ev *Event, buf []*Subscription) []*Subscription {
	for _, s := range buf {
		switch s.deliver(ev, h.maxPending) {
		case deliverDropped:
			h.dropped.Add(1)
			h.remove(s)
		case deliverQueued:
			h.delivered.Add(1)
		}
	}
	clear(buf)
	return buf
}

// Event is one voucher state to send. All subscribers receiving it share
// the same loaded voucher and the same rendered bytes (see Claim).
type Event struct {
	Voucher *ent.Voucher
	// Resync marks a re-send after possible loss: its version may equal
	// the last one a subscriber saw.
	Resync bool

	mu sync.Mutex
	// first is the first selection's rendering, in the event itself: a
	// change is rarely followed with more than one selection, and then
	// claiming it allocates nothing. more holds the others.
	first    rendering
	hasFirst bool
	more     []*rendering
	// published is first once Publish gave it its bytes: the many
	// subscribers of one selection (a business's dashboards) read it
	// without taking mu, which they would otherwise queue on.
	published atomic.Pointer[rendering]
}

// find is key's rendering (e.mu held).
func (e *Event) find(key string) *rendering {
	if e.hasFirst && e.first.key == key {
		return &e.first
	}
	for _, r := range e.more {
		if r.key == key {
			return r
		}
	}
	return nil
}

type rendering struct {
	key  string
	done sync.WaitGroup // Publish is done
	// data is what the renderer published (the engine's rendered
	// response); read-only once published.
	data any
	ok   bool
}

// Claim returns the event's rendering for key (a selection-set
// fingerprint). Of all the event's subscribers asking for key, the first
// gets first = true: it renders the event and hands the result to Publish.
// Every other waits for that and gets data and ok; ok is false when the
// first declined to share (each caller then renders for itself). What data
// is, the renderer decides (graph/engine publishes its response); the hub
// only hands it on. Claim and Publish take no function, so a caller behind
// an interface (graph/engine) allocates nothing to ask.
func (e *Event) Claim(key string) (data any, ok, first bool) {
	if r := e.published.Load(); r != nil && r.key == key {
		return r.data, r.ok, false
	}
	e.mu.Lock()
	if r := e.find(key); r != nil {
		e.mu.Unlock()
		r.done.Wait()
		return r.data, r.ok, false
	}
	var r *rendering
	if !e.hasFirst {
		e.hasFirst = true
		r = &e.first
	} else {
		r = &rendering{}
		e.more = append(e.more, r)
	}
	r.key = key
	r.done.Add(1)
	e.mu.Unlock()
	return nil, false, true
}

// Publish hands the rendering for key to the subscribers waiting in Claim.
// The caller Claim answered first must call it exactly once, with ok false
// when it does not share (it failed, or it panicked).
func (e *Event) Publish(key string, data any, ok bool) {
	e.mu.Lock()
	r := e.find(key)
	e.mu.Unlock()
	if r == nil {
		return
	}
	r.data, r.ok = data, ok
	if r == &e.first {
		e.published.Store(r)
	}
	r.done.Done()
}

// Subscription is one subscriber's mailbox. It holds no goroutine: the hub
// writes into it, and the subscriber either waits in Next or, with Notify,
// is called back to read with TryNext (so an idle subscriber needs no
// goroutine at all).
type Subscription struct {
	hub   *Hub
	kind  Kind
	key   string
	ready chan struct{}

	mu     sync.Mutex
	queue  []*Event
	err    error
	closed bool
	notify func(now bool)
}

// Notify makes the hub call f whenever an event is queued or the
// subscription ends; f must not block. now is true when f is called by the
// goroutine that published the change (the committing request, or the
// listener that heard it), holding no lock of the hub, for a change with
// few subscribers: f may then do the subscriber's work itself (render and
// write the change) instead of waking another goroutine for it. Otherwise
// (the hub's worker, a fan-out, the end of the subscription, a heard
// notification with more waiting behind it: PublishNotificationBehind)
// now is false.
// Set it once, before events can arrive, or right after subscribing and
// then check Pending.
func (s *Subscription) Notify(f func(now bool)) {
	s.mu.Lock()
	s.notify = f
	s.mu.Unlock()
}

// Pending reports whether TryNext has something to return: an event, or
// the end of the subscription.
func (s *Subscription) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0 || s.err != nil || s.closed
}

// TryNext returns the next event without waiting: (nil, nil) when none is
// queued, ErrSlow or ErrClosed when the subscription ended.
func (s *Subscription) TryNext() (*Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		return s.popLocked(), nil
	}
	if s.err != nil {
		return nil, s.err
	}
	if s.closed {
		return nil, ErrClosed
	}
	return nil, nil
}

func (s *Subscription) popLocked() *Event {
	ev := s.queue[0]
	s.queue[0] = nil
	if len(s.queue) == 1 {
		if cap(s.queue) <= 2 {
			// Kept for the next event: a subscriber that reads what it
			// gets (nearly all) allocates no slice per event. A larger
			// array (a backlog) goes back to the GC.
			s.queue = s.queue[:0]
		} else {
			s.queue = nil
		}
	} else {
		s.queue = s.queue[1:]
	}
	return ev
}

// signal wakes a waiting Next and calls the Notify function.
func (s *Subscription) signal(notify func(bool)) {
	s.wake()
	if notify != nil {
		notify(false)
	}
}

// wake wakes a waiting Next.
func (s *Subscription) wake() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// notifyNow calls the Notify function from the publishing goroutine, for
// an event deliverQuiet queued (see Notify), with now as given: false
// when the publisher has more to publish behind it.
func (s *Subscription) notifyNow(now bool) {
	s.mu.Lock()
	notify := s.notify
	s.mu.Unlock()
	if notify != nil {
		notify(now)
	}
}

type deliverResult uint8

const (
	deliverIgnored deliverResult = iota
	deliverQueued
	deliverDropped
)

// deliver queues ev (or replaces the same voucher's older event) and
// signals the subscriber; past max distinct vouchers waiting it ends the
// subscription with ErrSlow instead.
func (s *Subscription) deliver(ev *Event, max int) deliverResult { return s.queueEvent(ev, max, false) }

// deliverQuiet queues ev as deliver does; a queued event wakes a waiting
// Next but is not yet reported to the Notify function: the caller does
// that with notifyNow. A dropped subscriber is signalled at once.
func (s *Subscription) deliverQuiet(ev *Event, max int) deliverResult {
	return s.queueEvent(ev, max, true)
}

func (s *Subscription) queueEvent(ev *Event, max int, quiet bool) deliverResult {
	s.mu.Lock()
	if s.closed || s.err != nil {
		s.mu.Unlock()
		return deliverIgnored
	}
	res := deliverQueued
	coalesced := false
	for i, q := range s.queue {
		if q.Voucher.ID == ev.Voucher.ID {
			// The shard delivers one voucher's versions in order, so the
			// newer event simply replaces the one not yet read.
			if ev.Voucher.Version > q.Voucher.Version || ev.Resync {
				s.queue[i] = ev
			}
			coalesced = true
			break
		}
	}
	if !coalesced {
		if len(s.queue) >= max {
			s.queue, s.err, res = nil, ErrSlow, deliverDropped
		} else {
			s.queue = append(s.queue, ev)
		}
	}
	if quiet && res == deliverQueued {
		s.mu.Unlock()
		s.wake()
		return res
	}
	notify := s.notify
	s.mu.Unlock()
	s.signal(notify)
	return res
}

// Next waits for the next event. It returns ctx's error when ctx ends,
// ErrSlow when the subscriber fell behind, ErrClosed after Close.
func (s *Subscription) Next(ctx context.Context) (*Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.popLocked()
			s.mu.Unlock()
			return ev, nil
		}
		err := s.err
		if err == nil && s.closed {
			err = ErrClosed
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops the subscription and removes it from the hub. It is safe to
// call more than once and from any goroutine.
func (s *Subscription) Close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.queue = nil
	notify := s.notify
	s.mu.Unlock()
	if !already {
		s.hub.remove(s)
		s.signal(notify)
	}
}

func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.queue = nil
	notify := s.notify
	s.mu.Unlock()
	s.signal(notify)
}

// shard loads and dispatches the changes of the vouchers hashed to it.
type shard struct {
	hub     *Hub
	mu      sync.Mutex
	pending map[string]pendingChange
	wake    chan struct{}
	// sendMu is held while changes are checked against seen and
	// dispatched: by the worker (process), or by a publisher handing its
	// own change over (Publish, sendInline).
	sendMu sync.Mutex
	// seen remembers the last version dispatched per voucher, so a change
	// whose load already returned a later version is not sent twice.
	seen *versionMemo
}

// sendInline dispatches c from the publishing goroutine (sendMu held) when
// it carries its state and at most inlineMax subscribers follow it; it
// returns done false (nothing done) otherwise, and the worker takes it.
// The subscribers it queued the change for are appended to queued, not yet
// notified: Publish notifies them once the shard's lock is released.
func (s *shard) sendInline(c VoucherChange, queued []*Subscription) (_ []*Subscription, done bool) {
	h := s.hub
	// A version already dispatched (heard again, or caught up by a resync)
	// needs no decoding.
	if last, ok := s.seen.get(c.ID); ok && c.Version > 0 && c.Version <= last {
		return queued, true
	}
	keys := ent.Voucher{ID: c.ID, SessionID: c.SessionID}
	if c.BusinessID != "" {
		keys.BusinessID = &c.BusinessID
	}
	var arr [inlineMax]*Subscription
	buf := h.followers(&keys, arr[:0])
	if len(buf) > inlineMax {
		return queued, false
	}
	v := h.stateOf(c)
	if v == nil {
		return queued, false // to be loaded: the worker does that
	}
	if last, ok := s.seen.get(v.ID); ok && v.Version <= last {
		return queued, true
	}
	s.seen.put(v.ID, v.Version)
	if len(buf) > 0 {
		ev := &Event{Voucher: v}
		for _, sub := range buf {
			switch sub.deliverQuiet(ev, h.maxPending) {
			case deliverDropped:
				h.dropped.Add(1)
				h.remove(sub)
			case deliverQueued:
				h.delivered.Add(1)
				queued = append(queued, sub)
			}
		}
		clear(buf)
	}
	return queued, true
}

type pendingChange struct {
	change VoucherChange
	resync bool
}

func (s *shard) add(c VoucherChange, resync bool) {
	s.mu.Lock()
	p, ok := s.pending[c.ID]
	if !ok || c.Version >= p.change.Version {
		p.change = c
	}
	p.resync = p.resync || resync
	s.pending[c.ID] = p
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *shard) take(max int) []pendingChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	n := min(len(s.pending), max)
	batch := make([]pendingChange, 0, n)
	for id, p := range s.pending {
		if len(batch) == n {
			break
		}
		batch = append(batch, p)
		delete(s.pending, id)
	}
	return batch
}

// putBack re-queues a batch whose load failed, unless newer changes came.
func (s *shard) putBack(batch []pendingChange) {
	s.mu.Lock()
	for _, p := range batch {
		if q, ok := s.pending[p.change.ID]; ok {
			q.resync = q.resync || p.resync
			s.pending[p.change.ID] = q
		} else {
			s.pending[p.change.ID] = p
		}
	}
	s.mu.Unlock()
}

func (s *shard) run() {
	h := s.hub
	defer h.wg.Done()
	var buf []*Subscription
	for {
		select {
		case <-h.stop:
			return
		case <-s.wake:
		}
		for {
			batch := s.take(h.maxBatch)
			if batch == nil {
				break
			}
			var failed []pendingChange
			var err error
			buf, failed, err = s.process(batch, buf)
			if err != nil {
				h.log.Error("pubsub: loading changed vouchers failed; retrying", "err", err.Error(), "vouchers", len(failed))
				s.putBack(failed)
				select {
				case <-h.stop:
					return
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
	}
}

// process dispatches a batch: the changes that carry their new state at
// once, the others after one load. It returns the changes to retry when
// that load failed.
func (s *shard) process(batch []pendingChange, buf []*Subscription) ([]*Subscription, []pendingChange, error) {
	h := s.hub
	var toLoad []pendingChange
	s.sendMu.Lock()
	for _, p := range batch {
		c := p.change
		if !p.resync && !h.interested(c) {
			continue
		}
		// A version already dispatched (heard again, or caught up after
		// a join) needs no decoding or load.
		if last, ok := s.seen.get(c.ID); ok && !p.resync && c.Version > 0 && c.Version <= last {
			continue
		}
		if v := h.stateOf(c); v != nil && !p.resync {
			buf = s.send(v, false, buf)
			continue
		}
		toLoad = append(toLoad, p)
	}
	s.sendMu.Unlock()
	if len(toLoad) == 0 {
		return buf, nil, nil
	}
	ids := make([]string, len(toLoad))
	resync := make(map[string]bool, len(toLoad))
	for i, p := range toLoad {
		ids[i] = p.change.ID
		resync[p.change.ID] = p.resync
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := h.loader.Load(ctx, ids)
	if err != nil {
		return buf, toLoad, err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for _, v := range vs {
		buf = s.send(v, resync[v.ID], buf)
	}
	return buf, nil, nil
}

// send dispatches v unless a version at least as new was sent already
// (sendMu held).
// That holds for a resync too: every subscriber this hub had then got that
// version, and a later one started from a state at least as new.
func (s *shard) send(v *ent.Voucher, resync bool, buf []*Subscription) []*Subscription {
	if last, ok := s.seen.get(v.ID); ok && v.Version <= last {
		return buf
	}
	s.seen.put(v.ID, v.Version)
	return s.hub.dispatch(&Event{Voucher: v, Resync: resync}, buf)
}

// stateOf is the new state a change carries, or nil when it must be
// loaded. A row that does not decode is loaded instead: the notification
// is only a shortcut, the database is the truth.
func (h *Hub) stateOf(c VoucherChange) *ent.Voucher {
	if c.Voucher != nil {
		return c.Voucher
	}
	if len(c.Row) == 0 {
		return nil
	}
	v, err := DecodeRow(c.Row)
	if err != nil || v.ID != c.ID {
		h.log.Warn("pubsub: undecodable voucher row in a change notification; loading it instead", "voucher", c.ID)
		return nil
	}
	if h.prepare != nil {
		h.prepare(v)
	}
	return v
}

// DecodeRow turns a row carried in a notification (row_to_json's column
// names and values) into a voucher, as a scan of the same row would.
func DecodeRow(row []byte) (*ent.Voucher, error) {
	var v ent.Voucher
	if err := jsonx.Unmarshal(row, &v); err != nil {
		return nil, err
	}
	v.CreatedAt, v.UpdatedAt, v.ExpiresAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC(), v.ExpiresAt.UTC()
	if string(v.PayeeInfo) == "null" {
		v.PayeeInfo = nil
	}
	return &v, nil
}

// versionMemo is a bounded map from voucher id to the last version sent:
// two generations, the older dropped when the newer fills. A forgotten
// voucher can at worst be sent once more at the same version.
type versionMemo struct {
	max       int
	cur, prev map[string]int
}

func newVersionMemo(max int) *versionMemo {
	return &versionMemo{max: max, cur: map[string]int{}, prev: map[string]int{}}
}

func (m *versionMemo) get(id string) (int, bool) {
	if v, ok := m.cur[id]; ok {
		return v, true
	}
	v, ok := m.prev[id]
	return v, ok
}

func (m *versionMemo) put(id string, v int) {
	if len(m.cur) >= m.max {
		m.prev, m.cur = m.cur, make(map[string]int, m.max/4)
	}
	m.cur[id] = v
}
