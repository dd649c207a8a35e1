package pubsub_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// countingLoader is EntLoader that counts the vouchers it loads and
// remembers from when it was asked what changed.
type countingLoader struct {
	pubsub.EntLoader
	loaded atomic.Int64
	mu     sync.Mutex
	since  []time.Time
}

func (l *countingLoader) Load(ctx context.Context, ids []string) ([]*ent.Voucher, error) {
	l.loaded.Add(int64(len(ids)))
	return l.EntLoader.Load(ctx, ids)
}

func (l *countingLoader) ChangedSince(ctx context.Context, t time.Time) ([]pubsub.VoucherChange, error) {
	l.mu.Lock()
	l.since = append(l.since, t)
	l.mu.Unlock()
	return l.EntLoader.ChangedSince(ctx, t)
}

// asked is every since ChangedSince was called with so far.
func (l *countingLoader) asked() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.since...)
}

// replica is one process's pubsub on a shared PostgreSQL database: its
// hub, its notifier and its listener, wired as the app wires them.
type replica struct {
	loader *countingLoader
	hub    *pubsub.Hub
	n      *pubsub.Notifier
	l      *pubsub.Listener
}

// shared is a PostgreSQL database the replicas of a test share.
type shared struct {
	url string
	db  *storage.DB
}

func newShared(t *testing.T) *shared {
	t.Helper()
	db, url := testdb.OpenURL(t, storage.Postgres)
	return &shared{url: url, db: db}
}

// hub starts a replica's hub alone (subscriptions can be made before its
// notifier and listener start).
func (s *shared) hub(t *testing.T) *replica {
	t.Helper()
	r := &replica{loader: &countingLoader{EntLoader: pubsub.EntLoader{Client: s.db.Client}}}
	r.hub = pubsub.NewHub(r.loader, pubsub.Options{})
	t.Cleanup(r.hub.Close)
	return r
}

// start starts r's notifier, then its listener.
func (s *shared) start(t *testing.T, r *replica, name string, lo pubsub.ListenerOptions, no pubsub.NotifierOptions) *replica {
	t.Helper()
	ctx := context.Background()
	no.Replica = name
	var err error
	if r.n, err = pubsub.NewNotifier(ctx, s.url, no); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.n.Close(ctx) })
	lo.Replica, lo.Peers = name, r.n
	if r.l, err = pubsub.Listen(ctx, s.url, r.hub, lo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.l.Close() })
	return r
}

func (s *shared) replica(t *testing.T, name string, lo pubsub.ListenerOptions, no pubsub.NotifierOptions) *replica {
	t.Helper()
	return s.start(t, s.hub(t), name, lo, no)
}

// pair starts replicas A and B and waits until each has heard the other.
func (s *shared) pair(t *testing.T, lo pubsub.ListenerOptions, no pubsub.NotifierOptions) (a, b *replica) {
	t.Helper()
	if no.Heartbeat == 0 {
		no.Heartbeat = 50 * time.Millisecond
	}
	a = s.replica(t, "rpl_a", lo, no)
	b = s.replica(t, "rpl_b", lo, no)
	time.Sleep(4 * no.Heartbeat)
	return a, b
}

