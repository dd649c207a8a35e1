package main_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/voucherd/voucherd/testsupport/testserver"
)

// scrape reads /metrics in the text format.
func scrape(t *testing.T, srv *testserver.Server) string {
	t.Helper()
	r := srv.Do(t, "GET", "/metrics", "", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	return string(r.Body)
}

// value returns the sample of series (name{labels} as printed), or -1.
func value(text, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// The real binary's /metrics on each database: the series docs/operations.md
// names are there and move with what the service does, and the whole
// exposition passes Prometheus' metric lint (promlint, the checks of
// `promtool check metrics`) and the promtool binary itself.
func TestMetrics(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			payer := srv.Device(t)
			if g := srv.GraphQL(t, payer.Token, `{ viewer { id } }`, nil); len(g.Errors) > 0 {
				t.Fatalf("viewer: %+v", g.Errors)
			}
			srv.GraphQL(t, "", `{ voucher(id: "vch_nope") { id } }`, nil) // not_found or unauthorized
			srv.GraphQL(t, "", `{ nope }`, nil)                           // rejected
			ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/graphql", http.Header{"Sec-WebSocket-Protocol": {"graphql-transport-ws"}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()

			// The transport counts the connection once it has taken it
			// over, which may be just after the dial returns.
			text := scrape(t, srv)
			for deadline := time.Now().Add(3 * time.Second); value(text, "voucherd_graphql_websockets") != 1 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				text = scrape(t, srv)
			}
			for series, check := range map[string]func(float64) bool{
				`voucherd_graphql_operations_total{operation="Query.viewer",outcome="ok"}`:              func(v float64) bool { return v == 1 },
				`voucherd_graphql_operations_total{operation="(rejected)",outcome="validation_failed"}`: func(v float64) bool { return v == 1 },
				`voucherd_graphql_websockets`:                                                                func(v float64) bool { return v == 1 },
				`voucherd_webhook_outbox_depth`:                                                              func(v float64) bool { return v == 0 },
				`voucherd_webhook_outbox_oldest_due_seconds`:                                                 func(v float64) bool { return v == 0 },
				`voucherd_webhook_delivery_attempts_total{outcome="failed",trigger="automatic"}`:             func(v float64) bool { return v == 0 },
				`voucherd_webhook_commit_to_attempt_seconds_count`:                                           func(v float64) bool { return v == 0 },
				`go_sql_open_connections{db_name="voucherd"}`:                                                func(v float64) bool { return v >= 1 },
				`voucherd_http_requests_total{method="POST",route="POST /api/v1/auth/sign-up",status="2xx"}`: func(v float64) bool { return v == 1 },
			} {
				if v := value(text, series); !check(v) {
					t.Errorf("%s = %v", series, v)
				}
			}
			if !regexp.MustCompile(`(?m)^voucherd_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).MatchString(text) {
				t.Error("voucherd_build_info missing or malformed")
			}
			// A scraper that accepts gzip gets the exposition gzipped (by
			// the service's pooled gzip, not promhttp's own).
			req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(resp.Body)
			if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("gzip scrape: Content-Encoding %q, %v", resp.Header.Get("Content-Encoding"), err)
			}
			unzipped, err := io.ReadAll(zr)
			resp.Body.Close()
			if err != nil || !strings.Contains(string(unzipped), "voucherd_build_info{") {
				t.Fatalf("gzip scrape: %v, %d bytes without voucherd_build_info", err, len(unzipped))
			}
			if v := value(text, `voucherd_graphql_operations_total{operation="Query.voucher",outcome="ok"}`); v > 0 {
				t.Errorf("an anonymous voucher read counted as ok")
			}

			problems, err := promlint.New(strings.NewReader(text)).Lint()
			if err != nil {
				t.Fatalf("promlint: %v", err)
			}
			for _, p := range problems {
				t.Errorf("promlint: %s: %s", p.Metric, p.Text)
			}
			// The real promtool (Debian's prometheus package; make test
			// installs it with scripts/ensure-promtool.sh).
			cmd := exec.Command(promtool(t), "check", "metrics")
			cmd.Stdin = strings.NewReader(text)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || out.Len() > 0 {
				t.Errorf("promtool check metrics: %v\n%s", err, out.String())
			}
		})
	}
}

// promtool is $PROMTOOL or promtool on PATH. Without it the test is
// skipped, except under CI=true, where it fails: nothing silently skips in
// CI (make test installs it first).
func promtool(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("PROMTOOL"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("promtool")
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool is required in CI (make test installs it: scripts/ensure-promtool.sh)")
	}
	t.Skip("promtool not installed (scripts/ensure-promtool.sh installs it)")
	return ""
}
