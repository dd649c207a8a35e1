package rest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/apiclient"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// hostileCase is one request of the catalogue.
type hostileCase struct {
	name   string
	method string
	path   string
	body   string // sent as is (JSON or not)
	token  string
	// status and code are what the service must answer; for GraphQL,
	// code is the first error's extensions.code (status is then 0 when
	// the door may answer 200 or 400 for a request error).
	status int
	code   string
	// raw sends the request with a plain client instead of the test
	// client, whose OpenAPI check of a 1 MiB request body costs the client
	// itself seconds under the race detector: the bound is on the
	// service's answer, not on the test's own validation.
	raw bool
}

// The hostile-input catalogue (issue 18, docs/hardening.md): every
// class of bad input, through both doors, against the binary on SQLite
// and PostgreSQL. Each request must be answered with its code within the
// time bound, and the stored state must be exactly what it was.
func TestHostileInputCatalogue(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{"VOUCHER_JWT_SECRET": testSecret}})
			payer := srv.Device(t)
			sesID, code := srv.Session(t, payer)
			payee := srv.Resource(t, code)
			vid := srv.Reserve(t, payee.Token, map[string]any{"code": code})
			user := srv.User(t)
			r := srv.Do(t, "POST", "/api/v1/businesses/create-business", user.Token, map[string]any{"name": "Shop"})
			if r.Status != 200 {
				t.Fatalf("create-business: %d %s", r.Status, r.Body)
			}
			bid, _ := r.Map(t)["id"].(string)

			redeem := `{"expectedPayment":{"network":"ethereum","currency":"USDC","currencyAddress":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48","amount":"1","wallet":{"address":"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"}}%s}`
			voucherQ := `"query($id: ID!) { voucher(id: $id) { id } }"`
			cases := []hostileCase{
				// NUL and invalid UTF-8, REST: bodies, path ids, query values.
				{name: "NUL in a sign-in field", method: "POST", path: "/api/v1/auth/sign-in", body: `{"type":"email-password","data":{"email":"a\u0000@example.com","password":"pw-12345678"}}`, status: 400, code: "validation_failed"},
				{name: "raw NUL in a sign-up field", method: "POST", path: "/api/v1/auth/sign-up", body: "{\"type\":\"mobile-device\",\"data\":{\"installationId\":\"x\x00\",\"password\":\"pw-12345678\"}}", status: 400, code: "validation_failed"},
				{name: "invalid UTF-8 in a sign-up field", method: "POST", path: "/api/v1/auth/sign-up", body: "{\"type\":\"email-password\",\"data\":{\"email\":\"\xff@example.com\",\"password\":\"pw-12345678\"}}", status: 400, code: "validation_failed"},
				{name: "lone surrogate in a business name", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"Shop \ud800"}`, status: 400, code: "validation_failed"},
				{name: "NUL in a business name", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"Shop\u0000"}`, status: 400, code: "validation_failed"},
				{name: "NUL in redeem extras", method: "POST", path: "/api/v1/vouchers/" + vid + "/redeem-voucher", token: payee.Token, body: fmt.Sprintf(redeem, `,"extras":[{"note":"a\u0000b"}]`), status: 400, code: "validation_failed"},
				{name: "NUL in a path id", method: "GET", path: "/api/v1/vouchers/vch_%00", token: payer.Token, status: 400, code: "validation_failed"},
				{name: "invalid UTF-8 in a path id", method: "POST", path: "/api/v1/vouchers/%ff%fe/discard-voucher", token: payee.Token, body: `{}`, status: 400, code: "validation_failed"},
				{name: "NUL in a session id", method: "POST", path: "/api/v1/vouchers/sessions/ses_%00/close-session", token: payer.Token, body: `{}`, status: 400, code: "validation_failed"},
				{name: "NUL in a business id", method: "GET", path: "/api/v1/businesses/" + bid + "%00", token: user.Token, status: 400, code: "validation_failed"},
				{name: "NUL in a query value", method: "GET", path: "/api/v1/vouchers?sessionId=ses%00", token: payer.Token, status: 400, code: "validation_failed"},
				{name: "invalid UTF-8 in a query value", method: "GET", path: "/api/v1/finance/currencies?network=%ff", status: 400, code: "validation_failed"},
				{name: "NUL in interop-init's id", method: "POST", path: "/api/v1/vouchers/" + vid + "/submit/interop-init?id=a%00", token: payer.Token, body: `{}`, status: 400, code: "validation_failed"},
				// Repeated keys.
				{name: "repeated key", method: "POST", path: "/api/v1/vouchers/" + vid + "/redeem-voucher", token: payee.Token, body: fmt.Sprintf(redeem, `,"expectedPayment":{}`), status: 400, code: "validation_failed"},
				{name: "repeated nested key", method: "POST", path: "/api/v1/vouchers/" + vid + "/redeem-voucher", token: payee.Token, body: strings.Replace(fmt.Sprintf(redeem, ""), `"amount":"1"`, `"amount":"1","amount":"1000"`, 1), status: 400, code: "validation_failed"},
				{name: "repeated key after unescaping", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"A","n\u0061me":"B"}`, status: 400, code: "validation_failed"},
				// The existing bad-input classes.
				{name: "not JSON", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":`, status: 400, code: "validation_failed"},
				{name: "unknown field", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"A","owner":"me"}`, status: 400, code: "validation_failed"},
				{name: "two JSON values", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"A"} {"name":"B"}`, status: 400, code: "validation_failed"},
				{name: "deep nesting", method: "POST", path: "/api/v1/vouchers/" + vid + "/redeem-voucher", token: payee.Token, body: fmt.Sprintf(redeem, `,"extras":[`+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`]`), status: 400, code: "validation_failed"},
				{name: "body over 1 MiB", method: "POST", path: "/api/v1/businesses/create-business", token: user.Token, body: `{"name":"` + strings.Repeat("a", 1<<20) + `"}`, status: 413, code: "payload_too_large", raw: true},
				{name: "no token", method: "POST", path: "/api/v1/businesses/create-business", body: `{"name":"A"}`, status: 401, code: "unauthorized"},
				{name: "a stranger's voucher", method: "POST", path: "/api/v1/vouchers/" + vid + "/discard-voucher", token: srv.Device(t).Token, body: `{}`, status: 404, code: "not_found"},
				{name: "wrong method", method: "DELETE", path: "/api/v1/vouchers/" + vid, token: payer.Token, status: 405, code: "method_not_allowed"},

				// The GraphQL door.
				{name: "GraphQL: escaped NUL in an id", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"{ voucher(id: \"vch_\\u0000\") { id } }"}`, code: "validation_failed"},
				{name: "GraphQL: NUL in a variable", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":` + voucherQ + `,"variables":{"id":"` + vid + `\u0000"}}`, code: "validation_failed"},
				{name: "GraphQL: invalid UTF-8 in a variable", method: "POST", path: "/graphql", token: payer.Token, body: "{\"query\":" + voucherQ + ",\"variables\":{\"id\":\"\xc3\"}}", code: "validation_failed"},
				{name: "GraphQL: NUL in signIn", method: "POST", path: "/graphql", body: `{"query":"mutation($e: String!) { signIn(input: {type: \"email-password\", data: {email: $e, password: \"pw-12345678\"}}) { authorization { token } } }","variables":{"e":"a\u0000@example.com"}}`, code: "validation_failed"},
				// Controls: the same requests without the NUL reach the service.
				{name: "GraphQL: signIn without NUL", method: "POST", path: "/graphql", body: `{"query":"mutation($e: String!) { signIn(input: {type: \"email-password\", data: {email: $e, password: \"pw-12345678\"}}) { authorization { token } } }","variables":{"e":"a@example.com"}}`, code: "invalid_credentials"},
				{name: "sign-in without NUL", method: "POST", path: "/api/v1/auth/sign-in", body: `{"type":"email-password","data":{"email":"a@example.com","password":"pw-12345678"}}`, status: 400, code: "invalid_credentials"},
				{name: "GraphQL: NUL in createBusiness", method: "POST", path: "/graphql", token: user.Token, body: `{"query":"mutation { createBusiness(input: {name: \"S\\u0000\"}) { id } }"}`, code: "validation_failed"},
				{name: "GraphQL: NUL in closeSession's id", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"mutation($id: ID!) { closeSession(id: $id) { id } }","variables":{"id":"` + sesID + `\u0000"}}`, code: "validation_failed"},
				{name: "GraphQL: NUL in a GET query", method: "GET", path: `/graphql?query=%7B+voucher(id:+"vch_%00")+%7B+id+%7D+%7D`, token: payer.Token, status: 400, code: "validation_failed"},
				{name: "GraphQL: repeated key", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"{ viewer { id } }","query":"mutation { closeSession(id: \"` + sesID + `\") { id } }"}`, status: 400, code: "validation_failed"},
				{name: "GraphQL: repeated variable", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"mutation($id: ID!) { closeSession(id: $id) { id } }","variables":{"id":"x","id":"` + sesID + `"}}`, status: 400, code: "validation_failed"},
				{name: "GraphQL: fragments spreading each other", method: "POST", path: "/graphql", body: `{"query":` + jsonString(fragmentBomb(40)) + `}`, code: "validation_failed"},
				{name: "GraphQL: repeated identical fields", method: "POST", path: "/graphql", body: `{"query":"{` + strings.Repeat(` viewer { __typename }`, 2700) + `}"}`, code: "validation_failed"},
				{name: "GraphQL: repeated fields under 32 KiB", method: "POST", path: "/graphql", body: `{"query":"{` + strings.Repeat(` a: viewer { id }`, 1800) + `}"}`, code: "validation_failed"},
				{name: "GraphQL: repeated fields under an alias each", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"{ viewer {` + strings.Repeat(` id`, 3000) + ` } }"}`, code: "validation_failed"},
				{name: "GraphQL: too deep", method: "POST", path: "/graphql", token: payer.Token, body: `{"query":"{` + strings.Repeat(" vouchers { edges { node {", 5) + " id" + strings.Repeat(" } } }", 5) + ` }"}`, code: "validation_failed"},
				{name: "GraphQL: not JSON", method: "POST", path: "/graphql", body: `{"query":`, status: 400, code: "validation_failed"},
			}
			db, err := storage.Open(context.Background(), srv.DatabaseURL, storage.Options{MaxOpenConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			before := snapshot(t, db.SQL, db.IsPostgres())
			for _, c := range cases {
				start := time.Now()
				var resp *testserver.Response
				if c.raw {
					resp = rawDo(t, srv.URL, c.method, c.path, c.token, c.body)
				} else {
					resp = srv.Do(t, c.method, c.path, c.token, c.body)
				}
				took := time.Since(start)
				if took > time.Second {
					t.Errorf("%s: answered after %v", c.name, took)
				}
				got := resp.Code()
				if strings.HasPrefix(c.path, "/graphql") {
					var g testserver.GraphQLResult
					resp.JSON(t, &g)
					got = g.ErrorCode()
				}
				if got != c.code || (c.status != 0 && resp.Status != c.status) || resp.Status >= 500 {
					t.Errorf("%s: %d %q, want %d %q: %.300s", c.name, resp.Status, got, c.status, c.code, resp.Body)
				}
			}
			// The websocket door: the same classes as messages on an open
			// socket, a mutation that would close the payer's session among
			// them (were the repeated key's last value, or the second
			// payload, taken). Each is refused within the bound, the socket
			// stays up, and nothing is stored.
			ws := openSocket(t, srv, payer.Token, false)
			closeSes := `mutation($id: ID!) { closeSession(id: $id) { id } }`
			wsCases := []struct{ name, msg string }{
				{"repeated variable", `{"type":"subscribe","id":"%s","payload":{"query":"` + closeSes + `","variables":{"id":"x","id":"` + sesID + `"}}}`},
				{"repeated payload", `{"type":"subscribe","id":"%s","payload":{"query":"{ viewer { id } }"},"payload":{"query":"` + closeSes + `","variables":{"id":"` + sesID + `"}}}`},
				{"NUL in a variable", `{"type":"subscribe","id":"%s","payload":{"query":"` + closeSes + `","variables":{"id":"` + sesID + `\u0000"}}}`},
				{"invalid UTF-8 in a variable", "{\"type\":\"subscribe\",\"id\":\"%s\",\"payload\":{\"query\":\"" + closeSes + "\",\"variables\":{\"id\":\"\xc3\"}}}"},
				{"escaped NUL in the document", `{"type":"subscribe","id":"%s","payload":{"query":"mutation { closeSession(id: \"` + sesID + `\\u0000\") { id } }"}}`},
				{"fragments spreading each other", `{"type":"subscribe","id":"%s","payload":{"query":` + jsonString(fragmentBomb(40)) + `}}`},
				{"repeated identical fields", `{"type":"subscribe","id":"%s","payload":{"query":"{` + strings.Repeat(` viewer { __typename }`, 2700) + `}"}}`},
			}
			for i, c := range wsCases {
				id := fmt.Sprint("h", i)
				start := time.Now()
				if err := ws.c.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(c.msg, id))); err != nil {
					t.Fatalf("websocket %s: %v", c.name, err)
				}
				m := ws.answer(id)
				if took := time.Since(start); took > time.Second {
					t.Errorf("websocket %s: answered after %v", c.name, took)
				}
				if !strings.Contains(string(m.Payload), `"validation_failed"`) {
					t.Errorf("websocket %s: %s %s", c.name, m.Type, m.Payload)
				}
			}
			ws.query("alive", `{ viewer { id } }`)
			if m := ws.answer("alive"); m.Type != "next" || !strings.Contains(string(m.Payload), payer.ID) {
				t.Fatalf("the socket after the catalogue: %s %s", m.Type, m.Payload)
			}
			if after := snapshot(t, db.SQL, db.IsPostgres()); after != before {
				t.Fatalf("stored state changed:\nbefore %s\nafter  %s", before, after)
			}
			// The server is healthy and still serves everyone.
			if r := srv.Do(t, "GET", "/api/v1/vouchers/"+vid, payee.Token, nil); r.Status != 200 {
				t.Fatalf("after the catalogue: %d %s", r.Status, r.Body)
			}
			for _, h := range []string{"X-Content-Type-Options", "Cache-Control"} {
				if r := srv.Do(t, "GET", "/api/v1/vouchers/"+vid, payee.Token, nil); r.Header.Get(h) == "" {
					t.Fatalf("no %s header", h)
				}
			}
		})
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func fragmentBomb(levels int) string {
	var b strings.Builder
	b.WriteString("query { ...F0 }\n")
	for i := 0; i < levels; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "fragment F%d on Query { viewer { id } }\n", levels)
	return b.String()
}

