package graph_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/storage"
)

const sessionSub = `subscription($s: ID) { voucherUpdated(sessionId: $s) { id status version } }`

func TestWebsocketRefusesBadTokensWith4403(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	keys, _ := auth.NewKeyring(auth.KeyFromSecret([]byte("some-other-secret-0123456789abcdefghijklmn")))
	foreign, _ := auth.NewIssuer(auth.IssuerConfig{Keys: keys, Issuer: "voucherd", Audience: "voucherd"})
	forged, _, _ := foreign.IssueDevice("dev_01hzzzzzzzzzzzzzzzzzzzzzzz")
	good := h.device().token
	cases := []struct{ name, authorization string }{
		{"garbage token", "Bearer not-a-jwt"},
		{"other key", "Bearer " + forged},
		{"tampered", "Bearer " + good[:len(good)-2] + "xx"},
		{"wrong scheme", "Basic " + good},
		{"empty bearer", "Bearer "},
	}
	for _, proto := range protocols {
		for _, tc := range cases {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				c := dialWS(t, h.ws, proto)
				c.send(wsMsg{Type: "connection_init", Payload: payload(map[string]string{"Authorization": tc.authorization})})
				if proto == legacyWS {
					// subscriptions-transport-ws clients expect the reason first.
					if m := c.next(2 * time.Second); m.Type != "connection_error" {
						t.Fatalf("want connection_error, got %s", m.Type)
					}
				}
				if code, _ := c.closed(2 * time.Second); code != graph.CloseForbidden {
					t.Fatalf("close code %d, want 4403", code)
				}
			})
		}
	}
}

func TestWebsocketInitTimeoutClosesWith4408(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{InitTimeout: 300 * time.Millisecond}})
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			// The server's timer starts at the upgrade, inside the dial:
			// timed from before the dial, an early close still shows, and
			// a slow dial on a loaded machine cannot eat the margin.
			start := time.Now()
			c := dialWS(t, h.ws, proto)
			if code, _ := c.closed(3 * time.Second); code != graph.CloseInitTimeout {
				t.Fatalf("close code %d, want 4408", code)
			}
			if d := time.Since(start); d < 250*time.Millisecond {
				t.Fatalf("closed after %v, before the init timeout", d)
			}
		})
	}
}

func TestWebsocketKeepAlive(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{KeepAlive: 100 * time.Millisecond}})
	payer := h.device()
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, h.ws, proto)
			c.init(payer.token)
			want := "ping" // graphql-transport-ws: the server pings, the client pongs
			if proto == legacyWS {
				want = "ka"
			}
			deadline := time.After(2 * time.Second)
			for seen := 0; seen < 3; {
				select {
				case m := <-c.msgs:
					if m.Type == want {
						seen++
					}
				case <-deadline:
					t.Fatalf("fewer than 3 %s within 2s", want)
				}
			}
		})
	}
	t.Run("client that never pongs is dropped", func(t *testing.T) {
		c := dialWS(t, h.ws, transportWS)
		c.noPong = true
		c.init(payer.token)
		// Its read deadline (two ping intervals) passes without a pong.
		c.closed(time.Second)
	})
}

// A connection ends with 4403 when its token expires, and its
// subscriptions with it: nothing is left in the hub.
func TestWebsocketTokenExpiryEndsSubscriptions(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{tokenTTL: 2 * time.Second})
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			payer := h.device()
			ses, _ := h.session(payer)
			c := dialWS(t, h.ws, proto)
			c.init(payer.token)
			c.subscribe("1", sessionSub, map[string]any{"s": ses.ID})
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 1 })
			code, text := c.closed(4 * time.Second)
			if code != graph.CloseForbidden || !strings.Contains(text, "expired") {
				t.Fatalf("close %d %q, want 4403 token expired", code, text)
			}
			if !payer.p.ExpiresAt.Add(-time.Second).Before(time.Now()) {
				t.Fatalf("closed before the token expired (%v)", payer.p.ExpiresAt)
			}
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 0 })
		})
	}
}

func TestWebsocketSubscriptionCap(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{MaxSubscriptionsPerConn: 3}})
	payer := h.device()
	ses, _ := h.session(payer)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, h.ws, proto)
			c.init(payer.token)
			for i := 1; i <= 3; i++ {
				c.subscribe(fmt.Sprint(i), sessionSub, map[string]any{"s": ses.ID})
			}
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 3 })
			c.subscribe("4", sessionSub, map[string]any{"s": ses.ID})
			if code := c.failure("4", 10*time.Second); code != "limit_exceeded" {
				t.Fatalf("4th subscription: %q, want limit_exceeded", code)
			}
			// Stopping one frees its place.
			c.stop("1")
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 2 })
			c.subscribe("5", sessionSub, map[string]any{"s": ses.ID})
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 3 })
			c.stop("2")
			c.stop("3")
			c.stop("5")
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 0 })
		})
	}
}

