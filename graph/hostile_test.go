package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/ratelimit"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// The two documents that held a core for seconds to minutes, sent
// unauthenticated, each under 60 KiB: fragments spreading the next one
// twice (the depth and cost walks expanded every spread again), and one
// field repeated (validation's overlapping-fields rule compares every
// pair). Both are now refused in milliseconds, while other requests are
// served.
func hostileDocuments() map[string]string {
	var bomb strings.Builder
	bomb.WriteString("query { ...F0 }\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&bomb, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
	}
	bomb.WriteString("fragment F40 on Query { viewer { id } }\n")
	return map[string]string{
		"fragment spreads doubling":  bomb.String(),
		"repeated identical fields":  "{" + strings.Repeat(" viewer { __typename }", 2700) + " }",
		"repeated fields in 30 KiB":  "{" + strings.Repeat(" viewer { __typename }", 1400) + " }",
		"repeated fields in aliases": "{" + strings.Repeat(" a: viewer { id } a: viewer { id }", 1000) + " }",
	}
}

func TestHostileDocumentsAreRefusedQuickly(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			h := newHarness(t, dialect, harnessOptions{})
			payer := h.device()
			for name, q := range hostileDocuments() {
				t.Run(name, func(t *testing.T) {
					if len(q) >= 60<<10 {
						t.Fatalf("%d bytes", len(q))
					}
					// Another caller is served while the document is refused.
					var wg sync.WaitGroup
					wg.Add(1)
					var otherErr string
					go func() {
						defer wg.Done()
						start := time.Now()
						if _, r := h.post(payer.token, `{ viewer { id } }`, nil); len(r.Errors) > 0 || time.Since(start) > time.Second {
							otherErr = fmt.Sprintf("%v %s", time.Since(start), r.raw)
						}
					}()
					start := time.Now()
					status, r := h.post("", q, nil)
					took := time.Since(start)
					wg.Wait()
					if took > time.Second {
						t.Fatalf("answered after %v", took)
					}
					if status != http.StatusOK || r.code() != "validation_failed" {
						t.Fatalf("%d %.300s", status, r.raw)
					}
					if otherErr != "" {
						t.Fatalf("the other request: %s", otherErr)
					}
				})
			}
		})
	}
}

// A refused document spends budget: once it is spent, the caller is
// answered 429 rate_limit, with the RateLimit headers, before any work.
func TestRefusedDocumentsSpendRateLimit(t *testing.T) {
	mode, err := ratelimit.ParseMode("spec")
	if err != nil {
		t.Fatal(err)
	}
	cip, _ := httpx.NewClientIP(nil)
	gate := ratelimit.NewGate(ratelimit.New(nil, mode.Table(), nil), mode, cip)
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{RateLimit: gate}})
	q := hostileDocuments()["repeated identical fields"]
	limit := ratelimit.SpecTable()[ratelimit.VouchersRead].Limit
	for i := 0; i < limit; i++ {
		if status, r := h.post("", q, nil); status != http.StatusOK || r.code() != "validation_failed" {
			t.Fatalf("refusal %d: %d %.200s", i, status, r.raw)
		}
	}
	for name, body := range map[string]string{
		"hostile document": q,
		"parse error":      "{",
		"unknown field":    "{ nope }",
	} {
		b, _ := jsonBody(body)
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("%s after the budget: %d %v", name, resp.StatusCode, resp.Header)
		}
	}
	// A body breaking the text rules is refused and charged the same way.
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", strings.NewReader(`{"query":"{ viewer { id } }","query":"{ x }"}`))
	req.Header.Set("Content-Type", "application/json")
	if _, r := h.do(req); r.code() != "rate_limit" {
		t.Fatalf("repeated key after the budget: %s", r.raw)
	}
}

func jsonBody(query string) ([]byte, error) {
	return []byte(fmt.Sprintf(`{"query":%q}`, query)), nil
}

// A query that does not finish within its time budget is answered when
// the budget ends (unavailable), over HTTP and over a websocket.
func TestTimeBudget(t *testing.T) {
	slow := func(ctx context.Context, next graphql.Resolver) (any, error) {
		if fc := graphql.GetFieldContext(ctx); fc != nil && fc.Field.Name == "viewer" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return next(ctx)
	}
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.WithFieldHook(graph.Options{TimeBudget: 300 * time.Millisecond}, slow)})
	payer := h.device()
	start := time.Now()
	_, r := h.post(payer.token, `{ viewer { id } }`, nil)
	if d := time.Since(start); d > time.Second || r.code() != "unavailable" {
		t.Fatalf("HTTP: %v %s", d, r.raw)
	}
	c := dialWS(t, h.ws, transportWS)
	c.init(payer.token)
	start = time.Now()
	c.subscribe("1", `{ viewer { id } }`, nil)
	if code := c.failure("1", 5*time.Second); code != "unavailable" || time.Since(start) > time.Second {
		t.Fatalf("websocket: %v %s", time.Since(start), code)
	}
}