// snapshot renders every stored row of every table but the rate-limit
// counters (refused requests still spend budget), in a stable order.
func snapshot(t *testing.T, db *sql.DB, postgres bool) string {
	t.Helper()
	ctx := context.Background()
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "rate_limit_buckets" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	sort.Strings(tables)
	var b strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var lines []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var line strings.Builder
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&line, "%v|", v)
			}
			lines = append(lines, line.String())
		}
		rows.Close()
		sort.Strings(lines)
		fmt.Fprintf(&b, "%s(%d): %s\n", table, len(lines), strings.Join(lines, " ; "))
	}
	return b.String()
}

// Closing a voucher session ends the resource tokens issued for it: the
// payee's next request is 401, on both doors, on every replica (two
// replicas share one PostgreSQL: the close on one ends the token on the
// other, although the other remembers the session as live from the read
// before the close).
func TestClosingASessionEndsItsResourceTokens(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"VOUCHER_JWT_SECRET": testSecret}
			a := testserver.Start(t, testserver.Options{Dialect: dialect, Env: env})
			b := a
			if dialect == storage.Postgres {
				b = testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL, Env: env})
			}
			payer := a.Device(t)
			sesID, code := a.Session(t, payer)
			payee := a.Resource(t, code)
			vid := b.Reserve(t, payee.Token, map[string]any{"code": code})
			if r := b.Do(t, "GET", "/api/v1/vouchers/"+vid, payee.Token, nil); r.Status != 200 {
				t.Fatalf("read before close: %d %s", r.Status, r.Body)
			}
			if r := a.Do(t, "POST", "/api/v1/vouchers/sessions/"+sesID+"/close-session", payer.Token, "{}"); r.Status != 200 {
				t.Fatalf("close: %d %s", r.Status, r.Body)
			}
			// b remembers the session as live since the read above; the
			// close is answered once b has acknowledged it
			// (internal/revocation), not at the end of the wait's bound.
			if strings.Contains(a.Logs(), "not acknowledged") {
				t.Fatalf("the close was not acknowledged by the other replica:\n%s", a.Logs())
			}
			for _, srv := range []*testserver.Server{a, b} {
				if r := srv.Do(t, "GET", "/api/v1/vouchers/"+vid, payee.Token, nil); r.Status != http.StatusUnauthorized || r.Code() != "unauthorized" {
					t.Fatalf("read after close: %d %s", r.Status, r.Body)
				}
				r := srv.Do(t, "POST", "/api/v1/vouchers/"+vid+"/redeem-voucher", payee.Token, map[string]any{"expectedPayment": map[string]any{
					"network": "ethereum", "currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "amount": "1",
					"wallet": map[string]any{"address": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"}}})
				if r.Status != http.StatusUnauthorized {
					t.Fatalf("redeem after close: %d %s", r.Status, r.Body)
				}
				if g := srv.GraphQL(t, payee.Token, `{ viewer { id } }`, nil); g.ErrorCode() != "unauthorized" {
					t.Fatalf("GraphQL after close: %s %+v", g.Data, g.Errors)
				}
			}
			// The payer still reads it: nothing happened to the voucher.
			if r := b.Do(t, "GET", "/api/v1/vouchers/"+vid, payer.Token, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"RESERVED"`) {
				t.Fatalf("payer read: %d %s", r.Status, r.Body)
			}
		})
	}
}

// rawDo sends one request with a plain HTTP client (see hostileCase.raw).
func rawDo(t *testing.T, base, method, path, token, body string) *testserver.Response {
	t.Helper()
	r, err := apiclient.New(base, &http.Client{Timeout: 30 * time.Second}).Send(context.Background(), method, path, token, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &testserver.Response{Response: r}
}
