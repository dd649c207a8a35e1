package harness

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// The HTTP floor's two replicas, driven by the same code that drives the
// service (c2cSide): every negotiation commits one version, its frame
// reaches the voucher's subscriber on the committing replica in process
// and on the other one through LISTEN, each answer carries its commit
// stamp, and every update pairs with its transition.
func TestC2CHTTPFloorDeliversEveryTransitionOnBothReplicas(t *testing.T) {
	c := testpg.StartT(t)
	if c == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := c.DSN("postgres")
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("vch_%04d", i)
	}
	// The floor runs whatever transition statement it is given (the
	// service's captured negotiate, in the bench) on the table named,
	// reading the version column from the row it returns.
	const table = "c2c_floor_test"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0, note text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+table+` (id) SELECT unnest($1::text[])`, pq.Array(ids)); err != nil {
		t.Fatal(err)
	}
	one := "1"
	update := floor.ReadQuery{SQL: `UPDATE ` + table + ` SET n = n + $2, note = 'x' WHERE id = $1 RETURNING note, n, id`, Params: []*string{nil, &one}, IDParam: 0, Prepared: true}
	// A frame as the service writes it, for another voucher and version.
	frame := `{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_tmpl","version":7,"status":"NEGOTIATED","updatedAt":"2026-11-27T10:00:00Z"}}}}`
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs := make([]string, 2)
	served := make(chan error, 2)
	for i, listen := range []bool{false, true} {
		if addrs[i], err = FreeAddr(); err != nil {
			t.Fatal(err)
		}
		cfg := floor.Config{Addr: addrs[i], DSN: dsn, MaxConns: 8, C2C: &floor.C2C{Channel: c2cHTTPFloorChannel, Table: table, Column: "n", Update: update, Listen: listen,
			Frame: frame, FrameID: "vch_tmpl", FrameVersion: 7}}
		go func() { served <- floor.Serve(ctx, cfg, log) }()
	}
	for _, a := range addrs {
		if !waitFor(ctx, 10*time.Second, func() bool {
			r, err := http.Get("http://" + a + "/count")
			if err == nil {
				r.Body.Close()
			}
			return err == nil
		}) {
			t.Fatalf("floor %s did not start", a)
		}
	}
	side, err := openC2CSide(ctx, addrs[0], addrs[1], "token", ids)
	if err != nil {
		t.Fatal(err)
	}
	defer side.close()
	if side.frameVer != 0 || !strings.Contains(string(side.frame), `"id":"`+side.frameID+`","version":0,"status":"NEGOTIATED"`) {
		t.Fatalf("first frame %s (%s %d): want the voucher's own id at version 0 in the service's frame", side.frame, side.frameID, side.frameVer)
	}
	// Before the bench gives it the service's payload the floor refuses.
	side.slice(ctx, 100, 100*time.Millisecond, true)
	if s := side.errs.Summary(time.Second); side.n == 0 || s.Errors != 0 {
		t.Fatalf("warm-up: %d sent, errors recorded %d (a warm slice records none)", side.n, s.Errors)
	}
	api := NewAPI("http://"+addrs[0], 1)
	defer api.CloseIdle()
	if _, err := api.Raw(ctx, http.MethodPost, "/c2c/payload", "", []byte(`{"id":"vch_1"}`+"\n"+`{"row":1}`)); err != nil {
		t.Fatal(err)
	}
	side.slice(ctx, 200, time.Second, false)
	if !waitFor(ctx, 10*time.Second, side.allRead) {
		t.Fatal("not every update arrived")
	}
	sp := side.spans()
	for path := range 2 {
		if len(sp.c2c[path]) != 100 || sp.missing[path] != 0 || sp.unstamped[path] != 0 {
			t.Fatalf("path %d: %d delivered, %d missing, %d without a commit stamp; want 100, 0, 0", path, len(sp.c2c[path]), sp.missing[path], sp.unstamped[path])
		}
		for i, d := range sp.w2c[path] {
			if d < sp.c2c[path][i] {
				t.Fatalf("path %d: write→subscriber %v shorter than commit→subscriber %v", path, d, sp.c2c[path][i])
			}
		}
	}
	if side.bad.Load() != 0 {
		t.Fatalf("bad messages: %v", side.badMsg.Load())
	}
	var total int64
	if err := db.QueryRowContext(ctx, `SELECT sum(n) FROM `+table).Scan(&total); err != nil || total != 200 {
		t.Fatalf("versions committed: %d %v, want 200 (the refused warm-up committed none)", total, err)
	}
	cancel()
	for range 2 {
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	}
}