// Text rules on the GraphQL door: a NUL or invalid UTF-8 in a string
// argument (escaped in the document), a variable, or the body is
// validation_failed; a repeated JSON key too.
func TestGraphQLTextRules(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	for name, body := range map[string]string{
		"escaped NUL in an id":    `{"query":"{ voucher(id: \"vch_\\u0000\") { id } }"}`,
		"NUL in the document":     `{"query":"{ voucher(id: \"vch_\u0000\") { id } }"}`,
		"NUL in a variable":       `{"query":"query($id: ID!) { voucher(id: $id) { id } }","variables":{"id":"vch_\u0000"}}`,
		"invalid UTF-8 variable":  "{\"query\":\"query($id: ID!) { voucher(id: $id) { id } }\",\"variables\":{\"id\":\"vch_\xff\"}}",
		"lone surrogate variable": `{"query":"query($id: ID!) { voucher(id: $id) { id } }","variables":{"id":"\ud800"}}`,
		"repeated key":            `{"query":"{ viewer { id } }","variables":{"a":1,"a":2}}`,
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+payer.token)
			status, r := h.do(req)
			if r.code() != "validation_failed" || (status != http.StatusOK && status != http.StatusBadRequest) {
				t.Fatalf("%d %s", status, r.raw)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+`/graphql?query=%7B+voucher(id:+"vch_%00")+%7B+id+%7D+%7D`, nil)
	if status, r := h.do(req); status != http.StatusBadRequest || r.code() != "validation_failed" {
		t.Fatalf("GET with NUL: %d %s", status, r.raw)
	}
}

// A token given in the upgrade request's Authorization header (no token
// in connection_init) ends the socket at its expiry too: 4403, the
// subscription gone, and no query answered after.
func TestWebsocketHeaderTokenExpires(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{tokenTTL: 2 * time.Second})
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			payer := h.device()
			ses, _ := h.session(payer)
			d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
			conn, _, err := d.Dial(h.ws, http.Header{"Authorization": {"Bearer " + payer.token}})
			if err != nil {
				t.Fatal(err)
			}
			c := &wsClient{t: t, proto: proto, conn: conn, msgs: make(chan wsMsg, 256), done: make(chan struct{})}
			go c.read()
			t.Cleanup(func() { _ = conn.Close() })
			c.init("")
			// The header's principal is the caller: it may follow its session.
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

