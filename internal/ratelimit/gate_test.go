package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
)

func TestOperation(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"POST /api/v1/auth/sign-in", "POST /api/v1/auth/sign-in"},
		{"GET /api/v1/businesses/{$}", "GET /api/v1/businesses"},
		{"GET /api/v1/businesses", "GET /api/v1/businesses"},
		{"GET /api/v1/businesses/", "GET /api/v1/businesses"},
		{"GET /api/v1/vouchers/{voucherId}", "GET /api/v1/vouchers/{}"},
		{"GET /api/v1/vouchers/{id}", "GET /api/v1/vouchers/{}"},
		{"POST /api/v1/businesses/{businessId}/users/{businessUserId}/update-status", "POST /api/v1/businesses/{}/users/{}/update-status"},
		{"GET /files/{path...}", "GET /files/{}"},
		{"GET /", "GET /"},
		{"GraphQL viewer", "GraphQL viewer"},
	} {
		if got := Operation(tc.in); got != tc.want {
			t.Errorf("Operation(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAddressKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.7", "ip:203.0.113.7"},
		{"::ffff:203.0.113.7", "ip:203.0.113.7"},
		// One /64 is one subscriber: every address in it is one caller.
		{"2001:db8:1:2:aaaa::1", "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "ip:2001:db8:1:2::/64"},
		{"fe80::1%eth0", "ip:fe80::/64"},
		{"@", "ip:@"},
	} {
		if got := AddressKey(tc.in); got != tc.want {
			t.Errorf("AddressKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// gateRig is a gate with a fake clock and the spec's table (or mode's).
type gateRig struct {
	clk  *fakeClock
	gate *Gate
}

func newGateRig(t *testing.T, mode string, trusted ...string) gateRig {
	t.Helper()
	m, err := ParseMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	cip, err := httpx.NewClientIP(trusted)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	return gateRig{clk: clk, gate: NewGate(New(nil, m.Table(), clk.Now), m, cip)}
}

// serve runs one request through a mux route limited in group, as the
// REST door does, and answers 200 when the gate lets it through.
func (g gateRig) serve(t *testing.T, pattern, group, method, path, remote string, p *auth.Principal, hdr http.Header) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := g.gate.Limit(r.Context(), group, r, w.Header()); err != nil {
			httpx.WriteError(w, r, nil, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header[k] = v
	}
	if p != nil {
		r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func TestGateLimit(t *testing.T) {
	const signIn = "POST /api/v1/auth/sign-in"
	t.Run("QPlusOneThenRetryAfter", func(t *testing.T) {
		g := newGateRig(t, "spec")
		for i := 1; i <= 5; i++ {
			w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:4000", nil, nil)
			if w.Code != http.StatusOK {
				t.Fatalf("request %d: %d", i, w.Code)
			}
			if got, want := w.Header().Get(HeaderPolicy), `"auth";q=5;w=300`; got != want {
				t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
			}
			if got, want := w.Header().Get(HeaderRateLimit), `"auth";r=`+strconv.Itoa(5-i)+`;t=290`; got != want {
				t.Fatalf("RateLimit = %q, want %q", got, want)
			}
			if w.Header().Get(HeaderRetryAfter) != "" {
				t.Fatalf("Retry-After on an allowed request")
			}
		}
		w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:4000", nil, nil)
		if w.Code != http.StatusTooManyRequests || !bodyCode(w, apperr.RateLimit) {
			t.Fatalf("sixth: %d %s", w.Code, w.Body)
		}
		ra, err := strconv.Atoi(w.Header().Get(HeaderRetryAfter))
		if err != nil || ra != 290 {
			t.Fatalf("Retry-After = %q, want 290", w.Header().Get(HeaderRetryAfter))
		}
		if got := w.Header().Get(HeaderRateLimit); got != `"auth";r=0;t=290` {
			t.Fatalf("RateLimit = %q", got)
		}
		// One second short of Retry-After the window still holds.
		g.clk.Advance(time.Duration(ra-1) * time.Second)
		if w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:4000", nil, nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("before Retry-After: %d", w.Code)
		}
		g.clk.Advance(time.Second)
		if w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:4000", nil, nil); w.Code != http.StatusOK {
			t.Fatalf("after Retry-After: %d %s", w.Code, w.Body)
		}
	})

	t.Run("NegotiateOnePerMinute", func(t *testing.T) {
		g := newGateRig(t, "spec")
		const pattern = "POST /api/v1/vouchers/{voucherId}/negotiate-voucher"
		payer := &auth.Principal{Kind: auth.KindDevice, ID: "dev_payer"}
		try := func() *httptest.ResponseRecorder {
			return g.serve(t, pattern, "negotiate", "POST", "/api/v1/vouchers/vch_1/negotiate-voucher", "198.51.100.1:1", payer, nil)
		}
		if w := try(); w.Code != 200 || w.Header().Get(HeaderPolicy) != `"negotiate";q=1;w=60` {
			t.Fatalf("first: %d %v", w.Code, w.Header())
		}
		w := try()
		ra, _ := strconv.Atoi(w.Header().Get(HeaderRetryAfter))
		if w.Code != 429 || ra < 1 || ra > 60 {
			t.Fatalf("second: %d, Retry-After %q", w.Code, w.Header().Get(HeaderRetryAfter))
		}
		// Another voucher is the same operation: the budget is per route.
		if w := g.serve(t, pattern, "negotiate", "POST", "/api/v1/vouchers/vch_2/negotiate-voucher", "198.51.100.1:1", payer, nil); w.Code != 429 {
			t.Fatalf("another voucher: %d", w.Code)
		}
		g.clk.Advance(time.Duration(ra) * time.Second)
		if w := try(); w.Code != 200 {
			t.Fatalf("after Retry-After: %d", w.Code)
		}
	})

	t.Run("PerOperationNotPerGroup", func(t *testing.T) {
		g := newGateRig(t, "spec")
		for range 5 {
			g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:1", nil, nil)
		}
		if w := g.serve(t, "POST /api/v1/auth/sign-up", "auth", "POST", "/api/v1/auth/sign-up", "198.51.100.1:1", nil, nil); w.Code != http.StatusOK {
			t.Fatalf("sign-up after five sign-ins: %d (budgets are per endpoint)", w.Code)
		}
		// Two patterns of one route are one operation.
		for range 5 {
			g.serve(t, "GET /api/v1/businesses/{$}", "businesses", "GET", "/api/v1/businesses/", "198.51.100.1:1", &auth.Principal{Kind: auth.KindUser, ID: "usr_a"}, nil)
		}
		if w := g.serve(t, "GET /api/v1/businesses", "businesses", "GET", "/api/v1/businesses", "198.51.100.1:1", &auth.Principal{Kind: auth.KindUser, ID: "usr_a"}, nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("slash-less list after five slashed: %d", w.Code)
		}
	})

	t.Run("Callers", func(t *testing.T) {
		g := newGateRig(t, "spec")
		alice := &auth.Principal{Kind: auth.KindDevice, ID: "dev_alice"}
		bob := &auth.Principal{Kind: auth.KindDevice, ID: "dev_bob"}
		create := "POST /api/v1/vouchers/sessions/create-session"
		for range 5 {
			if w := g.serve(t, create, "vouchers-write", "POST", "/api/v1/vouchers/sessions/create-session", "198.51.100.1:1", alice, nil); w.Code != 200 {
				t.Fatal(w.Code)
			}
		}
		if w := g.serve(t, create, "vouchers-write", "POST", "/api/v1/vouchers/sessions/create-session", "198.51.100.2:1", alice, nil); w.Code != 429 {
			t.Fatalf("alice from another address: %d (keyed by token subject)", w.Code)
		}
		if w := g.serve(t, create, "vouchers-write", "POST", "/api/v1/vouchers/sessions/create-session", "198.51.100.1:1", bob, nil); w.Code != 200 {
			t.Fatalf("bob from alice's address: %d", w.Code)
		}
		// Without a token the address is the caller.
		if w := g.serve(t, create, "vouchers-write", "POST", "/api/v1/vouchers/sessions/create-session", "198.51.100.1:1", nil, nil); w.Code != 200 {
			t.Fatalf("anonymous: %d", w.Code)
		}

		// Sign-in is keyed by address even with a token: a token must
		// not buy a fresh sign-in budget.
		for i := range 5 {
			p := &auth.Principal{Kind: auth.KindDevice, ID: "dev_" + strconv.Itoa(i)}
			g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.9:1", p, nil)
		}
		if w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.9:1", &auth.Principal{Kind: auth.KindDevice, ID: "dev_new"}, nil); w.Code != 429 {
			t.Fatalf("sign-in with a fresh token from a spent address: %d", w.Code)
		}
	})

	t.Run("TrustedProxy", func(t *testing.T) {
		g := newGateRig(t, "spec", "10.0.0.0/8")
		xff := http.Header{"X-Forwarded-For": {"203.0.113.5, 10.1.1.1"}}
		for range 5 {
			g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "10.0.0.2:1", nil, xff)
		}
		if w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "10.0.0.3:1", nil, xff); w.Code != 429 {
			t.Fatalf("same client through another proxy: %d", w.Code)
		}
		other := http.Header{"X-Forwarded-For": {"203.0.113.6"}}
		if w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "10.0.0.2:1", nil, other); w.Code != 200 {
			t.Fatalf("another client through the same proxy: %d", w.Code)
		}
		// An untrusted peer cannot pick its address with the header.
		for i := range 6 {
			w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.50:1", nil, http.Header{"X-Forwarded-For": {"192.0.2." + strconv.Itoa(i+1)}})
			if i == 5 && w.Code != 429 {
				t.Fatalf("spoofed X-Forwarded-For bought a budget: %d", w.Code)
			}
		}
	})

	t.Run("Multiplier", func(t *testing.T) {
		g := newGateRig(t, "2")
		for i := 1; i <= 11; i++ {
			w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:1", nil, nil)
			if want := map[bool]int{true: 200, false: 429}[i <= 10]; w.Code != want {
				t.Fatalf("request %d: %d, want %d", i, w.Code, want)
			}
			if got := w.Header().Get(HeaderPolicy); got != `"auth";q=10;w=300` {
				t.Fatalf("RateLimit-Policy = %q", got)
			}
		}
		if got := g.gate.Cap(8); got != 16 {
			t.Errorf("Cap(8) = %d, want 16", got)
		}
	})

	t.Run("Off", func(t *testing.T) {
		g := newGateRig(t, "off")
		for range 50 {
			w := g.serve(t, signIn, "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:1", nil, nil)
			if w.Code != 200 || w.Header().Get(HeaderPolicy) != "" || w.Header().Get(HeaderRateLimit) != "" {
				t.Fatalf("off: %d %v", w.Code, w.Header())
			}
		}
		if g.gate.Enabled() || g.gate.Cap(8) != 0 {
			t.Fatal("an off gate reports limits")
		}
	})

	t.Run("UnknownGroupFailsClosed", func(t *testing.T) {
		g := newGateRig(t, "spec")
		if w := g.serve(t, signIn, "no-such-group", "POST", "/api/v1/auth/sign-in", "198.51.100.1:1", nil, nil); w.Code != http.StatusInternalServerError {
			t.Fatalf("unknown group: %d", w.Code)
		}
	})
}

func bodyCode(w *httptest.ResponseRecorder, code apperr.Code) bool {
	return len(w.Body.Bytes()) > 0 && httpxCode(w.Body.Bytes()) == string(code)
}

func httpxCode(b []byte) string {
	var e httpx.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		return ""
	}
	return string(e.Code)
}

