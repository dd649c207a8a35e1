package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testnats"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// Rate limits against the real binary, with the spec's limits switched on
// (testserver turns them off by default).

var specLimits = map[string]string{"VOUCHER_RATE_LIMITS": "spec", "VOUCHER_JWT_SECRET": testSecret}

// badSignIn fails validation at once (no password hashing), so these tests
// measure the limiter, not argon2. The limit is checked before the body is
// read, so it costs a unit all the same.
var badSignIn = map[string]any{"type": "mobile-device", "data": map[string]any{}}

var rateLimitRE = regexp.MustCompile(`^"auth";r=(\d+);t=(\d+)$`)

// The check: the sixth sign-in in five minutes from one client gets
// 429 with Retry-After and both IETF fields; every allowed one carries the
// fields too, counting down.
func TestRateLimitSignIn(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: specLimits})
			dev := srv.Device(t) // sign-up: a budget of its own
			creds := map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": dev.InstallationID, "password": dev.Password}}
			for i := 1; i <= 5; i++ {
				r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", creds)
				if r.Status != 200 {
					t.Fatalf("sign-in %d: %d %s", i, r.Status, r.Body)
				}
				if got := r.Header.Get("RateLimit-Policy"); got != `"auth";q=5;w=300` {
					t.Fatalf("sign-in %d: RateLimit-Policy %q", i, got)
				}
				m := rateLimitRE.FindStringSubmatch(r.Header.Get("RateLimit"))
				if m == nil || m[1] != strconv.Itoa(5-i) {
					t.Fatalf("sign-in %d: RateLimit %q, want r=%d", i, r.Header.Get("RateLimit"), 5-i)
				}
				if r.Header.Get("Retry-After") != "" {
					t.Fatalf("sign-in %d: Retry-After on a success", i)
				}
			}
			r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", creds)
			if r.Status != http.StatusTooManyRequests || r.Code() != "rate_limit" {
				t.Fatalf("sixth sign-in: %d %s", r.Status, r.Body)
			}
			ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 300 {
				t.Fatalf("Retry-After %q, want 1..300 (the window)", r.Header.Get("Retry-After"))
			}
			if got := r.Header.Get("RateLimit-Policy"); got != `"auth";q=5;w=300` {
				t.Fatalf("429 RateLimit-Policy %q", got)
			}
			m := rateLimitRE.FindStringSubmatch(r.Header.Get("RateLimit"))
			if m == nil || m[1] != "0" || m[2] != strconv.Itoa(ra) {
				t.Fatalf("429 RateLimit %q, want r=0;t=%d", r.Header.Get("RateLimit"), ra)
			}

			// The GraphQL twin is refused: same budget.
			res := srv.Do(t, "POST", "/graphql", "", map[string]any{
				"query":     `mutation($in: CredentialsInput!) { signIn(input: $in) { authorization { token } } }`,
				"variables": map[string]any{"in": creds},
			})
			g := gqlResult(t, res)
			if g.ErrorCode() != "rate_limit" {
				t.Fatalf("GraphQL signIn after the REST budget: %s", res.Body)
			}
			if v, _ := g.Errors[0].Extensions["retryAfter"].(float64); v < 1 || v > 300 {
				t.Fatalf("retryAfter %v", g.Errors[0].Extensions["retryAfter"])
			}
			if res.Header.Get("Retry-After") == "" || !strings.HasPrefix(res.Header.Get("RateLimit"), `"auth";r=0;`) {
				t.Fatalf("GraphQL response headers %v", res.Header)
			}

			// Budgets are per endpoint: sign-up still has its own.
			if r := srv.Do(t, "POST", "/api/v1/auth/sign-up", "", badSignIn); r.Status == http.StatusTooManyRequests {
				t.Fatalf("sign-up spent by sign-ins: %s", r.Body)
			}
		})
	}
}

