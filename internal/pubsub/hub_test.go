package pubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/jsonx"
)

// fakeLoader is an in-memory voucher table that counts its loads.
type fakeLoader struct {
	mu       sync.Mutex
	rows     map[string]*ent.Voucher
	loads    atomic.Int64
	loadedID map[string]int
	failNext atomic.Int64
	changed  []VoucherChange
	asked    atomic.Int64 // ChangedSince calls
}

func newFakeLoader() *fakeLoader {
	return &fakeLoader{rows: map[string]*ent.Voucher{}, loadedID: map[string]int{}}
}

func (f *fakeLoader) set(id, session, business string, version int) VoucherChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := &ent.Voucher{ID: id, SessionID: session, Version: version, PayerID: "dev_p", PayeeID: "ses_x"}
	if business != "" {
		v.BusinessID = &business
	}
	f.rows[id] = v
	return ChangeOf(v)
}

func (f *fakeLoader) Load(_ context.Context, ids []string) ([]*ent.Voucher, error) {
	if f.failNext.Load() > 0 {
		f.failNext.Add(-1)
		return nil, errors.New("database unavailable")
	}
	f.loads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*ent.Voucher
	for _, id := range ids {
		f.loadedID[id]++
		if v, ok := f.rows[id]; ok {
			cp := *v // each load is a fresh row, as from the database
			out = append(out, &cp)
		}
	}
	return out, nil
}

func (f *fakeLoader) ChangedSince(context.Context, time.Time) ([]VoucherChange, error) {
	f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]VoucherChange(nil), f.changed...), nil
}

func next(t *testing.T, s *Subscription) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

func nothing(t *testing.T, s *Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if ev, err := s.Next(ctx); err == nil {
		t.Fatalf("unexpected event %s v%d", ev.Voucher.ID, ev.Voucher.Version)
	}
}

func newHub(t *testing.T, l Loader, opts Options) *Hub {
	h := NewHub(l, opts)
	t.Cleanup(h.Close)
	return h
}

func TestRouting(t *testing.T) {
	cases := []struct {
		name     string
		kind     Kind
		key      string
		voucher  string
		session  string
		business string
		want     bool
	}{
		{"voucher id", ByVoucher, "vch_1", "vch_1", "ses_1", "", true},
		{"other voucher", ByVoucher, "vch_2", "vch_1", "ses_1", "", false},
		{"session", BySession, "ses_1", "vch_1", "ses_1", "", true},
		{"other session", BySession, "ses_2", "vch_1", "ses_1", "", false},
		{"business", ByBusiness, "biz_1", "vch_1", "ses_1", "biz_1", true},
		{"voucher without business", ByBusiness, "biz_1", "vch_1", "ses_1", "", false},
		{"other business", ByBusiness, "biz_2", "vch_1", "ses_1", "biz_1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLoader()
			h := newHub(t, l, Options{})
			s := h.Subscribe(tc.kind, tc.key)
			defer s.Close()
			h.Publish(l.set(tc.voucher, tc.session, tc.business, 2))
			if !tc.want {
				nothing(t, s)
				if n := l.loads.Load(); n != 0 {
					t.Fatalf("a change nobody follows was loaded %d times", n)
				}
				return
			}
			ev := next(t, s)
			if ev.Voucher.ID != tc.voucher || ev.Voucher.Version != 2 || ev.Resync {
				t.Fatalf("event = %+v", ev.Voucher)
			}
		})
	}
}