// Websocket messages breaking the text rules (NUL, invalid UTF-8, a lone
// surrogate, a repeated key, in the payload or in the message itself)
// are refused like HTTP bodies, and charged to the same budget as refused
// documents: a subscribe fails with validation_failed, any other message
// closes the socket (4400); once the budget is spent the refusal is
// rate_limit, and the caller's refused HTTP documents are 429 too.
func TestWebsocketTextRulesSpendRateLimit(t *testing.T) {
	mode, err := ratelimit.ParseMode("spec")
	if err != nil {
		t.Fatal(err)
	}
	cip, _ := httpx.NewClientIP(nil)
	gate := ratelimit.NewGate(ratelimit.New(nil, mode.Table(), nil), mode, cip)
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{RateLimit: gate}})
	payer := h.device()
	refused := map[string]string{
		"NUL in a variable":           `{"type":"subscribe","id":"%s","payload":{"query":"query($id: ID!) { voucher(id: $id) { id } }","variables":{"id":"vch_\u0000"}}}`,
		"NUL escaped in the document": `{"type":"subscribe","id":"%s","payload":{"query":"{ voucher(id: \"vch_\\u0000\") { id } }"}}`,
		"invalid UTF-8":               "{\"type\":\"subscribe\",\"id\":\"%s\",\"payload\":{\"query\":\"{ viewer { id } }\",\"operationName\":\"\xff\"}}",
		"lone surrogate":              `{"type":"subscribe","id":"%s","payload":{"query":"{ viewer { id } }","variables":{"x":"\ud800"}}}`,
		"repeated key":                `{"type":"subscribe","id":"%s","payload":{"query":"{ viewer { id } }","variables":{"a":1,"a":2}}}`,
		"repeated payload":            `{"type":"subscribe","id":"%s","payload":{"query":"{ viewer { id } }"},"payload":{"query":"{ voucher(id: \"x\") { id } }"}}`,
	}
	limit := ratelimit.SpecTable()[ratelimit.VouchersRead].Limit
	if len(refused)+3 > limit {
		t.Fatalf("the budget (%d) leaves no room for the test", limit)
	}
	spent := 0
	for _, proto := range protocols {
		c := dialWS(t, h.ws, proto)
		c.init(payer.token)
		for name, msg := range refused {
			id := proto + " " + name
			if proto == legacyWS {
				msg = strings.Replace(msg, `"type":"subscribe"`, `"type":"start"`, 1)
			}
			c.sendRaw(fmt.Sprintf(msg, id))
			if code := refusal(c, id); code != "validation_failed" {
				t.Fatalf("%s: %s, want validation_failed", id, code)
			}
			spent++
			if spent == 2 {
				// The same message without the bad part is served.
				c.subscribe("fine", `{ viewer { id } }`, nil)
				var out struct{ Viewer struct{ ID string } }
				c.result("fine", 5*time.Second, &out)
				if out.Viewer.ID != payer.p.ID {
					t.Fatalf("control: %+v", out)
				}
				if m := c.next(5 * time.Second); m.Type != "complete" || m.ID != "fine" {
					t.Fatalf("control: %s %s", m.Type, m.ID)
				}
			}
			if spent == len(refused)+1 {
				break
			}
		}
	}
	// A refused message that is not a subscribe, or not JSON at all (a raw
	// NUL inside a string), breaks the protocol; it is charged all the same.
	for _, msg := range []string{`{"type":"ping","payload":{"a":1,"a":2}}`, "{\"type\":\"subscribe\",\"id\":\"raw\",\"payload\":{\"query\":\"{ viewer { id } }\x00\"}}"} {
		c := dialWS(t, h.ws, transportWS)
		c.init(payer.token)
		c.sendRaw(msg)
		if code, _ := c.closed(5 * time.Second); code != 4400 {
			t.Fatalf("%q: close %d, want 4400", msg, code)
		}
		spent++
	}
	c := dialWS(t, h.ws, transportWS)
	c.init(payer.token)
	for ; spent < limit; spent++ {
		id := fmt.Sprint("fill ", spent)
		c.sendRaw(fmt.Sprintf(refused["repeated key"], id))
		if code := refusal(c, id); code != "validation_failed" {
			t.Fatalf("%s: %s", id, code)
		}
	}
	c.sendRaw(fmt.Sprintf(refused["NUL in a variable"], "over"))
	if code := refusal(c, "over"); code != "rate_limit" {
		t.Fatalf("after the budget: %s, want rate_limit", code)
	}
	// The budget is the caller's, whatever the door.
	b, _ := jsonBody("{ nope }")
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+payer.token)
	if status, r := h.do(req); status != http.StatusTooManyRequests || r.code() != "rate_limit" {
		t.Fatalf("HTTP after the websocket spent the budget: %d %s", status, r.raw)
	}
}

// refusal is the code operation id was refused with (its error, then its
// complete, as gqlgen's websocket sends them).
func refusal(c *wsClient, id string) string {
	c.t.Helper()
	code := c.failure(id, 5*time.Second)
	if m := c.next(5 * time.Second); m.Type != "complete" || m.ID != id {
		c.t.Fatalf("after the error of %s: %s %s", id, m.Type, m.ID)
	}
	return code
}