// TestGateConcurrent: 100 requests at once against a budget of 5 give
// exactly 5, through the same path the REST door takes.
func TestGateConcurrent(t *testing.T) {
	g := newGateRig(t, "spec")
	var wg sync.WaitGroup
	codes := make(chan int, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- g.serve(t, "POST /api/v1/auth/sign-in", "auth", "POST", "/api/v1/auth/sign-in", "198.51.100.1:1", nil, nil).Code
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 5 || n[429] != 95 {
		t.Fatalf("statuses %v, want 5×200 and 95×429", n)
	}
}

func TestSetHeadersMergesGroup(t *testing.T) {
	p := Policy{Limit: 10, Window: 600 * time.Second}
	a := Decision{Group: VouchersRead, Allowed: true, Limit: 10, Remaining: 7, Reset: 100 * time.Second, Policy: p}
	b := Decision{Group: VouchersRead, Allowed: false, Limit: 10, Remaining: 0, Reset: 100 * time.Second, RetryAfter: 100 * time.Second, Policy: p}
	c := Decision{Group: Auth, Allowed: true, Limit: 5, Remaining: 4, Reset: 10 * time.Second, Policy: Policy{5, 300 * time.Second}}
	h := Headers(a, c, b)
	if got := h.Get(HeaderPolicy); got != `"vouchers-read";q=10;w=600, "auth";q=5;w=300` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := h.Get(HeaderRateLimit); got != `"vouchers-read";r=0;t=100, "auth";r=4;t=10` {
		t.Errorf("RateLimit = %q", got)
	}
	if got := h.Get(HeaderRetryAfter); got != "100" {
		t.Errorf("Retry-After = %q", got)
	}
}

func TestSlots(t *testing.T) {
	s := NewSlots(2)
	r1, ok1 := s.Acquire("a")
	_, ok2 := s.Acquire("a")
	_, ok3 := s.Acquire("a")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("acquire: %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if _, ok := s.Acquire("b"); !ok {
		t.Fatal("another key is refused")
	}
	r1()
	r1() // a second release must not free a slot it does not hold
	if s.Held("a") != 1 {
		t.Fatalf("held %d after one release, want 1", s.Held("a"))
	}
	if _, ok := s.Acquire("a"); !ok {
		t.Fatal("a released slot is not reusable")
	}
	if _, ok := s.Acquire("a"); ok {
		t.Fatal("double release freed a second slot")
	}

	unlimited := NewSlots(0)
	for range 100 {
		if _, ok := unlimited.Acquire("a"); !ok {
			t.Fatal("a zero cap refused")
		}
	}

	h := make(http.Header)
	SetConcurrencyHeaders(h, "websocket-connections", 8)
	if got := h.Get(HeaderPolicy); got != `"websocket-connections";q=8;qu="concurrent-requests"` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if h.Get(HeaderRateLimit) != `"websocket-connections";r=0` || h.Get(HeaderRetryAfter) == "" {
		t.Errorf("headers %v", h)
	}
	var ae *apperr.Error
	if err := ConcurrencyErr("subscriptions", 8); !errors.As(err, &ae) || ae.Code != apperr.RateLimit {
		t.Errorf("ConcurrencyErr = %v", err)
	}
}

func TestGateSpendNeedsOperation(t *testing.T) {
	g := newGateRig(t, "spec")
	if _, err := g.gate.Spend(context.Background(), Auth, "", "198.51.100.1", 1); err == nil {
		t.Fatal("an unnamed operation was charged")
	}
}
