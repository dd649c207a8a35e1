package pubsub_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/testpg"
)

// countingLoader is EntLoader that counts the vouchers it loads.
type countingLoader struct {
	pubsub.EntLoader
	loaded atomic.Int64
}

func (l *countingLoader) Load(ctx context.Context, ids []string) ([]*ent.Voucher, error) {
	l.loaded.Add(int64(len(ids)))
	return l.EntLoader.Load(ctx, ids)
}

// replicas is one PostgreSQL database with a second replica's hub and
// listener on it ("B"), for a notifier playing the first replica ("A").
type replicas struct {
	url    string
	db     *storage.DB
	loader *countingLoader
	hub    *pubsub.Hub
	l      *pubsub.Listener
}

func newReplicas(t *testing.T, opts pubsub.ListenerOptions) *replicas {
	t.Helper()
	url := testpg.Database(t)
	ctx := context.Background()
	db, err := storage.Open(ctx, url, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r := &replicas{url: url, db: db, loader: &countingLoader{EntLoader: pubsub.EntLoader{Client: db.Client}}}
	r.hub = pubsub.NewHub(r.loader, pubsub.Options{})
	t.Cleanup(r.hub.Close)
	opts.Replica = "rpl_b"
	if r.l, err = pubsub.Listen(ctx, url, r.hub, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.l.Close() })
	return r
}

func (r *replicas) notifier(t *testing.T, opts pubsub.NotifierOptions) *pubsub.Notifier {
	t.Helper()
	n, err := pubsub.NewNotifier(context.Background(), r.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return n
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
	r := newReplicas(t, pubsub.ListenerOptions{})
	a := r.notifier(t, pubsub.NotifierOptions{Replica: "rpl_a"})
	defer a.Close(context.Background())

	v := seed(t, r.db)
	one := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer one.Close()
	v = commit(t, r.db, v)
	a.Publish(pubsub.ChangeOf(v).WithState(v))
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
		w, err := r.db.Voucher.Create().SetCode(fmt.Sprintf("9%05d", i)).SetSessionID(v.SessionID).
			SetPayerID(v.PayerID).SetPayeeID(v.PayeeID).SetExpiresAt(v.ExpiresAt).Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.Publish(pubsub.ChangeOf(w).WithState(w))
	}
	seen := map[string]bool{}
	for len(seen) < many {
		ev := waitEvent(t, bySession, 5*time.Second)
		seen[ev.Voucher.ID] = true
	}
	if n := r.loader.loaded.Load(); n != 0 {
		t.Fatalf("%d vouchers loaded; every change carried its row", n)
	}

	wake := pq.NewListener(r.url, 10*time.Millisecond, time.Second, nil)
	defer wake.Close()
	if err := wake.Listen("test_wake"); err != nil {
		t.Fatal(err)
	}
	a.Signal("test_wake")
	select {
	case n := <-wake.Notify:
		if n == nil || n.Channel != "test_wake" || n.Extra != "" {
			t.Fatalf("signal %+v", n)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no signal")
	}
	if n := r.l.Resyncs(); n != 0 {
		t.Fatalf("%d resyncs with every replica alive", n)
	}
}

// A replica that dies between committing and notifying: the other replica
// stops hearing its heartbeats and resyncs what changed since, so the
// subscriber gets the change anyway. Heartbeats keep a busy replica alive.
func TestSilentReplicaIsResynced(t *testing.T) {
	r := newReplicas(t, pubsub.ListenerOptions{PeerTimeout: 400 * time.Millisecond})
	a := r.notifier(t, pubsub.NotifierOptions{Replica: "rpl_a", Heartbeat: 50 * time.Millisecond})
	v := seed(t, r.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()

	// Busy for a second: notifications all the time, heartbeats between.
	for range 100 {
		v = commit(t, r.db, v)
		a.Publish(pubsub.ChangeOf(v).WithState(v))
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

	v = commit(t, r.db, v) // committed, never notified
	a.Kill()
	ev := waitEvent(t, sub, 3*time.Second)
	if ev.Voucher.Version != v.Version || !ev.Resync {
		t.Fatalf("after the replica died: v%d resync=%v, want v%d by resync", ev.Voucher.Version, ev.Resync, v.Version)
	}
	if n := r.l.Resyncs(); n != 1 {
		t.Fatalf("%d resyncs, want 1", n)
	}
}

// A replica that stops cleanly sends what it queued and says goodbye: no
// resync follows.
func TestGoodbyeNeedsNoResync(t *testing.T) {
	r := newReplicas(t, pubsub.ListenerOptions{PeerTimeout: 300 * time.Millisecond})
	a := r.notifier(t, pubsub.NotifierOptions{Replica: "rpl_a", Heartbeat: 50 * time.Millisecond})
	v := seed(t, r.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	time.Sleep(200 * time.Millisecond) // heard at least once
	v = commit(t, r.db, v)
	a.Publish(pubsub.ChangeOf(v).WithState(v))
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, sub, 2*time.Second); ev.Voucher.Version != v.Version || ev.Resync {
		t.Fatalf("v%d resync=%v", ev.Voucher.Version, ev.Resync)
	}
	quiet(t, sub, time.Second)
	if n := r.l.Resyncs(); n != 0 {
		t.Fatalf("%d resyncs after a clean goodbye", n)
	}
}

// A replica that had to drop notifications says from when; the others
// resync from there.
func TestGapMessageResyncs(t *testing.T) {
	r := newReplicas(t, pubsub.ListenerOptions{})
	v := seed(t, r.db)
	sub := r.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	v = commit(t, r.db, v)
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	if _, err := r.db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ReplicaChannel,
		`{"replica":"rpl_a","state":"gap","since":"`+since+`"}`); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, sub, 3*time.Second); ev.Voucher.Version != v.Version || !ev.Resync {
		t.Fatalf("v%d resync=%v", ev.Voucher.Version, ev.Resync)
	}
}
