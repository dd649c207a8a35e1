package pubsub_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// peer is the replica name change notifies for: announce makes a listener
// take it for a live replica.
const peer = "rpl_peer"

// announce says on ReplicaChannel that peer is alive, started at started.
func announce(t *testing.T, db *storage.DB, started time.Time) {
	t.Helper()
	if _, err := db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ReplicaChannel,
		`{"replica":"`+peer+`","state":"alive","channel":"`+pubsub.ChangeChannel(peer)+`","started":"`+started.UTC().Format(time.RFC3339Nano)+`"}`); err != nil {
		t.Fatal(err)
	}
}

// waitPeerChannels waits until l's LISTENs are in effect on exactly these
// replicas' change channels.
func waitPeerChannels(t *testing.T, l *pubsub.Listener, replicas ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, r := range replicas {
		want[pubsub.ChangeChannel(r)] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := l.PeerChannels()
		same := len(got) == len(want)
		for _, ch := range got {
			same = same && want[ch]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening on peers' channels %v, want those of %v", got, replicas)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// change writes a new version of v and notifies it on peer's change
// channel, in one transaction.
func change(t *testing.T, db *storage.DB, v *ent.Voucher) *ent.Voucher {
	t.Helper()
	ctx := context.Background()
	var out *ent.Voucher
	err := db.Tx(ctx, func(tx *ent.Tx) error {
		var err error
		out, err = tx.Voucher.UpdateOneID(v.ID).AddVersion(1).SetStatus(voucher.StatusREDEEMED).Save(ctx)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(pubsub.ChangeOf(out))
		_, err = tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", pubsub.ChangeChannel(peer), string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func seed(t *testing.T, db *storage.DB) *ent.Voucher {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	ses, err := db.VoucherSession.Create().SetCode("ABC123").SetOwnerID("dev_payer").SetExpiresAt(now.Add(time.Hour)).Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := db.Voucher.Create().SetCode("123456").SetSessionID(ses.ID).SetPayerID("dev_payer").SetPayeeID(ses.ID).SetExpiresAt(now.Add(time.Hour)).Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitEvent(t *testing.T, s *pubsub.Subscription, d time.Duration) *pubsub.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("no event within %v: %v", d, err)
	}
	return ev
}

// A change a peer committed on PostgreSQL reaches the hub through
// LISTEN/NOTIFY on the peer's change channel, and after the LISTEN
// connection is cut, the change made during the gap (whose NOTIFY is lost)
// arrives anyway, as a resync; the peer's channel is listened on again.
func TestListenerDeliversAndResyncsAfterReconnect(t *testing.T) {
	ctx := context.Background()
	db, url := testdb.OpenURL(t, storage.Postgres)
	hub := pubsub.NewHub(pubsub.EntLoader{Client: db.Client}, pubsub.Options{})
	defer hub.Close()
	// A slow first reconnect leaves a window in which NOTIFYs are lost;
	// the peer sends one "alive" only, and must not be taken for gone.
	l, err := pubsub.Listen(ctx, url, hub, pubsub.ListenerOptions{MinReconnect: 700 * time.Millisecond, MaxReconnect: time.Second, PeerTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	v := seed(t, db)
	sub := hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	bySession := hub.Subscribe(pubsub.BySession, v.SessionID)
	defer bySession.Close()

	// Heard, the peer is listened to, and the voucher created since the
	// listener started is caught up on (it could have been sent on the
	// peer's channel before that LISTEN).
	announce(t, db, time.Now())
	waitPeerChannels(t, l, peer)
	for _, s := range []*pubsub.Subscription{sub, bySession} {
		if ev := waitEvent(t, s, 5*time.Second); ev.Voucher.Version != v.Version || ev.Resync {
			t.Fatalf("catch-up event v%d resync=%v, want v%d", ev.Voucher.Version, ev.Resync, v.Version)
		}
	}

	v = change(t, db, v)
	for _, s := range []*pubsub.Subscription{sub, bySession} {
		ev := waitEvent(t, s, 2*time.Second)
		if ev.Voucher.Version != v.Version || ev.Voucher.Status != voucher.StatusREDEEMED || ev.Resync {
			t.Fatalf("event = v%d %s resync=%v", ev.Voucher.Version, ev.Voucher.Status, ev.Resync)
		}
	}

	// Cut the listener's connection and wait until its backend is gone.
	var killed bool
	if err := db.SQL.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()", pubsub.ApplicationName).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate listener backend: %v %v", killed, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		if err := db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()", pubsub.ApplicationName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("listener backend still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	v = change(t, db, v) // its NOTIFY has no listener
	for _, s := range []*pubsub.Subscription{sub, bySession} {
		ev := waitEvent(t, s, 10*time.Second)
		if ev.Voucher.Version != v.Version || !ev.Resync {
			t.Fatalf("after reconnect: v%d resync=%v, want v%d resync", ev.Voucher.Version, ev.Resync, v.Version)
		}
	}

	// Notifications flow again on the new connection. (The resync's own
	// reload may still be queued and pick the new version up first: either
	// way the subscriber sees it once.)
	heard := l.Changes()
	v = change(t, db, v)
	if ev := waitEvent(t, sub, 2*time.Second); ev.Voucher.Version != v.Version {
		t.Fatalf("after resync: v%d, want v%d", ev.Voucher.Version, v.Version)
	}
	ctx2, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ev, err := sub.Next(ctx2); err == nil {
		t.Fatalf("duplicate event v%d", ev.Voucher.Version)
	}
	// lib/pq LISTENed on the peer's channel again: its NOTIFY came in.
	for deadline := time.Now().Add(5 * time.Second); l.Changes() == heard; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the peer's change channel is not listened on after the reconnect")
		}
	}
	if got := l.PeerChannels(); len(got) != 1 || got[0] != pubsub.ChangeChannel(peer) {
		t.Fatalf("after reconnect listening on %v", got)
	}
	if n := l.CatchUps(); n != 1 {
		t.Fatalf("%d catch-ups, want 1 (the peer's join)", n)
	}
}
