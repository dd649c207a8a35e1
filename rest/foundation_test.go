package rest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const testSecret = "e2e-secret-0123456789abcdefghijklmnopqrstuvwxyz"

// A new user's first steps, on both databases: sign up a device, open a
// context, sign in with its code as a resource, ask GraphQL who we are.
func TestFoundationEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{"VOUCHER_JWT_SECRET": testSecret}})
			payer := srv.Device(t)
			sesID, code := srv.Session(t, payer)
			payee := srv.Resource(t, strings.ToLower(code)) // codes are case-insensitive

			g := srv.GraphQL(t, payee.Token, `{ viewer { kind id expiresAt } }`, nil)
			if len(g.Errors) > 0 {
				t.Fatalf("viewer: %+v", g.Errors)
			}
			var v struct {
				Viewer struct{ Kind, ID, ExpiresAt string }
			}
			_ = json.Unmarshal(g.Data, &v)
			if v.Viewer.Kind != "resource" || v.Viewer.ID != sesID {
				t.Fatalf("resource viewer = %+v", v.Viewer)
			}
			if _, err := time.Parse("2006-01-02T15:04:05.000Z", v.Viewer.ExpiresAt); err != nil {
				t.Fatalf("timestamp format: %q", v.Viewer.ExpiresAt)
			}
			g = srv.GraphQL(t, payer.Token, `{ viewer { kind id } }`, nil)
			_ = json.Unmarshal(g.Data, &v)
			if v.Viewer.Kind != "device" || v.Viewer.ID != payer.ID {
				t.Fatalf("device viewer = %+v (%+v)", v.Viewer, g.Errors)
			}

			// Sign-in again with the stored credentials.
			r := srv.Do(t, "POST", "/api/v1/auth/sign-in", "", map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": payer.InstallationID, "password": payer.Password}})
			if r.Status != 200 || !strings.Contains(string(r.Body), `"token"`) {
				t.Fatalf("device sign-in: %d %s", r.Status, r.Body)
			}
			user := srv.User(t)
			r = srv.Do(t, "POST", "/api/v1/auth/sign-in", "", map[string]any{"type": "email-password", "data": map[string]any{"email": strings.ToUpper(user.Email), "password": user.Password}})
			if r.Status != 200 {
				t.Fatalf("user sign-in: %d %s", r.Status, r.Body)
			}
			r = srv.Do(t, "POST", "/api/v1/auth/sign-in", "", map[string]any{"type": "email-password", "data": map[string]any{"email": user.Email, "password": "wrong-password"}})
			if r.Status != 400 || r.Code() != "invalid_credentials" {
				t.Fatalf("wrong password: %d %s", r.Status, r.Body)
			}
			r = srv.Do(t, "POST", "/api/v1/auth/sign-up", "", map[string]any{"type": "email-password", "data": map[string]any{"email": user.Email, "password": "another-password"}})
			if r.Status != 400 || r.Code() != "already_exists" {
				t.Fatalf("taken email: %d %s", r.Status, r.Body)
			}

			// Sessions: the owner reads and closes; others see nothing.
			r = srv.Do(t, "GET", "/api/v1/vouchers/sessions/"+sesID, payer.Token, nil)
			var ses map[string]any
			r.JSON(t, &ses)
			if r.Status != 200 || ses["status"] != "ACTIVE" || ses["code"] != code {
				t.Fatalf("get session: %d %s", r.Status, r.Body)
			}
			wantKeys(t, ses, "id", "code", "status", "expiresAt", "createdAt")
			other := srv.Device(t)
			if r := srv.Do(t, "GET", "/api/v1/vouchers/sessions/"+sesID, other.Token, nil); r.Status != 404 || r.Code() != "not_found" {
				t.Fatalf("stranger get session: %d %s", r.Status, r.Body)
			}
			if r := srv.Do(t, "POST", "/api/v1/vouchers/sessions/create-session", payee.Token, nil); r.Status != 403 || r.Code() != "forbidden" {
				t.Fatalf("resource creating a session: %d %s", r.Status, r.Body)
			}
			if r := srv.Do(t, "POST", "/api/v1/vouchers/sessions/"+sesID+"/close-session", payer.Token, "{}"); r.Status != 200 || !strings.Contains(string(r.Body), `"CLOSED"`) {
				t.Fatalf("close: %d %s", r.Status, r.Body)
			}
			r = srv.Do(t, "POST", "/api/v1/auth/sign-in", "", map[string]any{"type": "resource", "data": map[string]any{"resource": "voucher::context::code::" + code}})
			if r.Status != 400 || r.Code() != "invalid_credentials" {
				t.Fatalf("closed context sign-in: %d %s", r.Status, r.Body)
			}

			// GraphQL mutations call the same services.
			g = srv.GraphQL(t, payer.Token, `mutation { createSession { id code status } }`, nil)
			if len(g.Errors) > 0 || !strings.Contains(string(g.Data), `"ACTIVE"`) {
				t.Fatalf("createSession: %s %+v", g.Data, g.Errors)
			}
			// The payer pages through its own sessions, newest first; no one else sees them.
			g = srv.GraphQL(t, payer.Token, `{ voucherSessions(first: 1) { totalCount pageInfo { hasNextPage endCursor } edges { node { id status } } } }`, nil)
			var conn struct {
				VoucherSessions struct {
					TotalCount int
					PageInfo   struct {
						HasNextPage bool
						EndCursor   string
					}
					Edges []struct{ Node struct{ ID, Status string } }
				}
			}
			if err := json.Unmarshal(g.Data, &conn); err != nil || len(g.Errors) > 0 {
				t.Fatalf("voucherSessions: %s %+v", g.Data, g.Errors)
			}
			vs := conn.VoucherSessions
			if vs.TotalCount != 2 || len(vs.Edges) != 1 || !vs.PageInfo.HasNextPage || vs.Edges[0].Node.ID == sesID {
				t.Fatalf("first page should hold the newest of 2 sessions: %+v", vs)
			}
			g = srv.GraphQL(t, payer.Token, `query($after: Cursor) { voucherSessions(first: 5, after: $after) { edges { node { id status } } } }`, map[string]any{"after": vs.PageInfo.EndCursor})
			if !strings.Contains(string(g.Data), sesID) || !strings.Contains(string(g.Data), `"CLOSED"`) {
				t.Fatalf("second page should hold the closed first session: %s %+v", g.Data, g.Errors)
			}
			if g = srv.GraphQL(t, other.Token, `{ voucherSessions { totalCount } }`, nil); !strings.Contains(string(g.Data), `"totalCount":0`) {
				t.Fatalf("another payer sees someone's sessions: %s", g.Data)
			}
			// The first session was closed above, which ended its resource
			// token (docs/hardening.md); a live one is forbidden.
			if g = srv.GraphQL(t, payee.Token, `{ voucherSessions { totalCount } }`, nil); g.ErrorCode() != "unauthorized" {
				t.Fatalf("the token of a closed session lists sessions: %s %+v", g.Data, g.Errors)
			}
			_, liveCode := srv.Session(t, payer)
			live := srv.Resource(t, liveCode)
			if g = srv.GraphQL(t, live.Token, `{ voucherSessions { totalCount } }`, nil); g.ErrorCode() != "forbidden" {
				t.Fatalf("a resource token lists sessions: %s %+v", g.Data, g.Errors)
			}
			if g = srv.GraphQL(t, payer.Token, `{ voucherSessions(first: 101) { totalCount } }`, nil); g.ErrorCode() != "validation_failed" {
				t.Fatalf("page over 100: %+v", g.Errors)
			}

			g = srv.GraphQL(t, "", `mutation($in: CredentialsInput!) { signIn(input: $in) { authorization { token } } }`,
				map[string]any{"in": map[string]any{"type": "email-password", "data": map[string]any{"email": user.Email, "password": "nope-nope"}}})
			if g.ErrorCode() != "invalid_credentials" {
				t.Fatalf("GraphQL signIn error code: %+v", g.Errors)
			}

			// No token, password or secret reaches the logs.
			logs := srv.Logs()
			for _, secret := range []string{payer.Token, payee.Token, payer.Password, user.Password, testSecret} {
				if strings.Contains(logs, secret) {
					t.Fatalf("a secret reached the logs")
				}
			}
		})
	}
}

func wantKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	if len(m) != len(keys) {
		t.Fatalf("keys %v, want exactly %v", m, keys)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Fatalf("missing key %q in %v", k, m)
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// Tampered, expired, alg=none, wrong-audience and wrong-issuer tokens all get
// 401 unauthorized on both doors.
func TestBadTokensAreUnauthorized(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite3", Env: map[string]string{"VOUCHER_JWT_SECRET": testSecret}})
	dev := srv.Device(t)

	keys, err := auth.NewKeyring(auth.KeyFromSecret([]byte(testSecret)))
	if err != nil {
		t.Fatal(err)
	}
	issuer := func(iss, aud string, now time.Time) *auth.Issuer {
		i, err := auth.NewIssuer(auth.IssuerConfig{Keys: keys, Issuer: iss, Audience: aud, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	good, _, err := issuer("voucherd", "voucherd", time.Now()).IssueDevice(dev.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := srv.Do(t, "POST", "/api/v1/vouchers/sessions/create-session", good, nil); r.Status != 200 {
		t.Fatalf("a token we forged with the server's own key must work: %d %s", r.Status, r.Body)
	}
	expired, _, _ := issuer("voucherd", "voucherd", time.Now().Add(-2*time.Hour)).IssueDevice(dev.ID)
	wrongAud, _, _ := issuer("voucherd", "someone-else", time.Now()).IssueDevice(dev.ID)
	wrongIss, _, _ := issuer("evil", "voucherd", time.Now()).IssueDevice(dev.ID)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	none := b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(string(payload)) + "."
	otherKey, _ := auth.NewKeyring(auth.KeyFromSecret([]byte(strings.Repeat("z", 40))))
	foreignIssuer, _ := auth.NewIssuer(auth.IssuerConfig{Keys: otherKey, Issuer: "voucherd", Audience: "voucherd"})
	foreign, _, _ := foreignIssuer.IssueDevice(dev.ID)

	for name, tok := range map[string]string{
		"expired": expired, "wrong audience": wrongAud, "wrong issuer": wrongIss, "tampered": tampered,
		"alg none": none, "other key": foreign, "garbage": "not.a.jwt", "missing": "",
	} {
		t.Run(name, func(t *testing.T) {
			r := srv.Do(t, "POST", "/api/v1/vouchers/sessions/create-session", tok, nil)
			if r.Status != http.StatusUnauthorized || r.Code() != "unauthorized" {
				t.Fatalf("REST: %d %s", r.Status, r.Body)
			}
			g := srv.GraphQL(t, tok, `{ viewer { id } }`, nil)
			if g.ErrorCode() != "unauthorized" {
				t.Fatalf("GraphQL: %+v", g.Errors)
			}
		})
	}
}

// Unknown routes, wrong methods, oversized and malformed bodies get the
// JSON error body with the documented codes.
func TestErrorsAndInputHandling(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite3"})
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown route", "GET", "/api/v1/nothing-here", "", 404, "not_found"},
		{"unknown top-level", "GET", "/nothing", "", 404, "not_found"},
		{"wrong method", "GET", "/api/v1/auth/sign-in", "", 405, "method_not_allowed"},
		{"unknown field", "POST", "/api/v1/auth/sign-in", `{"type":"email-password","data":{},"extra":1}`, 400, "validation_failed"},
		{"wrong JSON type", "POST", "/api/v1/auth/sign-in", `{"type":5,"data":{}}`, 400, "validation_failed"},
		{"wrong data type", "POST", "/api/v1/auth/sign-in", `{"type":"email-password","data":{"email":5,"password":"12345678"}}`, 400, "validation_failed"},
		{"trailing value", "POST", "/api/v1/auth/sign-in", `{"type":"email-password","data":{}} {}`, 400, "validation_failed"},
		{"not JSON", "POST", "/api/v1/auth/sign-in", `type=x`, 400, "validation_failed"},
		{"empty body", "POST", "/api/v1/auth/sign-in", ``, 400, "validation_failed"},
		{"array body", "POST", "/api/v1/auth/sign-in", `[]`, 400, "validation_failed"},
		{"too large", "POST", "/api/v1/auth/sign-up", `{"type":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "payload_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			r := srv.Do(t, c.method, c.path, "", body)
			if r.Status != c.status || r.Code() != c.code {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("content type %q", ct)
			}
			var e map[string]any
			r.JSON(t, &e)
			if msg, _ := e["message"].(string); msg == "" {
				t.Fatalf("error without message: %s", r.Body)
			}
		})
	}
	r := srv.Do(t, "GET", "/api/v1/auth/sign-in", "", nil)
	if r.Header.Get("Allow") != "POST" {
		t.Fatalf("405 Allow header %q", r.Header.Get("Allow"))
	}
	r = srv.Do(t, "POST", "/api/v1/auth/sign-in", "", `{"type":"email-password","data":{"email":"a@b.c","password":"123"}}`)
	var e struct {
		Details []struct{ Field, Reason string }
	}
	r.JSON(t, &e)
	if len(e.Details) != 1 || e.Details[0].Field != "data.password" {
		t.Fatalf("details should name the field: %s", r.Body)
	}
	if id := r.Header.Get("X-Request-Id"); len(id) < 16 {
		t.Fatalf("request id %q", id)
	}
	// A GraphQL body over 1 MiB is refused the same way.
	big := srv.Do(t, "POST", "/graphql", "", `{"query":"`+strings.Repeat(" ", 1<<20)+`{viewer{id}}"}`)
	if big.Status != 413 {
		t.Fatalf("GraphQL oversized body: %d", big.Status)
	}
	// Mutations are refused over GET.
	get := srv.Do(t, "GET", "/graphql?query="+strings.ReplaceAll("mutation{createSession{id}}", "{", "%7B"), "", nil)
	if !strings.Contains(string(get.Body), "errors") || strings.Contains(string(get.Body), `"createSession":{`) {
		t.Fatalf("mutation over GET: %d %s", get.Status, get.Body)
	}
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite3"})
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := srv.Do(t, "GET", p, "", nil); r.Status != 200 {
			t.Fatalf("%s: %d", p, r.Status)
		}
	}
	srv.Do(t, "POST", "/api/v1/auth/sign-in", "", `{}`)
	m := srv.Do(t, "GET", "/metrics", "", nil)
	if m.Status != 200 || !strings.Contains(string(m.Body), `voucherd_http_requests_total{method="POST",route="POST /api/v1/auth/sign-in",status="4xx"}`) {
		t.Fatalf("metrics: %d\n%.2000s", m.Status, m.Body)
	}
	// SIGTERM ends the process cleanly.
	srv.Stop(t)
	if done, code := srv.Exited(); !done || code != 0 {
		t.Fatalf("graceful exit: done=%v code=%d\n%s", done, code, srv.Logs())
	}
}

func TestProductionRefusesToStartWithoutSecrets(t *testing.T) {
	bin := testserver.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{"VOUCHER_ENV=production", "VOUCHER_DATABASE_URL=sqlite://" + t.TempDir() + "/x.db", "VOUCHER_ADDR=127.0.0.1:0"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("production started without secrets:\n%s", out)
	}
	for _, want := range []string{"VOUCHER_JWT_SECRET", "VOUCHER_ENCRYPTION_KEY", "required in production"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("message should name %q:\n%s", want, out)
		}
	}
	cmd = exec.CommandContext(ctx, bin)
	cmd.Env = []string{"VOUCHER_VOUCHER_TTL=soon", "VOUCHER_DATABASE_URL=sqlite://" + t.TempDir() + "/x.db"}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "VOUCHER_VOUCHER_TTL") {
		t.Fatalf("bad duration must stop the start with a clear message: %v\n%s", err, out)
	}
}