func TestWebsocketMessageTooBig(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	c := dialWS(t, h.ws, transportWS)
	c.init(h.device().token)
	big := strings.Repeat("x", 2<<20)
	c.subscribe("1", `subscription { voucherUpdated(id: "`+big+`") { id } }`, nil)
	if code, _ := c.closed(5 * time.Second); code != websocket.CloseMessageTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
}

func TestSubscriptionArguments(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer, other, user := h.device(), h.device(), h.user()
	ses, payee := h.session(payer)
	cases := []struct {
		name  string
		token string
		query string
		vars  map[string]any
		want  string
	}{
		{"no argument", payer.token, `subscription { voucherUpdated { id } }`, nil, "validation_failed"},
		{"two arguments", payer.token, `subscription($s: ID) { voucherUpdated(sessionId: $s, businessId: $s) { id } }`, map[string]any{"s": ses.ID}, "validation_failed"},
		{"anonymous", "", sessionSub, map[string]any{"s": ses.ID}, "unauthorized"},
		{"someone else's session", other.token, sessionSub, map[string]any{"s": ses.ID}, "not_found"},
		{"payee on the payer's session", payee.token, sessionSub, map[string]any{"s": ses.ID}, "forbidden"},
		{"unknown voucher", payer.token, `subscription { voucherUpdated(id: "vch_nope") { id } }`, nil, "not_found"},
		{"business with a device token", payer.token, `subscription { voucherUpdated(businessId: "biz_x") { id } }`, nil, "forbidden"},
		{"business of which not a member", user.token, `subscription { voucherUpdated(businessId: "biz_x") { id } }`, nil, "not_found"},
	}
	for _, proto := range protocols {
		c := dialWS(t, h.ws, proto)
		c.init("")
		authed := dialWS(t, h.ws, proto)
		for i, tc := range cases {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				conn := c
				if tc.token != "" {
					conn = dialWS(t, h.ws, proto)
					conn.init(tc.token)
				}
				id := fmt.Sprint(i)
				conn.subscribe(id, tc.query, tc.vars)
				if code := conn.failure(id, 2*time.Second); code != tc.want {
					t.Fatalf("code %q, want %q", code, tc.want)
				}
			})
		}
		_ = authed
	}
	if n := h.hub.Stats().Subscriptions; n != 0 {
		t.Fatalf("refused subscriptions left %d in the hub", n)
	}
}

func TestOperationsStayOnTheirTransport(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, _ := h.session(payer)

	t.Run("subscription over POST", func(t *testing.T) {
		start := time.Now()
		_, r := h.post(payer.token, sessionSub, map[string]any{"s": ses.ID})
		if r.code() != "validation_failed" || time.Since(start) > 2*time.Second {
			t.Fatalf("got %s after %v", r.raw, time.Since(start))
		}
	})
	t.Run("mutation over GET", func(t *testing.T) {
		q := url.Values{"query": {`mutation { createSession { id } }`}}
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/graphql?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+payer.token)
		status, r := h.do(req)
		if status != http.StatusMethodNotAllowed || r.code() != "method_not_allowed" || r.Data != nil {
			t.Fatalf("got %d %s, want 405 method_not_allowed without data", status, r.raw)
		}
		n, err := h.db.VoucherSession.Query().Count(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("sessions after refused mutation: %d %v", n, err)
		}
	})
	t.Run("query over GET", func(t *testing.T) {
		q := url.Values{"query": {`{ voucherSession(id: "` + ses.ID + `") { id } }`}}
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/graphql?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+payer.token)
		if _, r := h.do(req); len(r.Errors) > 0 || !strings.Contains(string(r.Data), ses.ID) {
			t.Fatalf("got %s", r.raw)
		}
	})
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	big := `{"query":"{ viewer { id } }","variables":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprint("chunked=", chunked), func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if chunked {
				body = io.MultiReader(strings.NewReader(big)) // hides the length
			}
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", body)
			req.Header.Set("Content-Type", "application/json")
			status, r := h.do(req)
			if status != http.StatusRequestEntityTooLarge || r.Code != "payload_too_large" {
				t.Fatalf("got %d %.200s", status, r.raw)
			}
		})
	}
	t.Run("malformed body does not echo it", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", strings.NewReader(`{"query": "mutation { signIn }", "password": "hunter2hunter2`))
		req.Header.Set("Content-Type", "application/json")
		_, r := h.do(req)
		if r.code() != "validation_failed" || strings.Contains(string(r.raw), "hunter2") {
			t.Fatalf("got %s", r.raw)
		}
	})
}

func TestIntrospectionAndGraphiQLOnlyInDevelopment(t *testing.T) {
	for _, dev := range []bool{false, true} {
		t.Run(fmt.Sprint("development=", dev), func(t *testing.T) {
			h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{Development: dev}})
			_, r := h.post("", `{ __schema { queryType { name } } }`, nil)
			if got := len(r.Errors) == 0; got != dev {
				t.Fatalf("introspection answered=%v: %s", got, r.raw)
			}
			if !dev && r.code() != "validation_failed" {
				t.Fatalf("refused introspection code %q", r.code())
			}
			resp, err := http.Get(h.srv.URL + "/graphiql")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.StatusCode == 200; got != dev {
				t.Fatalf("GET /graphiql: %d", resp.StatusCode)
			}
		})
	}
}