// commit writes a new version of v without notifying anyone: what a
// replica's transition does before its notifier runs.
func commit(t *testing.T, db *storage.DB, v *ent.Voucher) *ent.Voucher {
	t.Helper()
	out, err := db.Voucher.UpdateOneID(v.ID).AddVersion(1).SetStatus(voucher.StatusREDEEMED).SetUpdatedAt(time.Now().UTC()).Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func quiet(t *testing.T, s *pubsub.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if ev, err := s.Next(ctx); err == nil {
		t.Fatalf("unexpected event v%d resync=%v", ev.Voucher.Version, ev.Resync)
	}
}

// Changes published after commit reach the other replica's subscribers
// with their state (nothing is loaded), in batches however fast they come,
// and signals reach their channel.
func TestNotifierReachesOtherReplicas(t *testing.T) {
	s := newShared(t)
	a, r := s.pair(t, pubsub.ListenerOptions{}, pubsub.NotifierOptions{})

	v := seed(t, s.db)
	one := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer one.Close()
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	ev := waitEvent(t, one, 2*time.Second)
	if ev.Voucher.Version != v.Version || ev.Voucher.Status != voucher.StatusREDEEMED || ev.Resync {
		t.Fatalf("event v%d %s resync=%v", ev.Voucher.Version, ev.Voucher.Status, ev.Resync)
	}
	if !ev.Voucher.UpdatedAt.Equal(v.UpdatedAt) || ev.Voucher.SessionID != v.SessionID {
		t.Fatalf("carried state %+v, committed %+v", ev.Voucher, v)
	}

	// 60 vouchers of one session changed back to back (within the
	// subscriber's 64 pending).
	bySession := r.hub.Subscribe(pubsub.BySession, v.SessionID)
	defer bySession.Close()
	const many = 60
	ctx := context.Background()
	for i := range many {
		w, err := s.db.Voucher.Create().SetCode(fmt.Sprintf("9%05d", i)).SetSessionID(v.SessionID).
			SetPayerID(v.PayerID).SetPayeeID(v.PayeeID).SetExpiresAt(v.ExpiresAt).Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.n.Publish(pubsub.ChangeOf(w).WithState(w))
	}
	seen := map[string]bool{}
	for len(seen) < many {
		ev := waitEvent(t, bySession, 5*time.Second)
		seen[ev.Voucher.ID] = true
	}
	if n := r.loader.loaded.Load(); n != 0 {
		t.Fatalf("%d vouchers loaded; every change carried its row", n)
	}

	wake := pq.NewListener(s.url, 10*time.Millisecond, time.Second, nil)
	defer wake.Close()
	if err := wake.Listen("test_wake"); err != nil {
		t.Fatal(err)
	}
	a.n.Signal("test_wake")
	select {
	case n := <-wake.Notify:
		if n == nil || n.Channel != "test_wake" || n.Extra != "" {
			t.Fatalf("signal %+v", n)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no signal")
	}
	// Notifications go out in the order they were published, batches or
	// not: 200 versions of one voucher as fast as they come.
	order := pq.NewListener(s.url, 10*time.Millisecond, time.Second, nil)
	defer order.Close()
	if err := order.Listen(a.n.ChangeChannel()); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		a.n.Publish(pubsub.VoucherChange{ID: "vch_order", Version: i + 1, SessionID: "ses_order"})
	}
	for want := 1; want <= 200; {
		select {
		case n := <-order.Notify:
			c, err := pubsub.ParseNotification(n.Extra)
			if err != nil || c.ID != "vch_order" {
				continue
			}
			if c.Version != want {
				t.Fatalf("version %d arrived when %d was due", c.Version, want)
			}
			want++
		case <-time.After(3 * time.Second):
			t.Fatalf("version %d never arrived", want)
		}
	}

	for _, x := range []*replica{a, r} {
		if n := x.l.Resyncs(); n != 0 {
			t.Fatalf("%d resyncs with every replica alive", n)
		}
	}
}

// A replica that dies between committing and notifying: the other replica
// stops hearing its heartbeats and resyncs what changed since, so the
// subscriber gets the change anyway. Heartbeats keep a busy replica alive.
func TestSilentReplicaIsResynced(t *testing.T) {
	s := newShared(t)
	// Heartbeats every 50 ms (pair's default) against a 2 s timeout: a
	// heartbeat held up by a loaded machine (a slow WAL flush, a starved
	// process; 400 ms was seen at load average 20) must not read as a dead
	// replica, which is what the busy phase checks.
	a, r := s.pair(t, pubsub.ListenerOptions{PeerTimeout: 2 * time.Second}, pubsub.NotifierOptions{})
	v := seed(t, s.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()

	// Busy for a second: notifications all the time, heartbeats between.
	for range 100 {
		v = commit(t, s.db, v)
		a.n.Publish(pubsub.ChangeOf(v).WithState(v))
		time.Sleep(10 * time.Millisecond)
	}
	for {
		ev := waitEvent(t, sub, 2*time.Second)
		if ev.Resync {
			t.Fatal("resync while the replica was alive")
		}
		if ev.Voucher.Version == v.Version {
			break
		}
	}
	if n := r.l.Resyncs(); n != 0 {
		t.Fatalf("%d resyncs while the replica was alive", n)
	}

	v = commit(t, s.db, v) // committed, never notified
	a.l.Close()
	a.n.Kill()
	ev := waitEvent(t, sub, 15*time.Second)
	if ev.Voucher.Version != v.Version || !ev.Resync {
		t.Fatalf("after the replica died: v%d resync=%v, want v%d by resync", ev.Voucher.Version, ev.Resync, v.Version)
	}
	if n := r.l.Resyncs(); n != 1 {
		t.Fatalf("%d resyncs, want 1", n)
	}
	waitPeerChannels(t, r.l) // the silent replica's channel is UNLISTENed
}

// A replica that stops cleanly sends what it queued and says goodbye: no
// resync follows.
func TestGoodbyeNeedsNoResync(t *testing.T) {
	s := newShared(t)
	a, r := s.pair(t, pubsub.ListenerOptions{PeerTimeout: 300 * time.Millisecond}, pubsub.NotifierOptions{})
	v := seed(t, s.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	a.l.Close()
	if err := a.n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, sub, 2*time.Second); ev.Voucher.Version != v.Version || ev.Resync {
		t.Fatalf("v%d resync=%v", ev.Voucher.Version, ev.Resync)
	}
	quiet(t, sub, time.Second)
	if n := r.l.Resyncs(); n != 0 {
		t.Fatalf("%d resyncs after a clean goodbye", n)
	}
	waitPeerChannels(t, r.l) // the gone replica's channel is UNLISTENed
}

// A replica that had to drop notifications says from when; the others
// resync from there.
func TestGapMessageResyncs(t *testing.T) {
	s := newShared(t)
	r := s.replica(t, "rpl_b", pubsub.ListenerOptions{}, pubsub.NotifierOptions{})
	v := seed(t, s.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	v = commit(t, s.db, v)
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	if _, err := s.db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ReplicaChannel,
		`{"replica":"rpl_a","state":"gap","since":"`+since+`"}`); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, sub, 3*time.Second); ev.Voucher.Version != v.Version || !ev.Resync {
		t.Fatalf("v%d resync=%v", ev.Voucher.Version, ev.Resync)
	}
}

// A replica alone sends no notifications at all. When another replica
// joins, what the lone one changed after the newcomer started reaches the
// newcomer's subscribers anyway (a resync), and from then on changes are
// notified.
func TestLoneReplicaNotifiesNothingUntilAPeerJoins(t *testing.T) {
	s := newShared(t)
	heard := pq.NewListener(s.url, 10*time.Millisecond, time.Second, nil)
	defer heard.Close()
	if err := heard.Listen(pubsub.ChangeChannel("rpl_a")); err != nil {
		t.Fatal(err)
	}
	a := s.replica(t, "rpl_a", pubsub.ListenerOptions{}, pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond})
	v := seed(t, s.db)
	for range 3 {
		v = commit(t, s.db, v)
		a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	}
	select {
	case n := <-heard.Notify:
		t.Fatalf("a lone replica notified %+v", n)
	case <-time.After(300 * time.Millisecond):
	}

	// B's subscriber exists before anyone hears of B; A changes the
	// voucher just after B started (still alone, as far as A knows).
	b := s.hub(t)
	sub := b.hub.Subscribe(pubsub.BySession, v.SessionID)
	defer sub.Close()
	s.start(t, b, "rpl_b", pubsub.ListenerOptions{}, pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond})
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v)) // skipped or sent: B gets it either way
	for {
		ev := waitEvent(t, sub, 3*time.Second)
		if ev.Voucher.Version == v.Version {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // A has heard B by now
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	for {
		ev := waitEvent(t, sub, 2*time.Second)
		if ev.Voucher.Version == v.Version {
			if ev.Resync {
				t.Fatal("a change after the join came by resync, not notification")
			}
			break
		}
	}
}
