package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// fakeClock starts 10 s into an hour, so every spec window (60, 300, 600 s)
// has just begun and none rolls over unless a test advances the clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	const base = 1_800_000_000
	return &fakeClock{t: time.Unix(base-base%3600+10, 0)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type factory func(t *testing.T, table Table, clock func() time.Time) *Limiter

func memoryFactory(t *testing.T, table Table, clock func() time.Time) *Limiter {
	l := New(nil, table, clock)
	if _, ok := l.store.(*memoryStore); !ok {
		t.Fatalf("store = %T, want *memoryStore", l.store)
	}
	return l
}

func mustAllow(t *testing.T, l *Limiter, g Group, subject string, cost int) Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), g, subject, cost)
	if err != nil {
		t.Fatalf("Allow(%s, %s, %d): %v", g, subject, cost, err)
	}
	return d
}

func TestMemory(t *testing.T) { runSuite(t, memoryFactory) }

// runSuite holds the behaviour both stores must share.
func runSuite(t *testing.T, newLimiter factory) {
	t.Run("QPlusOne", func(t *testing.T) {
		clk := newClock()
		l := newLimiter(t, SpecTable(), clk.Now)
		for i := range 5 {
			d := mustAllow(t, l, Auth, "user-1", 1)
			if !d.Allowed || d.Remaining != 4-i || d.Limit != 5 || d.RetryAfter != 0 {
				t.Fatalf("request %d: %+v", i+1, d)
			}
			if d.Reset != 290*time.Second {
				t.Fatalf("Reset = %s, want 290s", d.Reset)
			}
		}
		d := mustAllow(t, l, Auth, "user-1", 1)
		if d.Allowed || d.Remaining != 0 {
			t.Fatalf("6th request: %+v", d)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > 300*time.Second || d.RetryAfter != d.Reset {
			t.Fatalf("RetryAfter = %s, Reset = %s", d.RetryAfter, d.Reset)
		}
		// Other callers and other groups have budgets of their own.
		if d := mustAllow(t, l, Auth, "user-2", 1); !d.Allowed {
			t.Fatalf("other subject denied: %+v", d)
		}
		if d := mustAllow(t, l, Finance, "user-1", 1); !d.Allowed {
			t.Fatalf("other group denied: %+v", d)
		}
	})

	t.Run("WindowRollsOver", func(t *testing.T) {
		clk := newClock()
		l := newLimiter(t, SpecTable(), clk.Now)
		if d := mustAllow(t, l, Negotiate, "u", 1); !d.Allowed {
			t.Fatalf("first: %+v", d)
		}
		d := mustAllow(t, l, Negotiate, "u", 1)
		if d.Allowed || d.RetryAfter != 50*time.Second {
			t.Fatalf("second: %+v", d)
		}
		clk.Advance(d.RetryAfter - time.Nanosecond)
		if d := mustAllow(t, l, Negotiate, "u", 1); d.Allowed {
			t.Fatalf("1ns before the window ends: %+v", d)
		}
		clk.Advance(time.Nanosecond)
		d = mustAllow(t, l, Negotiate, "u", 1)
		if !d.Allowed || d.Remaining != 0 || d.Reset != 60*time.Second {
			t.Fatalf("next window: %+v", d)
		}
	})

	t.Run("Cost", func(t *testing.T) {
		clk := newClock()
		l := newLimiter(t, SpecTable(), clk.Now)
		steps := []struct {
			cost      int
			allowed   bool
			remaining int
		}{
			{3, true, 2},
			{3, false, 2}, // does not fit: denied, nothing spent
			{2, true, 0},
			{1, false, 0},
		}
		for i, s := range steps {
			d := mustAllow(t, l, Businesses, "u", s.cost)
			if d.Allowed != s.allowed || d.Remaining != s.remaining {
				t.Fatalf("step %d (cost %d): %+v, want allowed=%v remaining=%d", i, s.cost, d, s.allowed, s.remaining)
			}
		}
		// More than the whole limit is never allowed and spends nothing.
		d := mustAllow(t, l, Webhooks, "u", 6)
		if d.Allowed || d.Remaining != 5 {
			t.Fatalf("cost 6 of 5: %+v", d)
		}
		if d := mustAllow(t, l, Webhooks, "u", 5); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("cost 5 after refused 6: %+v", d)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		l := newLimiter(t, SpecTable(), newClock().Now)
		ctx := context.Background()
		if _, err := l.Allow(ctx, Auth, "u", 0); err == nil {
			t.Error("cost 0 accepted")
		}
		if _, err := l.Allow(ctx, Group("nope"), "u", 1); err == nil {
			t.Error("unknown group accepted")
		}
		if _, err := l.Allow(ctx, Auth, "", 1); err == nil {
			t.Error("empty subject accepted")
		}
	})

	t.Run("LongSubjects", func(t *testing.T) {
		l := newLimiter(t, SpecTable(), newClock().Now)
		a, b := strings.Repeat("a", 1000), strings.Repeat("a", 999)+"b"
		for range 5 {
			mustAllow(t, l, Auth, a, 1)
		}
		if d := mustAllow(t, l, Auth, a, 1); d.Allowed {
			t.Fatalf("long subject over budget: %+v", d)
		}
		if d := mustAllow(t, l, Auth, b, 1); !d.Allowed || d.Remaining != 4 {
			t.Fatalf("distinct long subject shares a budget: %+v", d)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		l := newLimiter(t, SpecTable(), newClock().Now)
		assertConcurrent(t, []*Limiter{l}, 1, 5)
	})

	t.Run("ConcurrentCost2", func(t *testing.T) {
		l := newLimiter(t, SpecTable(), newClock().Now)
		assertConcurrent(t, []*Limiter{l}, 2, 2)
	})

	t.Run("Multiplier", func(t *testing.T) {
		for _, tc := range []struct {
			mode string
			want int
		}{{"10", 50}, {"0.5", 2}, {"spec", 5}} {
			m, err := ParseMode(tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			l := newLimiter(t, m.Table(), newClock().Now)
			n := 0
			for {
				d := mustAllow(t, l, Auth, "u-"+tc.mode, 1)
				if !d.Allowed {
					break
				}
				n++
			}
			if n != tc.want {
				t.Errorf("mode %s: %d allowed, want %d", tc.mode, n, tc.want)
			}
		}
	})
}

// assertConcurrent fires 100 checks of cost at once, spread over limiters
// (replicas), against one 5-unit budget and wants exactly wantOK to pass.
func assertConcurrent(t *testing.T, ls []*Limiter, cost, wantOK int) {
	t.Helper()
	const n = 100
	var (
		ok, denied atomic.Int64
		wg         sync.WaitGroup
		start      = make(chan struct{})
		mu         sync.Mutex
		remaining  = map[int]int{}
		errs       []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := ls[i%len(ls)].Allow(context.Background(), VouchersWrite, "shared-subject", cost)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case d.Allowed:
				ok.Add(1)
				remaining[d.Remaining]++
			default:
				denied.Add(1)
				if d.Remaining >= cost || d.RetryAfter <= 0 {
					errs = append(errs, fmt.Errorf("inconsistent denial: %+v", d))
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if ok.Load() != int64(wantOK) || denied.Load() != int64(n-wantOK) {
		t.Fatalf("allowed %d, denied %d; want %d allowed", ok.Load(), denied.Load(), wantOK)
	}
	// Every successful check saw a distinct counter value.
	for i := range wantOK {
		if r := 5 - cost*(i+1); remaining[r] != 1 {
			t.Fatalf("remaining values %v: want each of 5-%d*k once", remaining, cost)
		}
	}
}

func TestOffDoesNoIO(t *testing.T) {
	off, err := ParseMode("off")
	if err != nil {
		t.Fatal(err)
	}
	// A PostgreSQL DB with no connection: any I/O would panic.
	l := New(&storage.DB{Dialect: storage.Postgres}, off.Table(), nil)
	if l.Enabled() {
		t.Fatal("off limiter is enabled")
	}
	for range 1000 {
		d := mustAllow(t, l, Negotiate, "u", 3)
		if !d.Allowed {
			t.Fatalf("denied while off: %+v", d)
		}
		if Err(d) != nil || len(Headers(d)) != 0 {
			t.Fatalf("off decision yields error %v / headers %v", Err(d), Headers(d))
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		str  string
		off  bool
		auth int // limit of auth
		neg  int // limit of negotiate
		read int // limit of vouchers-read
	}{
		{"", "spec", false, 5, 1, 10},
		{"spec", "spec", false, 5, 1, 10},
		{" SPEC ", "spec", false, 5, 1, 10},
		{"1", "spec", false, 5, 1, 10},
		{"off", "off", true, 0, 0, 0},
		{"10", "10", false, 50, 10, 100},
		{"0.5", "0.5", false, 2, 1, 5},
		{"0.01", "0.01", false, 1, 1, 1},
		{"1e12", "1e+12", false, maxLimit, maxLimit, maxLimit},
	} {
		m, err := ParseMode(tc.in)
		if err != nil {
			t.Fatalf("ParseMode(%q): %v", tc.in, err)
		}
		if m.String() != tc.str || m.Off() != tc.off {
			t.Errorf("ParseMode(%q) = %s off=%v", tc.in, m, m.Off())
		}
		tab := m.Table()
		if tc.off {
			if tab != nil {
				t.Errorf("off table = %v", tab)
			}
			continue
		}
		if len(tab) != len(Groups()) {
			t.Errorf("%q: table has %d groups", tc.in, len(tab))
		}
		if tab[Auth].Limit != tc.auth || tab[Negotiate].Limit != tc.neg || tab[VouchersRead].Limit != tc.read {
			t.Errorf("%q: auth %d negotiate %d vouchers-read %d", tc.in, tab[Auth].Limit, tab[Negotiate].Limit, tab[VouchersRead].Limit)
		}
		if tab[VouchersRead].Window != 600*time.Second {
			t.Errorf("%q: window scaled to %s", tc.in, tab[VouchersRead].Window)
		}
	}
	for _, bad := range []string{"0", "-1", "abc", "NaN", "inf", "1e400", "10x", "on"} {
		if _, err := ParseMode(bad); err == nil || !strings.Contains(err.Error(), "positive multiplier") {
			t.Errorf("ParseMode(%q) error = %v", bad, err)
		}
	}
	var m Mode
	if err := m.UnmarshalText([]byte("2")); err != nil || m.Multiplier() != 2 {
		t.Errorf("UnmarshalText: %v %v", m, err)
	}
}

func TestSpecTable(t *testing.T) {
	want := map[Group]Policy{
		Auth:          {5, 300 * time.Second},
		Businesses:    {5, 300 * time.Second},
		Finance:       {5, 300 * time.Second},
		VouchersRead:  {10, 600 * time.Second},
		VouchersWrite: {5, 300 * time.Second},
		Negotiate:     {1, 60 * time.Second},
		Widgets:       {5, 300 * time.Second},
		WidgetsPublic: {5, 300 * time.Second},
		Webhooks:      {5, 300 * time.Second},
	}
	got := SpecTable()
	if len(got) != len(want) {
		t.Fatalf("%d groups, want %d", len(got), len(want))
	}
	for g, p := range want {
		if got[g] != p {
			t.Errorf("%s: %+v, want %+v", g, got[g], p)
		}
	}
}

func TestHeaders(t *testing.T) {
	p := Policy{Limit: 5, Window: 300 * time.Second}
	allowed := Decision{Group: Auth, Allowed: true, Limit: 5, Remaining: 3, Reset: 289*time.Second + 200*time.Millisecond, Policy: p}
	h := Headers(allowed)
	if got := h.Get("RateLimit-Policy"); got != `"auth";q=5;w=300` {
		t.Errorf("RateLimit-Policy = %s", got)
	}
	if got := h.Get("RateLimit"); got != `"auth";r=3;t=290` {
		t.Errorf("RateLimit = %s", got)
	}
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After on an allowed decision")
	}
	if Err(allowed) != nil {
		t.Error("Err on an allowed decision")
	}

	denied := Decision{Group: Negotiate, Limit: 1, Reset: 100 * time.Millisecond, RetryAfter: 100 * time.Millisecond, Policy: Policy{1, time.Minute}}
	h = make(http.Header)
	SetHeaders(h, allowed, denied)
	if got := h.Get("RateLimit-Policy"); got != `"auth";q=5;w=300, "negotiate";q=1;w=60` {
		t.Errorf("RateLimit-Policy = %s", got)
	}
	if got := h.Get("RateLimit"); got != `"auth";r=3;t=290, "negotiate";r=0;t=1` {
		t.Errorf("RateLimit = %s", got)
	}
	if got := h.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1 (never 0)", got)
	}

	denied.RetryAfter, denied.Reset = 41*time.Second+time.Millisecond, 41*time.Second+time.Millisecond
	if got := Headers(denied).Get("Retry-After"); got != "42" {
		t.Errorf("Retry-After = %q, want 42 (rounded up)", got)
	}
	err := Err(denied)
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Code != apperr.RateLimit || ae.RetryAfterSeconds != 42 || ae.Code.HTTPStatus() != http.StatusTooManyRequests {
		t.Fatalf("Err = %#v", err)
	}

	if got := sfString(`we"ird\näme`); got != `"we\"ird\\nme"` {
		t.Errorf("sfString = %s", got)
	}
}

func TestMemorySweep(t *testing.T) {
	clk := newClock()
	l := New(nil, SpecTable(), clk.Now)
	ms := l.store.(*memoryStore)
	for i := range 50 {
		mustAllow(t, l, Negotiate, fmt.Sprint("u", i), 1)
	}
	if ms.len() != 50 {
		t.Fatalf("%d buckets", ms.len())
	}
	clk.Advance(2 * time.Minute) // windows over, next sweep due
	mustAllow(t, l, Negotiate, "fresh", 1)
	if ms.len() != 1 {
		t.Fatalf("%d buckets after sweep, want 1", ms.len())
	}
}

func TestNewPicksStore(t *testing.T) {
	db, err := storage.Open(context.Background(), "sqlite://"+t.TempDir()+"/rl.db", storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, ok := New(db, SpecTable(), nil).store.(*memoryStore); !ok {
		t.Error("SQLite does not use the memory store")
	}
	// The real clock works too (one check can't straddle anything).
	if d := mustAllow(t, New(db, SpecTable(), nil), Auth, "u", 1); !d.Allowed || d.Reset <= 0 || d.Reset > 300*time.Second {
		t.Errorf("real clock: %+v", d)
	}
}