func TestComplexityAndDepthLimits(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	page := `vouchers(first: 100) { edges { cursor node { id code status type version sessionId businessId expiresAt createdAt updatedAt exchangeRate discardReason
		expectedPayment { id network currency currencyAddress amount wallet { address } }
		suppliedPayment { id network currency currencyAddress amount wallet { address } } } } pageInfo { hasNextPage endCursor } }`
	cases := []struct {
		name, query string
		ok          bool
	}{
		{"a full page of vouchers", "{ " + page + " }", true},
		{"two full pages", "{ a: " + page + " b: " + page + " }", false},
		{"more ids than a page", `{ nodes(ids: [` + strings.Repeat(`"vch_x",`, 101) + `]) { id } }`, false},
		{"a page of ids", `{ nodes(ids: [` + strings.Repeat(`"vch_x",`, 100) + `]) { id } }`, true},
		{"page too large", `{ vouchers(first: 101) { edges { node { id } } } }`, false},
		{"first and last", `{ vouchers(first: 1, last: 1) { edges { node { id } } } }`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, r := h.post(payer.token, tc.query, nil)
			if ok := len(r.Errors) == 0; ok != tc.ok {
				t.Fatalf("ok=%v: %.300s", ok, r.raw)
			}
			if !tc.ok && r.code() != "validation_failed" {
				t.Fatalf("code %q: %.300s", r.code(), r.raw)
			}
		})
	}
	t.Run("depth", func(t *testing.T) {
		q := "query { vouchers { edges { node { expectedPayment { wallet { address } } } } } }"
		if _, r := h.post(payer.token, q, nil); len(r.Errors) > 0 {
			t.Fatalf("depth 6 refused: %s", r.raw)
		}
		h5 := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{DepthLimit: 5}})
		if _, r := h5.post(h5.device().token, q, nil); r.code() != "validation_failed" {
			t.Fatalf("depth 6 with limit 5: %s", r.raw)
		}
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutines waits for the goroutine count to settle at or below n.
func goroutines(t testing.TB, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Queries and mutations run over the websocket too (one result, then
// complete); the GET of the upgrade does not make them GET requests.
func TestWebsocketRunsQueriesAndMutations(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, h.ws, proto)
			c.init(payer.token)
			c.subscribe("m", `mutation { createSession { id status } }`, nil)
			var created struct{ CreateSession struct{ ID, Status string } }
			c.result("m", 3*time.Second, &created)
			if created.CreateSession.Status != "ACTIVE" {
				t.Fatalf("createSession over %s: %+v", proto, created)
			}
			if m := c.next(2 * time.Second); m.Type != "complete" || m.ID != "m" {
				t.Fatalf("want complete, got %s %s", m.Type, m.ID)
			}
			c.subscribe("q", `query($id: ID!) { voucherSession(id: $id) { id } }`, map[string]any{"id": created.CreateSession.ID})
			var read struct{ VoucherSession struct{ ID string } }
			c.result("q", 3*time.Second, &read)
			if read.VoucherSession.ID != created.CreateSession.ID {
				t.Fatalf("voucherSession: %+v", read)
			}
			if m := c.next(2 * time.Second); m.Type != "complete" || m.ID != "q" {
				t.Fatalf("want complete, got %s %s", m.Type, m.ID)
			}
			// A document that does not validate ends with an error message.
			c.subscribe("bad", `{ nope }`, nil)
			if code := c.failure("bad", 2*time.Second); code != "validation_failed" {
				t.Fatalf("invalid document: %q", code)
			}
		})
	}
	t.Run("protocol violations", func(t *testing.T) {
		c := dialWS(t, h.ws, transportWS)
		c.send(wsMsg{Type: "subscribe", ID: "1", Payload: payload(map[string]any{"query": "{ __typename }"})})
		if code, _ := c.closed(2 * time.Second); code != 4401 {
			t.Fatalf("subscribe before connection_init: %d, want 4401", code)
		}
		c = dialWS(t, h.ws, transportWS)
		c.init(payer.token)
		c.sendInit(payer.token)
		if code, _ := c.closed(2 * time.Second); code != 4429 {
			t.Fatalf("second connection_init: %d, want 4429", code)
		}
		c = dialWS(t, h.ws, transportWS)
		c.init(payer.token)
		ses, _ := h.session(payer)
		c.subscribe("dup", sessionSub, map[string]any{"s": ses.ID})
		c.subscribe("dup", sessionSub, map[string]any{"s": ses.ID})
		if code, _ := c.closed(2 * time.Second); code != 4409 {
			t.Fatalf("duplicate id: %d, want 4409", code)
		}
	})
}