// Many subscribers of one change share one load, one event and one
// rendering per selection.
func TestOneLoadAndOneRenderPerChange(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	var subs []*Subscription
	for i := 0; i < 50; i++ {
		subs = append(subs, h.Subscribe(ByVoucher, "vch_1"), h.Subscribe(BySession, "ses_1"), h.Subscribe(ByBusiness, "biz_1"))
	}
	h.Publish(l.set("vch_1", "ses_1", "biz_1", 3))
	var renders atomic.Int64
	var wg sync.WaitGroup
	events := make([]*Event, len(subs))
	for i, s := range subs {
		events[i] = next(t, s)
		wg.Add(1)
		go func(ev *Event) {
			defer wg.Done()
			b, ok := renderShared(ev, "sel", func() ([]byte, bool) {
				renders.Add(1)
				time.Sleep(5 * time.Millisecond)
				return []byte(`{"v":3}`), true
			})
			if !ok || string(b) != `{"v":3}` {
				t.Errorf("render = %q %v", b, ok)
			}
		}(events[i])
	}
	wg.Wait()
	for _, ev := range events[1:] {
		if ev != events[0] {
			t.Fatal("subscribers got different events for one change")
		}
	}
	if n := l.loads.Load(); n != 1 {
		t.Fatalf("loads = %d, want 1", n)
	}
	if n := renders.Load(); n != 1 {
		t.Fatalf("renders = %d, want 1", n)
	}
	// A declined rendering is not shared: each caller renders itself.
	ev := events[0]
	for i := 0; i < 2; i++ {
		if _, ok := renderShared(ev, "other", func() ([]byte, bool) { return nil, false }); ok {
			t.Fatal("declined rendering reported ok")
		}
	}
}

// renderShared is how a subscriber renders an event: the first to Claim a
// key renders and publishes, the others take what it published.
func renderShared(ev *Event, key string, render func() ([]byte, bool)) ([]byte, bool) {
	data, ok, first := ev.Claim(key)
	if first {
		b, ok := render()
		ev.Publish(key, b, ok)
		return b, ok
	}
	b, _ := data.([]byte)
	return b, ok
}

func TestVersionsNeverGoBackOrRepeat(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	s := h.Subscribe(ByVoucher, "vch_1")
	defer s.Close()
	// The notification says v1, but v2 committed before the load: v2 is sent.
	c1 := l.set("vch_1", "ses_1", "", 1)
	l.set("vch_1", "ses_1", "", 2)
	h.Publish(c1)
	if ev := next(t, s); ev.Voucher.Version != 2 {
		t.Fatalf("got v%d, want v2", ev.Voucher.Version)
	}
	// v2's own notification then finds nothing new.
	h.Publish(VoucherChange{ID: "vch_1", Version: 2, SessionID: "ses_1"})
	nothing(t, s)
	h.Publish(l.set("vch_1", "ses_1", "", 3))
	if ev := next(t, s); ev.Voucher.Version != 3 {
		t.Fatalf("got v%d, want v3", ev.Voucher.Version)
	}
}

