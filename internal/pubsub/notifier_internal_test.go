package pubsub

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/testpg"
)

// A full queue drops its oldest notifications and remembers the oldest
// dropped change, from which the other replicas will be told to resync;
// a batch that failed goes back in front, within the same bound.
func TestNotifierQueueOverflowBecomesAGap(t *testing.T) {
	n := &Notifier{opts: NotifierOptions{MaxQueue: 2, MaxBatch: 512}, signals: map[string]bool{}, wake: make(chan struct{}, 1)}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	change := func(i int) VoucherChange {
		v := &ent.Voucher{ID: "vch_" + string(rune('a'+i)), Version: 1, UpdatedAt: t0.Add(time.Duration(i) * time.Second)}
		return ChangeOf(v).WithState(v)
	}
	for i := range 4 {
		n.Publish(change(i))
	}
	got, _, gap := n.take()
	if len(got) != 2 || got[0].ID != "vch_c" || got[1].ID != "vch_d" {
		t.Fatalf("kept %+v, want the newest two", got)
	}
	if !gap.Equal(t0) {
		t.Fatalf("gap since %v, want the oldest dropped change's time %v", gap, t0)
	}
	if _, _, again := n.take(); !again.IsZero() {
		t.Fatal("the gap is reported once")
	}

	n.Publish(change(5))
	n.putBack(got, []string{"wake"}, time.Time{}) // c, d back in front of f: one too many
	rest, signals, gap := n.take()
	if len(rest) != 2 || rest[0].ID != "vch_d" || rest[1].ID != "vch_f" || len(signals) != 1 {
		t.Fatalf("after put-back: %+v %v", rest, signals)
	}
	if !gap.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("put-back overflow gap %v", gap)
	}
}

// The notifier's session commits without waiting for a WAL flush, and
// shows itself in pg_stat_activity.
func TestNotifierSession(t *testing.T) {
	dsn, err := notifierURL(testpg.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sc, app string
	if err := db.QueryRowContext(context.Background(), "SELECT current_setting('synchronous_commit'), current_setting('application_name')").Scan(&sc, &app); err != nil {
		t.Fatal(err)
	}
	if sc != "off" || app != NotifierApplicationName {
		t.Fatalf("synchronous_commit=%s application_name=%s", sc, app)
	}
}