// Refused documents are paced by address: after a refusal, the address's
// next GraphQL request waits a multiple of what the refused one took (999x
// here, so that it shows), at most MaxRefusalWait; other addresses and
// addresses whose documents pass do not wait. Over HTTP, one client on
// 127.0.0.1 and one on 127.0.0.2. Storage plays no part: SQLite only.
func TestRefusedDocumentsArePacedByAddress(t *testing.T) {
	const maxWait = 400 * time.Millisecond
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{RefusalShare: 0.001, MaxRefusalWait: maxWait}})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	attacker, other := from("127.0.0.1"), from("127.0.0.2")
	send := func(c *http.Client, query string) (string, time.Duration) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"query": query})
		start := time.Now()
		resp, err := c.Post(h.srv.URL+"/graphql", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if bytes.Contains(b, []byte(`"validation_failed"`)) {
			return "refused", took
		}
		if !bytes.Contains(b, []byte(`"__typename":"Query"`)) {
			t.Fatalf("answered %s", b)
		}
		return "served", took
	}
	hostile := hostileDocuments()["repeated fields in 30 KiB"]
	// Warm both connections: nothing owed yet, nobody waits.
	for _, c := range []*http.Client{attacker, other} {
		if got, took := send(c, `{ __typename }`); got != "served" || took > maxWait/4 {
			t.Fatalf("before any refusal: %s in %v", got, took)
		}
	}
	// The refusal itself is not delayed (lexing 7,000 tokens takes well
	// over the 0.1 ms that earns 100 ms here).
	if got, _ := send(attacker, hostile); got != "refused" {
		t.Fatal("the hostile document was not refused")
	}
	if got, took := send(other, `{ __typename }`); got != "served" || took > maxWait/4 {
		t.Fatalf("another address after the refusal: %s in %v", got, took)
	}
	if got, took := send(attacker, `{ __typename }`); got != "served" || took < 100*time.Millisecond || took > maxWait+time.Second {
		t.Fatalf("the refused address's next request: %s in %v, want 100ms to %v", got, took, maxWait)
	}
	// Paid: a document that passes earns no wait.
	if got, took := send(attacker, `{ __typename }`); got != "served" || took > maxWait/4 {
		t.Fatalf("after the wait: %s in %v", got, took)
	}
	// Many refusals at once owe at most MaxRefusalWait.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(attacker, hostile)
		}()
	}
	wg.Wait()
	if got, took := send(attacker, `{ __typename }`); got != "served" || took < maxWait/2 || took > maxWait+time.Second {
		t.Fatalf("after 8 refusals at once: %s in %v, want about %v", got, took, maxWait)
	}
}

// A time budget shorter than the wait an address owes ends the wait: the
// request is answered unavailable when its budget runs out, as a field out
// of time is, not left waiting nor answered empty.
func TestRefusalWaitEndsWithTheTimeBudget(t *testing.T) {
	const budget = 100 * time.Millisecond
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{RefusalShare: 0.001, MaxRefusalWait: 5 * time.Second, TimeBudget: budget}})
	if status, r := h.post("", hostileDocuments()["repeated fields in 30 KiB"], nil); status != http.StatusOK || r.code() != "validation_failed" {
		t.Fatalf("the hostile document: %d %s", status, r.raw)
	}
	start := time.Now()
	status, r := h.post("", `{ __typename }`, nil)
	took := time.Since(start)
	if status != http.StatusServiceUnavailable || r.code() != "unavailable" || took < budget || took > budget+time.Second {
		t.Fatalf("%d %s after %v", status, r.raw, took)
	}
}

// Operations sent on a websocket are paced like requests: after a refused
// one, the address's next operation waits (on its own goroutine: the
// socket goes on answering), and so does its next request over HTTP.
func TestRefusedOperationsOnAWebsocketArePaced(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{graph: graph.Options{RefusalShare: 0.001, MaxRefusalWait: 400 * time.Millisecond}})
	c := dialWS(t, h.ws, transportWS)
	c.init("")
	var out struct {
		Typename string `json:"__typename"`
	}
	completed := func(id string) {
		t.Helper()
		if m := c.next(5 * time.Second); m.Type != "complete" || m.ID != id {
			t.Fatalf("want complete for %s, got %s %s", id, m.Type, m.ID)
		}
	}
	start := time.Now()
	c.subscribe("warm", `{ __typename }`, nil)
	c.result("warm", 5*time.Second, &out)
	completed("warm")
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("before any refusal: %v", took)
	}
	c.subscribe("hostile", hostileDocuments()["repeated fields in 30 KiB"], nil)
	if code := c.failure("hostile", 5*time.Second); code != "validation_failed" {
		t.Fatalf("the hostile document: %s", code)
	}
	completed("hostile")
	start = time.Now()
	c.subscribe("next", `{ __typename }`, nil)
	c.result("next", 5*time.Second, &out)
	completed("next")
	if took := time.Since(start); took < 100*time.Millisecond || out.Typename != "Query" {
		t.Fatalf("the next operation: %q after %v, want at least 100ms", out.Typename, took)
	}
	c.subscribe("hostile2", hostileDocuments()["repeated fields in 30 KiB"], nil)
	if code := c.failure("hostile2", 5*time.Second); code != "validation_failed" {
		t.Fatalf("the second hostile document: %s", code)
	}
	start = time.Now()
	if status, r := h.post("", `{ __typename }`, nil); status != http.StatusOK || len(r.Errors) > 0 {
		t.Fatalf("%d %s", status, r.raw)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("the address's next request over HTTP: %v, want at least 100ms", took)
	}
}
