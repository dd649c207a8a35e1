package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/idempotency"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	db    *storage.DB
	store *idempotency.Store
	clock *clock
	calls atomic.Int32
	// answer is what the handler writes (status, body); hold, when set,
	// keeps it in flight until closed.
	status int
	body   string
	hold   chan struct{}
	inside chan struct{}
}

func newFixture(t *testing.T, db *storage.DB) *fixture {
	box, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	return &fixture{db: db, clock: c, status: 201, body: `{"id":"x","secret":"whsec_TOP-SECRET"}`,
		store: idempotency.New(db, box, idempotency.Options{Now: c.now})}
}

func (f *fixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	if f.inside != nil {
		f.inside <- struct{}{}
	}
	if f.hold != nil {
		<-f.hold
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	fmt.Fprint(w, strings.Replace(f.body, `"x"`, fmt.Sprintf(`"call-%d"`, n), 1))
}

// do sends one POST with key for caller through the store.
func (f *fixture) do(caller, key, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set(idempotency.KeyHeader, key)
	}
	w := httptest.NewRecorder()
	f.store.Handle(w, r, caller, f)
	return w
}

func code(w *httptest.ResponseRecorder) string {
	var e struct{ Code string }
	_ = json.Unmarshal(w.Body.Bytes(), &e)
	return e.Code
}

