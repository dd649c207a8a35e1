package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/stats"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// The HTTP floor's two replicas, driven by the same code that drives the
// service (c2cSide): every negotiation commits one version, its frame
// reaches the voucher's subscriber on the committing replica in process
// and on the other one through LISTEN (or a NATS subscription), each
// answer carries its commit stamp, and every update pairs with its
// transition.
func TestC2CHTTPFloorDeliversEveryTransitionOnBothReplicas(t *testing.T) {
	c := testpg.StartT(t)
	if c == nil {
		return
	}
	t.Run("notify", func(t *testing.T) { testC2CHTTPFloor(t, c, "c2c_floor_test", "") })
	t.Run("nats", func(t *testing.T) {
		addr, stop := startTestNATS(t)
		defer func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		}()
		testC2CHTTPFloor(t, c, "c2c_floor_test_nats", "nats://"+addr)
	})
}

// startTestNATS runs ServeNATS and returns its client address once it
// answers /healthz, and stop, which ends it and says how it ended.
func startTestNATS(t *testing.T) (addr string, stop func() error) {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	monitor, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeNATS(ctx, addr, monitor) }()
	stop = func() error {
		cancel()
		select {
		case err := <-served:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("the NATS server did not stop")
		}
	}
	if !waitFor(ctx, 10*time.Second, func() bool {
		r, err := http.Get("http://" + monitor + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusOK
	}) {
		stop()
		t.Fatal("no /healthz from the NATS server")
	}
	return addr, stop
}

