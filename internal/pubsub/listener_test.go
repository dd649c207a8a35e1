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

// change writes a new version of v and notifies, in one transaction, the
// way the voucher service does.
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
		_, err = tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", pubsub.Channel, string(b))
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

// A change committed on PostgreSQL reaches the hub through LISTEN/NOTIFY,
// and after the LISTEN connection is cut, the change made during the gap
// (whose NOTIFY is lost) arrives anyway, as a resync.
func TestListenerDeliversAndResyncsAfterReconnect(t *testing.T) {
	ctx := context.Background()
	db, url := testdb.OpenURL(t, storage.Postgres)
	hub := pubsub.NewHub(pubsub.EntLoader{Client: db.Client}, pubsub.Options{})
	defer hub.Close()
	// A slow first reconnect leaves a window in which NOTIFYs are lost.
	l, err := pubsub.Listen(ctx, url, hub, pubsub.ListenerOptions{MinReconnect: 700 * time.Millisecond, MaxReconnect: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	v := seed(t, db)
	sub := hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	bySession := hub.Subscribe(pubsub.BySession, v.SessionID)
	defer bySession.Close()

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
	v = change(t, db, v)
	if ev := waitEvent(t, sub, 2*time.Second); ev.Voucher.Version != v.Version {
		t.Fatalf("after resync: v%d, want v%d", ev.Voucher.Version, v.Version)
	}
	ctx2, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ev, err := sub.Next(ctx2); err == nil {
		t.Fatalf("duplicate event v%d", ev.Voucher.Version)
	}
}