// Aliases count one by one, and spend the REST twin's budget.
func TestRateLimitGraphQLAliases(t *testing.T) {
	// Six password checks in one mutation take more than the default
	// 1 s time budget on a loaded machine; this test is about the budget
	// of rate limits.
	env := map[string]string{"VOUCHER_GRAPHQL_TIME_BUDGET": "20s"}
	for k, v := range specLimits {
		env[k] = v
	}
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: env})
	dev := srv.Device(t)
	creds := map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": dev.InstallationID, "password": dev.Password}}
	var doc strings.Builder
	doc.WriteString("mutation($in: CredentialsInput!) {")
	for i := range 6 {
		fmt.Fprintf(&doc, " a%d: signIn(input: $in) { authorization { token } }", i)
	}
	doc.WriteString(" }")
	res := srv.Do(t, "POST", "/graphql", "", map[string]any{"query": doc.String(), "variables": map[string]any{"in": creds}})
	g := gqlResult(t, res)
	limited := 0
	for _, e := range g.Errors {
		if e.Extensions["code"] == "rate_limit" {
			limited++
		}
	}
	// A mutation field is non-null, so one refusal nulls the whole data;
	// what counts is that exactly one of six was refused.
	if limited != 1 || len(g.Errors) != 1 {
		t.Fatalf("six aliased signIn: %d refused, errors %+v, want exactly 1", limited, g.Errors)
	}
	if !strings.Contains(res.Header.Get("RateLimit"), `"auth";r=0;`) || res.Header.Get("Retry-After") == "" {
		t.Fatalf("headers %v", res.Header)
	}
	r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", creds)
	if r.Status != http.StatusTooManyRequests || r.Code() != "rate_limit" {
		t.Fatalf("REST sign-in after the GraphQL aliases: %d %s", r.Status, r.Body)
	}

	// Queries too: voucherSession spends the REST get-session budget
	// (vouchers read, 10), counted per alias.
	sesID, _ := srv.Session(t, dev)
	for i := 0; i < 9; i++ {
		if r := srv.Do(t, "GET", "/api/v1/vouchers/sessions/"+sesID, dev.Token, nil); r.Status != 200 {
			t.Fatalf("get-session %d: %d %s", i, r.Status, r.Body)
		}
	}
	g = srv.GraphQL(t, dev.Token, `query($id: ID!) { a: voucherSession(id: $id) { id } b: voucherSession(id: $id) { id } }`, map[string]any{"id": sesID})
	var sess struct{ A, B *struct{ ID string } }
	_ = json.Unmarshal(g.Data, &sess)
	if sess.A == nil && sess.B == nil || sess.A != nil && sess.B != nil || g.ErrorCode() != "rate_limit" {
		t.Fatalf("two aliases with one unit left: data %s errors %+v", g.Data, g.Errors)
	}
	if r := srv.Do(t, "GET", "/api/v1/vouchers/sessions/"+sesID, dev.Token, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("get-session after the GraphQL reads: %d", r.Status)
	}
	// node(id:) of a session costs a get-session as well.
	g = srv.GraphQL(t, dev.Token, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": sesID})
	if g.ErrorCode() != "rate_limit" {
		t.Fatalf("node(id:) on a spent get-session budget: %s %+v", g.Data, g.Errors)
	}
}

// 100 concurrent requests against a budget of 5 give exactly 5, on both
// databases (the PostgreSQL budget is one row every connection races for).
func TestRateLimitConcurrent(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: specLimits})
			clearOfWindowEdge(t, 300*time.Second)
			statuses := burst(t, []*testserver.Server{srv}, 100)
			if statuses[http.StatusTooManyRequests] != 95 || statuses[http.StatusBadRequest] != 5 {
				t.Fatalf("statuses %v, want 5×400 (let through) and 95×429", statuses)
			}
		})
	}
}

// Two replicas on one PostgreSQL draw on one budget, also when hit at once
// (on either cross-replica transport: budgets live in the database).
func TestRateLimitReplicasShareBudget(t *testing.T) {
	for _, transport := range testnats.Transports {
		t.Run(transport, func(t *testing.T) {
			env := testnats.Env(t, transport)
			for k, v := range specLimits {
				env[k] = v
			}
			a := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, Env: env})
			b := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, DatabaseURL: a.DatabaseURL, Env: env})
			for i, srv := range []*testserver.Server{a, b, a, b, a} {
				if r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", badSignIn); r.Status != http.StatusBadRequest {
					t.Fatalf("sign-in %d: %d %s", i+1, r.Status, r.Body)
				}
			}
			for name, srv := range map[string]*testserver.Server{"a": a, "b": b} {
				if r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", badSignIn); r.Status != http.StatusTooManyRequests {
					t.Fatalf("replica %s after five across both: %d %s", name, r.Status, r.Body)
				}
			}

			// At once: a budget of 5 (create-session, per token) split over both.
			dev := a.Device(t)
			clearOfWindowEdge(t, 300*time.Second)
			statuses := burstDo(t, []*testserver.Server{a, b}, 60, func(srv *testserver.Server) int {
				return status(srv, "POST", "/api/v1/vouchers/sessions/create-session", dev.Token, nil)
			})
			if statuses[http.StatusOK] != 5 || statuses[http.StatusTooManyRequests] != 55 {
				t.Fatalf("statuses %v, want 5×200 and 55×429", statuses)
			}
		})
	}
}