func testC2CHTTPFloor(t *testing.T, c *testpg.Cluster, table, natsURL string) {
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
		cfg := floor.Config{Addr: addrs[i], DSN: dsn, MaxConns: 8, C2C: &floor.C2C{Channel: c2cHTTPFloorChannel, Table: table, Column: "n", Update: update, Listen: listen, NATS: natsURL,
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

// interleave deals one schedule's negotiations to its sides in turn: each
// side sends half the rate over the whole slice, each to its own server
// and its next voucher, and its errors stay its own.
func TestInterleaveDealsOneScheduleToEverySide(t *testing.T) {
	ctx := context.Background()
	type hit struct {
		path string
		at   time.Time
	}
	var mu sync.Mutex
	hits := map[string][]hit{}
	server := func(name string, fail bool) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			hits[name] = append(hits[name], hit{r.URL.Path, time.Now()})
			mu.Unlock()
			if fail && strings.Contains(r.URL.Path, "/v0/") {
				http.Error(w, `{"error":"no"}`, http.StatusConflict)
				return
			}
			w.Header().Set("Server-Timing", `commit;desc="`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"`)
			w.Write([]byte(`{}`))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	side := func(addr string, k int) *c2cSide {
		s := &c2cSide{ids: make([]string, k), paths: make([]string, k), sends: make([][]c2cSent, k), initialVer: make([]int, k), recvs: make([]map[int]time.Time, k),
			writers: newLeanPool(addr), neg: stats.NewRecorder(0), errs: stats.NewRecorder(0)}
		for i := range s.ids {
			s.ids[i] = fmt.Sprintf("v%d", i)
			s.paths[i] = "/api/v1/vouchers/" + s.ids[i] + "/negotiate-voucher"
		}
		t.Cleanup(s.writers.Close)
		return s
	}
	a, b := side(server("a", false), 7), side(server("b", true), 5)
	start := time.Now()
	interleave(ctx, 400, 500*time.Millisecond, false, a, b)
	interleave(ctx, 400, 500*time.Millisecond, false, a, b)
	if a.n != 200 || b.n != 200 {
		t.Fatalf("sent %d and %d, want 200 each (400/s for 1 s, dealt in turn)", a.n, b.n)
	}
	if a.elapsed < 900*time.Millisecond || a.elapsed != b.elapsed {
		t.Fatalf("elapsed %v and %v: want the slices' time on both sides", a.elapsed, b.elapsed)
	}
	if s := a.errs.Summary(time.Second); s.Errors != 0 {
		t.Fatalf("side a: %d errors, want none (the failures are b's)", s.Errors)
	}
	if s := b.errs.Summary(time.Second); s.Errors != 40 {
		t.Fatalf("side b: %d errors, want its 40 (its voucher v0 is refused)", s.Errors)
	}
	// Each side went round its own vouchers in order, and both sent
	// over the whole of both slices, not one after the other.
	for name, k := range map[string]int{"a": 7, "b": 5} {
		per := map[string]int{}
		for _, h := range hits[name] {
			per[h.path]++
		}
		for i := range k {
			want := 200 / k
			if i < 200%k {
				want++
			}
			if got := per[fmt.Sprintf("/api/v1/vouchers/v%d/negotiate-voucher", i)]; got != want {
				t.Fatalf("side %s voucher %d: %d negotiations, want %d", name, i, got, want)
			}
		}
		first, last := hits[name][0].at.Sub(start), time.Since(hits[name][len(hits[name])-1].at)
		if first > a.elapsed/4 || last > a.elapsed/4 {
			t.Fatalf("side %s sent from %v after the start to %v before the end: want the whole span", name, first, last)
		}
	}
	for v, sends := range a.sends {
		for _, snd := range sends {
			if snd.tc.IsZero() || snd.warm {
				t.Fatalf("voucher %d: a send without its commit stamp, or marked warm", v)
			}
		}
	}
	// The phase's rate is both sides' answered negotiations together.
	a.partners = []*c2cSide{b}
	res := a.result("x", "x", a.spans(), 0, 4, nil)
	seen := 0
	for _, f := range res.Figures {
		switch f.Name {
		case "achieved transition rate":
			// a's 200 and b's 160 answered over the slices' time.
			if want := 360 / a.elapsed.Seconds(); math.Abs(f.Value-want) > 0.01 {
				t.Fatalf("achieved %v/s, want %v/s (both sides' answered over the slices' time)", f.Value, want)
			}
			seen++
		case "this side's transition rate (its negotiations interleaved with the other side's)":
			if want := 200 / a.elapsed.Seconds(); math.Abs(f.Value-want) > 0.01 {
				t.Fatalf("its own rate %v/s, want %v/s", f.Value, want)
			}
			seen++
		}
	}
	if seen != 2 {
		t.Fatalf("%d of the two rate figures found", seen)
	}
}

// A turn shared by two sides gives each its own servers' CPU per its own
// transitions, and what the rest of the machine spent per transition of
// both.
func TestSharedTurnCostFigures(t *testing.T) {
	var a, b turnCost
	na, nb := 0, 0
	self := os.Getpid()
	// Burn d of this process's CPU time (not of the clock: on a loaded
	// machine the process gets less than the time it spins).
	burn := func(d time.Duration) {
		start, err := proc.CPU(self)
		if err != nil {
			t.Fatal(err)
		}
		for give := time.Now().Add(time.Minute); time.Now().Before(give); {
			for end := time.Now().Add(time.Millisecond); time.Now().Before(end); {
			}
			if now, err := proc.CPU(self); err == nil && now-start >= d {
				return
			}
		}
		t.Fatal("could not burn the CPU time in a minute")
	}
	measureTurn(func() { burn(50 * time.Millisecond); na, nb = 100, 300 },
		costPart{&a, []int{self}, &na}, costPart{&b, nil, &nb})
	if a.n != 100 || b.n != 300 || a.nAll != 400 || b.nAll != 400 {
		t.Fatalf("transitions: a %d of %d, b %d of %d; want 100 and 300 of 400", a.n, a.nAll, b.n, b.nAll)
	}
	if a.cpu < 30*time.Millisecond || b.cpu != 0 {
		t.Fatalf("servers' CPU: a %v (its process burned 50 ms), b %v (none given)", a.cpu, b.cpu)
	}
	if a.self != b.self || a.self < 30*time.Millisecond {
		t.Fatalf("the bench's CPU %v and %v: want the turn's, on both", a.self, b.self)
	}
	got := map[string]float64{}
	for _, f := range a.figures() {
		got[f.Name] = f.Value
	}
	if per, all := got["server CPU per transition (both replicas, during its turns)"], got["bench process CPU per transition (load generator and subscribers, during its turns)"]; per < 3*all {
		t.Fatalf("a's server CPU per transition %v against the bench's %v: want its own per its 100, the bench's per 400", per, all)
	}
}