// A subscriber that does not read keeps only the newest version of each
// voucher; past MaxPending distinct vouchers it is dropped, and nobody else
// waits for it.
func TestSlowSubscriber(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{MaxPending: 3})
	slow := h.Subscribe(ByBusiness, "biz_1")
	fast := h.Subscribe(ByVoucher, "vch_a")
	defer fast.Close()
	for v := 1; v <= 5; v++ {
		h.Publish(l.set("vch_a", "ses_1", "biz_1", v))
		if ev := next(t, fast); ev.Voucher.Version != v {
			t.Fatalf("fast subscriber got v%d, want v%d", ev.Voucher.Version, v)
		}
	}
	// The fast subscriber comes first in a dispatch: wait until v5 has
	// been handed to the slow one too (five versions to each).
	deadline := time.Now().Add(2 * time.Second)
	for h.Stats().Delivered < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ev := next(t, slow)
	if ev.Voucher.ID != "vch_a" || ev.Voucher.Version != 5 {
		t.Fatalf("coalesced event = %s v%d, want vch_a v5", ev.Voucher.ID, ev.Voucher.Version)
	}
	nothing(t, slow)
	for _, id := range []string{"vch_b", "vch_c", "vch_d", "vch_e"} {
		h.Publish(l.set(id, "ses_1", "biz_1", 1))
	}
	deadline = time.Now().Add(2 * time.Second)
	for h.Stats().Dropped == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := slow.Next(context.Background()); !errors.Is(err, ErrSlow) {
		t.Fatalf("slow subscriber: err = %v, want ErrSlow", err)
	}
	if st := h.Stats(); st.Dropped != 1 || st.Subscriptions != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestCloseAndCancel(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	s := h.Subscribe(BySession, "ses_1")
	if h.Stats().Subscriptions != 1 {
		t.Fatal("subscription not counted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.Next(ctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
	go func() { _, err := s.Next(context.Background()); done <- err }()
	s.Close()
	s.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if n := h.Stats().Subscriptions; n != 0 {
		t.Fatalf("subscriptions after Close = %d", n)
	}
	h.Publish(l.set("vch_1", "ses_1", "", 1))
	time.Sleep(20 * time.Millisecond)
	if n := l.loads.Load(); n != 0 {
		t.Fatalf("change for a closed subscription was loaded")
	}
}

func TestLoadFailureIsRetried(t *testing.T) {
	l := newFakeLoader()
	l.failNext.Store(2)
	h := newHub(t, l, Options{Log: discardLog()})
	s := h.Subscribe(ByVoucher, "vch_1")
	defer s.Close()
	h.Publish(l.set("vch_1", "ses_1", "", 4))
	if ev := next(t, s); ev.Voucher.Version != 4 {
		t.Fatalf("got v%d", ev.Voucher.Version)
	}
}

func TestResync(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	byID := h.Subscribe(ByVoucher, "vch_1")
	bySession := h.Subscribe(BySession, "ses_9")
	byBusiness := h.Subscribe(ByBusiness, "biz_1")
	defer byID.Close()
	defer bySession.Close()
	defer byBusiness.Close()
	h.Publish(l.set("vch_1", "ses_1", "", 1))
	next(t, byID)
	h.Publish(l.set("vch_5", "ses_5", "biz_1", 3))
	next(t, byBusiness)
	h.Publish(l.set("vch_6", "ses_5", "biz_1", 4))
	next(t, byBusiness)

	// During a gap vch_2 (session ses_9) and vch_3 (business biz_1)
	// changed unseen, and vch_6 moved on to version 5; vch_4 belongs to
	// nobody followed. vch_1 and vch_5 are as this hub last sent them.
	l.changed = []VoucherChange{
		l.set("vch_2", "ses_9", "", 2),
		l.set("vch_3", "ses_5", "biz_1", 7),
		l.set("vch_4", "ses_6", "", 1),
		l.set("vch_5", "ses_5", "biz_1", 3),
		l.set("vch_6", "ses_5", "biz_1", 5),
	}
	if err := h.Resync(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, bySession); ev.Voucher.ID != "vch_2" || !ev.Resync {
		t.Fatalf("session resync: %s", ev.Voucher.ID)
	}
	got := map[string]int{}
	for range 2 {
		ev := next(t, byBusiness)
		got[ev.Voucher.ID] = ev.Voucher.Version
	}
	if got["vch_3"] != 7 || got["vch_6"] != 5 {
		t.Fatalf("business resync: %v, want vch_3 v7 and vch_6 v5", got)
	}
	// What the hub had sent already is not sent again: not the followed
	// voucher that did not change, not the business voucher it had.
	nothing(t, byID)
	nothing(t, byBusiness)
	l.mu.Lock()
	loadedVch4 := l.loadedID["vch_4"]
	l.mu.Unlock()
	if loadedVch4 != 0 {
		t.Fatal("resync loaded a voucher nobody follows")
	}

	// A version the memo forgot is sent again, marked as a resync.
	h2 := newHub(t, l, Options{})
	again := h2.Subscribe(ByVoucher, "vch_1")
	defer again.Close()
	if err := h2.Resync(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, again); ev.Voucher.ID != "vch_1" || ev.Voucher.Version != 1 || !ev.Resync {
		t.Fatalf("forgotten version: %s v%d resync=%v", ev.Voucher.ID, ev.Voucher.Version, ev.Resync)
	}
}

// A catch-up after a peer's LISTEN sends what changed and was not sent
// here, loading only that: not what this hub already dispatched at that
// version, not a voucher followed by id that did not change (which
// Resync reloads), and it is no resync. A hub with no subscription does
// not even ask what changed.
func TestCatchUp(t *testing.T) {
	l := newFakeLoader()
	idle := newHub(t, l, Options{})
	l.changed = []VoucherChange{l.set("vch_9", "ses_9", "", 2)}
	if err := idle.CatchUp(context.Background(), time.Now()); err != nil || l.asked.Load() != 0 {
		t.Fatalf("a hub with no subscription asked what changed (%d, %v)", l.asked.Load(), err)
	}

	h := newHub(t, l, Options{})
	byID := h.Subscribe(ByVoucher, "vch_1")
	bySession := h.Subscribe(BySession, "ses_9")
	byBusiness := h.Subscribe(ByBusiness, "biz_1")
	defer byID.Close()
	defer bySession.Close()
	defer byBusiness.Close()
	h.Publish(l.set("vch_1", "ses_1", "", 1))
	next(t, byID)
	h.Publish(l.set("vch_5", "ses_5", "biz_1", 3))
	next(t, byBusiness)

	// The peer's unheard changes: vch_2 (session ses_9) and vch_3
	// (business biz_1); vch_4 belongs to nobody followed; vch_5 is as
	// this hub last sent it.
	l.changed = []VoucherChange{
		l.set("vch_2", "ses_9", "", 2),
		l.set("vch_3", "ses_5", "biz_1", 7),
		l.set("vch_4", "ses_6", "", 1),
		l.set("vch_5", "ses_5", "biz_1", 3),
	}
	if err := h.CatchUp(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, bySession); ev.Voucher.ID != "vch_2" || ev.Voucher.Version != 2 || ev.Resync {
		t.Fatalf("session catch-up: %s v%d resync=%v", ev.Voucher.ID, ev.Voucher.Version, ev.Resync)
	}
	if ev := next(t, byBusiness); ev.Voucher.ID != "vch_3" || ev.Voucher.Version != 7 || ev.Resync {
		t.Fatalf("business catch-up: %s v%d resync=%v", ev.Voucher.ID, ev.Voucher.Version, ev.Resync)
	}
	nothing(t, byID)
	nothing(t, byBusiness)
	l.mu.Lock()
	loaded := map[string]int{"vch_1": l.loadedID["vch_1"], "vch_4": l.loadedID["vch_4"], "vch_5": l.loadedID["vch_5"]}
	l.mu.Unlock()
	if loaded["vch_1"] != 1 || loaded["vch_4"] != 0 || loaded["vch_5"] != 1 {
		t.Fatalf("loads per voucher %v; want vch_1 and vch_5 once each (when published), vch_4 never", loaded)
	}
}

// A replica that goes silent makes the others resync a minute of changes;
// a business subscriber that had them all must not be flooded with
// repeats (past MaxPending, which would end it with ErrSlow).
func TestResyncOfDeliveredChangesKeepsBusinessSubscribers(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{MaxPending: 8})
	sub := h.Subscribe(ByBusiness, "biz_1")
	defer sub.Close()
	var changed []VoucherChange
	for i := range 50 {
		c := l.set(fmt.Sprintf("vch_%02d", i), "ses_1", "biz_1", 2)
		h.Publish(c)
		next(t, sub)
		changed = append(changed, c)
	}
	l.changed = changed
	if err := h.Resync(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	nothing(t, sub)
	if st := h.Stats(); st.Dropped != 0 {
		t.Fatalf("subscribers dropped by a resync of delivered changes: %d", st.Dropped)
	}
}

func TestNoGoroutinePerSubscription(t *testing.T) {
	l := newFakeLoader()
	before := runtime.NumGoroutine()
	h := NewHub(l, Options{Shards: 2})
	subs := make([]*Subscription, 1000)
	for i := range subs {
		subs[i] = h.Subscribe(BySession, "ses_"+string(rune('a'+i%26)))
	}
	if n := runtime.NumGoroutine() - before; n > 2 {
		t.Fatalf("hub with 1000 subscriptions runs %d goroutines, want the 2 shards", n)
	}
	for _, s := range subs {
		s.Close()
	}
	h.Close()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("goroutines after Close: %d, before: %d", n, before)
	}
}

// BenchmarkIdleSubscription reports the hub's own memory per idle
// subscription (the websocket and gqlgen's per-subscription goroutine come
// on top; see graph's BenchmarkIdleSubscriptions).
func BenchmarkIdleSubscription(b *testing.B) {
	h := NewHub(newFakeLoader(), Options{})
	defer h.Close()
	const n = 20_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "vch_" + time.Now().Add(time.Duration(i)).Format("150405.000000000")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		subs := make([]*Subscription, n)
		for j := range subs {
			subs[j] = h.Subscribe(ByVoucher, keys[j])
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/n, "B/subscription")
		for _, s := range subs {
			s.Close()
		}
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A change that carries its state, with few subscribers, is reported to
// them by the publishing goroutine itself (now true), before Publish
// returns and with none of the hub's locks held: the callback can publish
// again (a nested Publish on the same shard still goes inline) and read
// its mailbox. A change without its state goes through the shard's worker
// (now false), and so does the end of the subscription.
func TestNotifyNowFromThePublisher(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{Shards: 1})
	a := h.Subscribe(ByVoucher, "vch_a")
	b := h.Subscribe(ByVoucher, "vch_b")
	type call struct {
		now     bool
		version int
	}
	var calls []call // appended to by the callbacks, read after Publish
	var mu sync.Mutex
	woken := make(chan call, 8)
	record := func(s *Subscription) func(bool) {
		return func(now bool) {
			ev, err := s.TryNext()
			c := call{now: now}
			if err == nil && ev != nil {
				c.version = ev.Voucher.Version
			}
			mu.Lock()
			calls = append(calls, c)
			mu.Unlock()
			woken <- c
		}
	}
	a.Notify(func(now bool) {
		record(a)(now)
		if now {
			// The shard's lock is free: b's change goes inline too.
			h.Publish(l.set("vch_b", "ses_1", "", 7).WithState(l.rows["vch_b"]))
		}
	})
	b.Notify(record(b))
	l.set("vch_a", "ses_1", "", 3)
	h.Publish(ChangeOf(l.rows["vch_a"]).WithState(l.rows["vch_a"]))
	mu.Lock()
	got := append([]call(nil), calls...)
	mu.Unlock()
	if len(got) != 2 || got[0] != (call{true, 3}) || got[1] != (call{true, 7}) {
		t.Fatalf("calls during Publish = %+v, want a's version 3 then b's version 7, both now", got)
	}
	<-woken
	<-woken
	// Without its state the change is loaded by the worker: now is false.
	h.Publish(l.set("vch_a", "ses_1", "", 4))
	select {
	case c := <-woken:
		if c != (call{false, 4}) {
			t.Fatalf("worker's call = %+v, want version 4, not now", c)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("not notified by the worker")
	}
	a.Close()
	select {
	case c := <-woken:
		if c.now {
			t.Fatal("the end of a subscription reported as now")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("not notified of the end")
	}
}

// A subscriber without a goroutine: the hub calls it back, it reads what
// is queued with TryNext.
func TestNotifyAndTryNext(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	s := h.Subscribe(ByVoucher, "vch_1")
	woken := make(chan struct{}, 8)
	s.Notify(func(bool) { woken <- struct{}{} })
	if ev, err := s.TryNext(); ev != nil || err != nil || s.Pending() {
		t.Fatalf("empty mailbox: %v %v", ev, err)
	}
	h.Publish(l.set("vch_1", "ses_1", "", 1))
	select {
	case <-woken:
	case <-time.After(2 * time.Second):
		t.Fatal("not notified of an event")
	}
	if !s.Pending() {
		t.Fatal("event not pending")
	}
	if ev, err := s.TryNext(); err != nil || ev == nil || ev.Voucher.Version != 1 {
		t.Fatalf("TryNext = %v %v", ev, err)
	}
	s.Close()
	select {
	case <-woken:
	case <-time.After(2 * time.Second):
		t.Fatal("not notified of the end")
	}
	if _, err := s.TryNext(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A change that carries its state is dispatched without a load: a row from
// a notification (with the read model applied), or a voucher handed over
// in process. A row that does not decode is loaded instead; an echo of a
// version already dispatched is dropped before any decoding.
func TestChangesCarryingStateNeedNoLoad(t *testing.T) {
	l := newFakeLoader()
	var prepared atomic.Int64
	h := newHub(t, l, Options{Prepare: func(v *ent.Voucher) {
		prepared.Add(1)
		v.Code = "prepared"
	}})
	s := h.Subscribe(ByVoucher, "vch_1")
	defer s.Close()

	// In process: the very voucher, untouched by Prepare.
	own := &ent.Voucher{ID: "vch_1", SessionID: "ses_1", Version: 2, Code: "123456", ExpiresAt: time.Now().Add(time.Hour)}
	h.Publish(ChangeOf(own).WithState(own))
	if ev := next(t, s); ev.Voucher != own {
		t.Fatalf("in-process change: got %+v", ev.Voucher)
	}

	// From a notification: the row, decoded and prepared.
	row := []byte(`{"id":"vch_1","version":3,"status":"REDEEMED","code":"123456","session_id":"ses_1","payer_id":"dev_p",` +
		`"payee_id":"ses_x","business_id":null,"payee_info":null,"created_at":"2026-11-21T20:59:15.500218+01:00",` +
		`"expected_payment":{"id": "pmt_1", "amount": "12.5", "network": "ethereum", "currency": "USDC"}}`)
	h.Publish(VoucherChange{ID: "vch_1", Version: 3, SessionID: "ses_1", Row: row})
	ev := next(t, s)
	v := ev.Voucher
	if v.Version != 3 || v.Status != "REDEEMED" || v.Code != "prepared" || v.ExpectedPayment == nil ||
		v.ExpectedPayment.Amount != "12.5" || v.PayeeInfo != nil || v.CreatedAt.Location() != time.UTC || v.CreatedAt.Hour() != 19 {
		t.Fatalf("decoded row: %+v", v)
	}
	// The same version again (this replica's own change coming back
	// through LISTEN, say) is dropped, even with an undecodable row.
	h.Publish(VoucherChange{ID: "vch_1", Version: 3, SessionID: "ses_1", Row: []byte(`{"id":`)})
	nothing(t, s)
	if n := l.loads.Load(); n != 0 || prepared.Load() != 1 {
		t.Fatalf("loads %d, prepared %d; want 0 and 1", n, prepared.Load())
	}

	// A newer version whose row does not decode is loaded.
	c := l.set("vch_1", "ses_1", "", 4)
	c.Row = []byte(`{"id": 7}`)
	h.Publish(c)
	if ev := next(t, s); ev.Voucher.Version != 4 || l.loads.Load() != 1 {
		t.Fatalf("fallback: version %d after %d loads", ev.Voucher.Version, l.loads.Load())
	}
}

// When a batch mixes changes that carry their state with changes that must
// be loaded and the load fails, the first are delivered at once and only
// the others are retried.
func TestFailedLoadRetriesOnlyWhatNeedsLoading(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{Shards: 1})
	s := h.Subscribe(BySession, "ses_1")
	defer s.Close()
	l.failNext.Store(1)
	withState := &ent.Voucher{ID: "vch_a", SessionID: "ses_1", Version: 5}
	h.Publish(l.set("vch_b", "ses_1", "", 2))
	h.Publish(ChangeOf(withState).WithState(withState))
	got := map[string]int{}
	for len(got) < 2 {
		ev := next(t, s)
		got[ev.Voucher.ID]++
	}
	if got["vch_a"] != 1 || got["vch_b"] != 1 {
		t.Fatalf("deliveries %v", got)
	}
	nothing(t, s)
	if n := l.loadedID["vch_a"]; n != 0 {
		t.Fatalf("the change carrying its state was loaded %d times", n)
	}
}

// A change that carries its state (this replica's, or a notified row),
// with few subscribers, is in their mailboxes when Publish returns (the
// publisher handed it over itself, no worker in between); one followed by
// more than inlineMax goes through the shard's worker and still reaches
// every one of them, once.
func TestInProcessChangeIsHandedOverByThePublisher(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{Shards: 1})
	s := h.Subscribe(ByVoucher, "vch_1")
	defer s.Close()
	own := &ent.Voucher{ID: "vch_1", SessionID: "ses_1", Version: 2}
	h.Publish(ChangeOf(own).WithState(own))
	ev, err := s.TryNext()
	if err != nil || ev == nil || ev.Voucher != own {
		t.Fatalf("right after Publish: %v %v", ev, err)
	}
	// The same version again (its echo through LISTEN) is not sent.
	h.Publish(ChangeOf(own).WithState(own))
	nothing(t, s)
	// Another replica's change read from a notification, with its row: the
	// listener hands it over the same way.
	h.Publish(VoucherChange{ID: "vch_1", Version: 3, SessionID: "ses_1", Row: []byte(`{"id":"vch_1","version":3,"session_id":"ses_1"}`)})
	if ev, err := s.TryNext(); err != nil || ev == nil || ev.Voucher.Version != 3 {
		t.Fatalf("right after publishing a notified row: %v %v", ev, err)
	}

	var many []*Subscription
	for range inlineMax + 1 {
		many = append(many, h.Subscribe(BySession, "ses_2"))
	}
	big := &ent.Voucher{ID: "vch_2", SessionID: "ses_2", Version: 7}
	h.Publish(ChangeOf(big).WithState(big))
	for _, m := range many {
		if ev := next(t, m); ev.Voucher != big {
			t.Fatalf("fan-out: got %+v", ev.Voucher)
		}
		nothing(t, m)
		m.Close()
	}
	if n := l.loads.Load(); n != 0 {
		t.Fatalf("%d loads for changes that carried their state", n)
	}
}

// A notification heard from another replica (PublishNotification) is
// dispatched from its row when someone here follows it, dropped when nobody
// does or when its version was already dispatched, and refused when it is
// not a change.
func TestPublishNotification(t *testing.T) {
	l := newFakeLoader()
	h := newHub(t, l, Options{})
	s := h.Subscribe(ByVoucher, "vch_1")
	defer s.Close()
	payload := func(id string, version int) string {
		row := fmt.Sprintf(`{"id":%q,"version":%d,"status":"REDEEMED","session_id":"ses_1","payer_id":"dev_p","payee_id":"ses_x"}`, id, version)
		p, err := EncodeNotification(VoucherChange{ID: id, Version: version, SessionID: "ses_1", PayerID: "dev_p", PayeeID: "ses_x"}, []byte(row))
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	if err := h.PublishNotification(payload("vch_1", 2)); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, s); ev.Voucher.Version != 2 || ev.Voucher.Status != "REDEEMED" {
		t.Fatalf("got %+v", ev.Voucher)
	}
	// The same version again (this replica's own change coming back), and
	// a voucher nobody here follows: nothing, and nothing loaded.
	for _, p := range []string{payload("vch_1", 2), payload("vch_9", 5)} {
		if err := h.PublishNotification(p); err != nil {
			t.Fatal(err)
		}
	}
	nothing(t, s)
	// PostgreSQL's spacing, keys only: loaded.
	l.set("vch_1", "ses_1", "", 3)
	if err := h.PublishNotification(`{"id" : "vch_1", "version" : 3, "sessionId" : "ses_1", "businessId" : null}`); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, s); ev.Voucher.Version != 3 || l.loads.Load() != 1 {
		t.Fatalf("keys only: version %d after %d loads", ev.Voucher.Version, l.loads.Load())
	}
	for _, bad := range []string{"not json", `{"version":4}`, ""} {
		if err := h.PublishNotification(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// BenchmarkHeardNotification is what a replica spends on a notification
// it hears: for a voucher nobody there follows (most of them), and for its
// own change coming back (a version already dispatched).
//
//	go test ./internal/pubsub -run '^$' -bench HeardNotification -benchmem
func BenchmarkHeardNotification(b *testing.B) {
	row := []byte(`{"id":"vch_01JDQ4Z8K2M3N4P5Q6R7S8T9V0","version":3,"status":"NEGOTIATED","code":"123456","session_id":"ses_01JDQ4Z8K2M3N4P5Q6R7S8T9V0",` +
		`"payer_id":"dev_01JDQ4Z8K2M3N4P5Q6R7S8T9V0","payee_id":"ses_01JDQ4Z8K2M3N4P5Q6R7S8T9V0","business_id":null,"payee_info":null,` +
		`"created_at":"2026-11-21T20:59:15.500218+01:00","updated_at":"2026-11-21T20:59:16.500218+01:00","expires_at":"2026-11-21T21:59:15.500218+01:00",` +
		`"expected_payment":{"id":"pmt_1","amount":"12.5","network":"ethereum","currency":"USDC","currency_address":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"}}`)
	c := VoucherChange{ID: "vch_01JDQ4Z8K2M3N4P5Q6R7S8T9V0", Version: 3, SessionID: "ses_01JDQ4Z8K2M3N4P5Q6R7S8T9V0",
		PayerID: "dev_01JDQ4Z8K2M3N4P5Q6R7S8T9V0", PayeeID: "ses_01JDQ4Z8K2M3N4P5Q6R7S8T9V0"}
	p, err := EncodeNotification(c, row)
	if err != nil {
		b.Fatal(err)
	}
	payload := string(p)
	for _, followed := range []bool{false, true} {
		name := "unfollowed"
		if followed {
			name = "own-echo"
		}
		b.Run(name, func(b *testing.B) {
			h := NewHub(newFakeLoader(), Options{Log: discardLog()})
			defer h.Close()
			if followed {
				s := h.Subscribe(ByVoucher, c.ID)
				defer s.Close()
				v, err := DecodeRow(row)
				if err != nil {
					b.Fatal(err)
				}
				h.Publish(c.WithState(v))
				if _, err := s.TryNext(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for range b.N {
				if err := h.PublishNotification(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A heard notification is handed to its subscriber by the goroutine that
// read it, during the call: alone, to write there (now true); with more
// waiting behind it (PublishNotificationBehind), to write from the
// transport's own workers (now false), its event queued all the same.
func TestHeardNotificationBehindIsWrittenByTheTransport(t *testing.T) {
	h := newHub(t, newFakeLoader(), Options{Shards: 1})
	type call struct {
		now     bool
		version int
	}
	var got []call // appended during the calls, on this goroutine
	var ended atomic.Bool
	s := h.Subscribe(ByVoucher, "vch_a")
	s.Notify(func(now bool) {
		if ended.Load() {
			return // the hub's end, at the test's cleanup
		}
		ev, err := s.TryNext()
		if err != nil || ev == nil {
			t.Errorf("notified (now %v) with nothing queued: %v", now, err)
			return
		}
		got = append(got, call{now, ev.Voucher.Version})
	})
	payload := func(version int) string {
		v := &ent.Voucher{ID: "vch_a", Version: version, Status: voucher.StatusREDEEMED, SessionID: "ses_1"}
		row, err := jsonx.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p, err := EncodeNotification(ChangeOf(v), row)
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	if err := h.PublishNotification(payload(2)); err != nil {
		t.Fatal(err)
	}
	if err := h.PublishNotificationBehind(payload(3)); err != nil {
		t.Fatal(err)
	}
	if err := h.PublishNotification(payload(4)); err != nil {
		t.Fatal(err)
	}
	ended.Store(true)
	want := []call{{true, 2}, {false, 3}, {true, 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("calls %+v, want %+v", got, want)
	}
}