func (f *fixture) rows(t *testing.T) int {
	var n int
	if err := f.db.SQL.QueryRow(`SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReplayReuseAndCallers(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		first := f.do("user:usr_a", "k-1", "/api/v1/x", `{"a":1}`)
		if first.Code != 201 || first.Header().Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("first: %d %v", first.Code, first.Header())
		}
		again := f.do("user:usr_a", "k-1", "/api/v1/x", `{"a":1}`)
		if again.Code != 201 || again.Body.String() != first.Body.String() || again.Header().Get(idempotency.ReplayedHeader) != "true" ||
			again.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("replay: %d %s %v (first %s)", again.Code, again.Body, again.Header(), first.Body)
		}
		if n := f.calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times", n)
		}
		// Another body, another path, another query: the key is taken.
		for _, p := range [][2]string{{"/api/v1/x", `{"a":2}`}, {"/api/v1/y", `{"a":1}`}, {"/api/v1/x?q=1", `{"a":1}`}} {
			w := f.do("user:usr_a", "k-1", p[0], p[1])
			if w.Code != 422 || code(w) != "idempotency_key_reused" {
				t.Fatalf("reuse %v: %d %s", p, w.Code, w.Body)
			}
		}
		// Keys are per caller.
		if w := f.do("device:dev_b", "k-1", "/api/v1/x", `{"a":1}`); w.Code != 201 || w.Header().Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("another caller's key: %d %v", w.Code, w.Header())
		}
		if n := f.calls.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
		// The answer is sealed at rest: the secret is not in the row.
		var stored string
		if err := db.SQL.QueryRow(`SELECT body FROM idempotency_keys WHERE status = 201 LIMIT 1`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stored, "TOP-SECRET") || !strings.HasPrefix(stored, "v1:") {
			t.Fatalf("stored answer is not sealed: %q", stored)
		}
		// After 24 hours the key is free again, and the sweeper removes it.
		f.clock.add(idempotency.TTL + time.Second)
		if n, err := f.store.Sweep(context.Background()); err != nil || n != 2 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if w := f.do("user:usr_a", "k-1", "/api/v1/x", `{"a":2}`); w.Code != 201 || w.Header().Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("after expiry: %d %s", w.Code, w.Body)
		}
		// An expired key that was not swept yet is taken over too.
		f.clock.add(idempotency.TTL + time.Second)
		if w := f.do("user:usr_a", "k-1", "/api/v1/x", `{"a":3}`); w.Code != 201 || w.Header().Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("after expiry, unswept: %d %s", w.Code, w.Body)
		}
		if n := f.calls.Load(); n != 4 {
			t.Fatalf("handler ran %d times, want 4", n)
		}
	})
}

func TestMalformedKeys(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, storage.SQLite)
	f := newFixture(t, db)
	for name, key := range map[string]string{"too long": strings.Repeat("k", 256), "control": "a\tb", "non-ASCII": "clé"} {
		w := f.do("user:usr_a", key, "/api/v1/x", `{}`)
		if w.Code != 400 || code(w) != "validation_failed" || !strings.Contains(w.Body.String(), idempotency.KeyHeader) {
			t.Fatalf("%s: %d %s", name, w.Code, w.Body)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/x", strings.NewReader(`{}`))
	r.Header.Add(idempotency.KeyHeader, "a")
	r.Header.Add(idempotency.KeyHeader, "b")
	w := httptest.NewRecorder()
	f.store.Handle(w, r, "user:usr_a", f)
	if w.Code != 400 || code(w) != "validation_failed" {
		t.Fatalf("two keys: %d %s", w.Code, w.Body)
	}
	if w := f.do("user:usr_a", "", "/api/v1/x", `{}`); w.Code != 400 {
		t.Fatalf("an empty key: %d %s", w.Code, w.Body)
	}
	if f.calls.Load() != 0 || f.rows(t) != 0 {
		t.Fatalf("a malformed key ran the handler (%d) or stored a row (%d)", f.calls.Load(), f.rows(t))
	}
	if w := f.do("user:usr_a", strings.Repeat("k", 255), "/api/v1/x", `{}`); w.Code != 201 {
		t.Fatalf("a 255-character key: %d %s", w.Code, w.Body)
	}
}

// 5xx and 429 answers are not kept: the retry does the work. 4xx are.
func TestWhatIsKept(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		for i, status := range []int{500, 503, 429} {
			f.status = status
			key := fmt.Sprintf("k-%d", i)
			before := f.calls.Load()
			f.do("user:usr_a", key, "/api/v1/x", `{}`)
			w := f.do("user:usr_a", key, "/api/v1/x", `{}`)
			if w.Code != status || w.Header().Get(idempotency.ReplayedHeader) != "" || f.calls.Load() != before+2 {
				t.Fatalf("%d was kept: %d %v calls %d", status, w.Code, w.Header(), f.calls.Load()-before)
			}
		}
		if n := f.rows(t); n != 0 {
			t.Fatalf("%d rows left for unkept answers", n)
		}
		f.status, f.body = 404, `{"code":"not_found","message":"no such thing"}`
		f.do("user:usr_a", "k-404", "/api/v1/x", `{}`)
		if w := f.do("user:usr_a", "k-404", "/api/v1/x", `{}`); w.Code != 404 || w.Header().Get(idempotency.ReplayedHeader) != "true" {
			t.Fatalf("a 404 is kept: %d %v", w.Code, w.Header())
		}
	})
}

// While the first request is in flight the same key is 409; once it
// finished, it is replayed. A holder that vanished (its lease ran out) is
// taken over, and its late answer does not overwrite its successor's.
func TestConflictAndLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		f.hold, f.inside = make(chan struct{}), make(chan struct{}, 4)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- f.do("user:usr_a", "k", "/api/v1/x", `{}`) }()
		<-f.inside
		if w := f.do("user:usr_a", "k", "/api/v1/x", `{}`); w.Code != 409 || code(w) != "idempotency_conflict" {
			t.Fatalf("in flight: %d %s", w.Code, w.Body)
		}
		if w := f.do("user:usr_a", "k", "/api/v1/x", `{"other":1}`); w.Code != 422 {
			t.Fatalf("in flight, another body: %d %s", w.Code, w.Body)
		}
		// The holder's lease runs out: a retry takes the key over.
		f.clock.add(idempotency.Lease + time.Second)
		go func() { done <- f.do("user:usr_a", "k", "/api/v1/x", `{}`) }()
		<-f.inside
		close(f.hold)
		a, b := <-done, <-done
		if a.Code != 201 || b.Code != 201 || a.Body.String() == b.Body.String() {
			t.Fatalf("both should have run: %s / %s", a.Body, b.Body)
		}
		w := f.do("user:usr_a", "k", "/api/v1/x", `{}`)
		if w.Header().Get(idempotency.ReplayedHeader) != "true" || !strings.Contains(w.Body.String(), "call-2") {
			t.Fatalf("the successor's answer should be kept: %s", w.Body)
		}
	})
}

// Concurrent requests with one key: exactly one runs the handler; every
// other one is 409 or the replay of its answer.
func TestRace(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		const n = 12
		var wg sync.WaitGroup
		results := make([]*httptest.ResponseRecorder, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i] = f.do("user:usr_a", "race", "/api/v1/x", `{"same":true}`)
			}()
		}
		close(start)
		wg.Wait()
		if c := f.calls.Load(); c != 1 {
			t.Fatalf("the handler ran %d times", c)
		}
		fresh := 0
		for _, w := range results {
			switch {
			case w.Code == 201 && w.Header().Get(idempotency.ReplayedHeader) == "":
				fresh++
			case w.Code == 201 && strings.Contains(w.Body.String(), "call-1"):
			case w.Code == 409 && code(w) == "idempotency_conflict":
			default:
				t.Fatalf("unexpected answer %d %v %s", w.Code, w.Header(), w.Body)
			}
		}
		if fresh != 1 {
			t.Fatalf("%d fresh answers", fresh)
		}
	})
}
