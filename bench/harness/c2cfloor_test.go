package harness

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// The commit→subscriber floor waits for a service notification carrying a
// row, copies that payload, then commits transactions that notify it and
// pairs every commit with its notification; afterwards its table is gone.
func TestC2CFloorCopiesTheServicePayloadAndPairsEveryCommit(t *testing.T) {
	c := testpg.StartT(t)
	if c == nil {
		return
	}
	ctx := context.Background()
	dsn := c.DSN("postgres")
	f, err := newC2CFloor(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			f.close()
		}
	}()
	if f.captured() {
		t.Fatal("captured a payload before the service sent one")
	}
	svc, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	// The replica says it is alive, as every replica does each second, and
	// the floor listens on its change channel.
	if _, err := svc.ExecContext(ctx, `SELECT pg_notify($1, $2)`, pubsub.ReplicaChannel, `{"replica":"rpl_svc","state":"alive"}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.lmu.Lock()
		n := len(f.listened)
		f.lmu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the floor did not listen on the replica's change channel")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Keys alone (no row) are not what the floor copies; keys and a row are.
	row := `{"id":"vch_1","version":2}` + "\n" + `{"id":"vch_1","status":"REDEEMED","padding":"` + strings.Repeat("x", 900) + `"}`
	for _, payload := range []string{`{"id":"vch_1","version":1}`, row} {
		if _, err := svc.ExecContext(ctx, `SELECT pg_notify($1, $2)`, pubsub.ChangeChannel("rpl_svc"), payload); err != nil {
			t.Fatal(err)
		}
	}
	for !f.captured() {
		if time.Now().After(deadline) {
			t.Fatal("the service's notification was not captured")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f.payload != row {
		t.Fatalf("captured %.80q, want the notification carrying the row", f.payload)
	}
	if !f.unlistened || len(f.listened) != 0 {
		t.Fatalf("after the capture the floor still listens to the service (%v)", f.listened)
	}
	sent, errs := f.run(ctx, 200, time.Second, 0)
	if s := errs.Summary(time.Second); s.Errors != 0 || sent != 200 {
		t.Fatalf("sent %d (want 200), errors %d %v", sent, s.Errors, s.ErrorMsg)
	}
	var lats, fromSent []time.Duration
	var missing int64
	for time.Now().Before(deadline) {
		if lats, fromSent, missing = f.latencies(); missing == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(lats) != 200 || len(fromSent) != 200 || missing != 0 {
		t.Fatalf("%d (%d) paired, %d missing; want 200 and 0", len(lats), len(fromSent), missing)
	}
	for i, d := range lats {
		if d < 0 || fromSent[i] < 0 {
			t.Fatalf("negative latency %v / %v", d, fromSent[i])
		}
	}
	var n int64
	if err := svc.QueryRowContext(ctx, `SELECT sum(n) FROM voucherbench_c2c_floor`).Scan(&n); err != nil || n != 200 {
		t.Fatalf("rows written: %d %v, want 200 (one per committed transaction)", n, err)
	}
	f.close()
	closed = true
	var exists bool
	if err := svc.QueryRowContext(ctx, `SELECT to_regclass('voucherbench_c2c_floor') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("the floor's table is left behind: %v %v", exists, err)
	}
}