func TestRateLimitModes(t *testing.T) {
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: map[string]string{"VOUCHER_RATE_LIMITS": "off"}})
		for i := range 30 {
			r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", badSignIn)
			if r.Status == http.StatusTooManyRequests || r.Header.Get("RateLimit") != "" || r.Header.Get("RateLimit-Policy") != "" {
				t.Fatalf("request %d with limits off: %d %v", i+1, r.Status, r.Header)
			}
		}
	})
	t.Run("Multiplier", func(t *testing.T) {
		t.Parallel()
		srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: map[string]string{"VOUCHER_RATE_LIMITS": "3"}})
		for i := 1; i <= 16; i++ {
			r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", badSignIn)
			want := http.StatusBadRequest
			if i == 16 {
				want = http.StatusTooManyRequests
			}
			if r.Status != want {
				t.Fatalf("request %d with limits ×3: %d, want %d", i, r.Status, want)
			}
			if got := r.Header.Get("RateLimit-Policy"); got != `"auth";q=15;w=300` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, testserver.Binary(t))
		cmd.Env = []string{"VOUCHER_RATE_LIMITS=lots", "VOUCHER_DATABASE_URL=sqlite://" + t.TempDir() + "/x.db", "VOUCHER_ADDR=127.0.0.1:0"}
		b, err := cmd.CombinedOutput()
		if out := string(b); err == nil || !strings.Contains(out, "VOUCHER_RATE_LIMITS") {
			t.Fatalf("VOUCHER_RATE_LIMITS=lots started or gave no reason: %v\n%s", err, out)
		}
	})
}

// Websocket connections are capped per token subject (8 with the spec's
// limits); the ninth is closed with 4429, and a slot comes back when a
// connection ends.
func TestRateLimitWebsocketConnections(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: specLimits})
	dev := srv.Device(t)
	var conns []*websocket.Conn
	for i := range 8 {
		c, err := wsInit(srv, dev.Token)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	_, err := wsInit(srv, dev.Token)
	var ce *websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != 4429 {
		t.Fatalf("ninth connection: %v, want close 4429", err)
	}
	// Another caller is not affected.
	other := srv.Device(t)
	c, err := wsInit(srv, other.Token)
	if err != nil {
		t.Fatalf("another caller: %v", err)
	}
	c.Close()

	conns[0].Close()
	conns = conns[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := wsInit(srv, dev.Token)
		if err == nil {
			conns = append(conns, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after closing a connection: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The per-address cap refuses the upgrade itself with a 429.
func TestRateLimitWebsocketPerAddress(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: specLimits})
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 32 {
		c, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	_, resp, err := d.Dial(url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("33rd connection from one address: %v %v", err, resp)
	}
	if resp.Header.Get("Retry-After") == "" || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `q=32;qu="concurrent-requests"`) {
		t.Fatalf("429 headers %v", resp.Header)
	}
}

func wsInit(srv *testserver.Server, token string) (*websocket.Conn, error) {
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(url, nil)
	if err != nil {
		return nil, err
	}
	if err := c.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}}); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var msg struct{ Type string }
	if err := c.ReadJSON(&msg); err != nil {
		c.Close()
		return nil, err
	}
	if msg.Type != "connection_ack" {
		c.Close()
		return nil, fmt.Errorf("got %q, want connection_ack", msg.Type)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, nil
}

func asCloseError(err error, target **websocket.CloseError) bool {
	ce, ok := err.(*websocket.CloseError)
	if ok {
		*target = ce
	}
	return ok
}

// burst fires n bad sign-ins at once, spread over servers, and counts statuses.
func burst(t *testing.T, servers []*testserver.Server, n int) map[int]int {
	return burstDo(t, servers, n, func(srv *testserver.Server) int {
		return status(srv, "POST", "/api/v1/auth/sign-in", "", badSignIn)
	})
}

// status sends one request without touching t (it runs on other
// goroutines): -1 stands for a transport error, which fails the count.
func status(srv *testserver.Server, method, path, token string, body any) int {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		return -1
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// clearOfWindowEdge waits, when the next boundary of window (budgets use
// fixed windows aligned to the Unix epoch, internal/ratelimit) is less than
// 30 s away, until it has passed: a burst that straddles a boundary spends
// two windows' budgets and is rightly let through twice (CI, loaded, saw a
// 7 s burst of 100 give 10×400 on PostgreSQL).
func clearOfWindowEdge(t *testing.T, window time.Duration) {
	t.Helper()
	ns := time.Now().UnixNano()
	if left := time.Duration(int64(window) - ns%int64(window)); left < 30*time.Second {
		t.Logf("waiting %s for the rate-limit window to turn", left.Round(time.Millisecond))
		time.Sleep(left + 100*time.Millisecond)
	}
}

// burstDo runs do n times at once, spread over servers, and counts the
// statuses it returns.
func burstDo(t *testing.T, servers []*testserver.Server, n int, do func(*testserver.Server) int) map[int]int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		out   = map[int]int{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := do(servers[i%len(servers)])
			mu.Lock()
			out[s]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func gqlResult(t *testing.T, r *testserver.Response) *testserver.GraphQLResult {
	t.Helper()
	var g testserver.GraphQLResult
	if err := json.Unmarshal(r.Body, &g); err != nil {
		t.Fatalf("graphql response %d %s: %v", r.Status, r.Body, err)
	}
	return &g
}
