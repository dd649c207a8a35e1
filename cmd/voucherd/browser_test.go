package main_test

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/voucherd/voucherd/testsupport/testbrowser"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

//go:embed testdata/dashboard.html
var dashboardPage string

type fetched struct {
	Status          int    `json:"status"`
	Body            string `json:"body"`
	RequestID       string `json:"requestId"`
	RateLimitPolicy string `json:"rateLimitPolicy"`
	RateLimit       string `json:"rateLimit"`
	Blocked         string `json:"blocked"`
}

type socketResult struct {
	Message string `json:"message"`
	Closed  int    `json:"closed"`
	Timeout bool   `json:"timeout"`
	Blocked string `json:"blocked"`
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A dashboard served from another origin, in a real headless Chromium,
// against the real binary on each database: from a listed origin, REST
// (with preflighted headers), GraphQL and the websocket work and the page
// reads the exposed headers; from an unlisted origin the browser blocks
// every call and the websocket is refused.
func TestBrowserOnAnotherOrigin(t *testing.T) {
	b := testbrowser.Start(t)
	allowed := testbrowser.Origin(t, testbrowser.Page(dashboardPage))
	refused := testbrowser.Origin(t, testbrowser.Page(dashboardPage))
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{
				"VOUCHER_CORS_ORIGINS": allowed,
				"VOUCHER_RATE_LIMITS":  "spec",
			}})
			api := jsString(srv.URL)

			t.Run("allowed origin", func(t *testing.T) {
				tab := b.Tab(t)
				tab.Run(t, chromedp.Navigate(allowed))

				var r fetched
				tab.Eval(t, fmt.Sprintf("rates(%s)", api), &r)
				if r.Blocked != "" || r.Status != 200 || !strings.Contains(r.Body, `"rates"`) {
					t.Fatalf("rates: %+v", r)
				}
				if r.RequestID == "" || r.RateLimitPolicy == "" || r.RateLimit == "" {
					t.Errorf("the page cannot read the exposed headers: %+v", r)
				}

				// Content-Type: application/json and X-Request-Id need a
				// preflight; the page's own request id comes back.
				tab.Eval(t, fmt.Sprintf("signUp(%s, %s, %s)", api, jsString(testserver.RandomHex(16)), jsString(testserver.RandomHex(20))), &r)
				if r.Blocked != "" || r.Status != 200 {
					t.Fatalf("sign-up: %+v", r)
				}
				if r.RequestID != "browser-sign-up-1" {
					t.Errorf("X-Request-Id %q, want the page's own", r.RequestID)
				}
				var signed struct {
					Authorization struct{ Token string } `json:"authorization"`
					User          struct{ ID string }    `json:"user"`
				}
				if err := json.Unmarshal([]byte(r.Body), &signed); err != nil || signed.Authorization.Token == "" {
					t.Fatalf("sign-up body %s: %v", r.Body, err)
				}
				token := jsString(signed.Authorization.Token)

				tab.Eval(t, fmt.Sprintf("createSession(%s, %s)", api, token), &r)
				if r.Blocked != "" || r.Status != 200 || !strings.Contains(r.Body, `"ACTIVE"`) {
					t.Fatalf("create-session: %+v", r)
				}

				tab.Eval(t, fmt.Sprintf("graphql(%s, %s, %s)", api, token, jsString("{ viewer { id } }")), &r)
				if r.Blocked != "" || r.Status != 200 || !strings.Contains(r.Body, signed.User.ID) {
					t.Fatalf("graphql: %+v (want viewer %s)", r, signed.User.ID)
				}

				var s socketResult
				tab.Eval(t, fmt.Sprintf("socket(%s, %s)", api, token), &s)
				if s.Message != "connection_ack" {
					t.Fatalf("websocket: %+v", s)
				}
			})

			t.Run("refused origin", func(t *testing.T) {
				tab := b.Tab(t)
				tab.Run(t, chromedp.Navigate(refused))
				for _, call := range []string{
					fmt.Sprintf("rates(%s)", api),
					fmt.Sprintf("signUp(%s, %s, %s)", api, jsString(testserver.RandomHex(16)), jsString(testserver.RandomHex(20))),
					fmt.Sprintf("createSession(%s, 'x')", api),
					fmt.Sprintf("graphql(%s, 'x', '{ __typename }')", api),
				} {
					var r fetched
					tab.Eval(t, call, &r)
					if r.Blocked == "" {
						t.Errorf("%s: the page read the answer: %+v", call, r)
					}
				}
				var s socketResult
				tab.Eval(t, fmt.Sprintf("socket(%s, 'x')", api), &s)
				if s.Message != "" || s.Closed != 1006 {
					t.Errorf("websocket from a refused origin: %+v, want closed 1006 before any message", s)
				}
			})
		})
	}
}

// The development GraphiQL page in a real browser: it loads from the
// binary alone (every request the page makes goes to the server's own
// origin, under a same-origin Content-Security-Policy), fetches the schema
// with introspection and shows it in its documentation explorer, and runs a
// query.
func TestGraphiQLLoadsFromTheBinary(t *testing.T) {
	b := testbrowser.Start(t)
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	tab := b.Tab(t)
	tab.Run(t, chromedp.Navigate(srv.URL+"/graphiql"))

	// Poll until the schema is in: GraphiQL's docs explorer lists the root types.
	var state struct {
		Ready     bool     `json:"ready"`
		Resources []string `json:"resources"`
		Text      string   `json:"text"`
	}
	tab.Eval(t, `(async () => {
		const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
		for (let i = 0; i < 200; i++) {
			const docs = document.querySelector('[aria-label="Show Documentation Explorer"]');
			if (docs) { docs.click(); }
			const explorer = document.querySelector(".graphiql-doc-explorer");
			if (explorer && /Query/.test(explorer.innerText) && /Mutation/.test(explorer.innerText)) {
				return {ready: true, text: explorer.innerText,
					resources: performance.getEntriesByType("resource").map((e) => e.name)};
			}
			await sleep(100);
		}
		return {ready: false, text: document.body.innerText.slice(0, 500),
			resources: performance.getEntriesByType("resource").map((e) => e.name)};
	})()`, &state)
	if !state.Ready {
		t.Fatalf("GraphiQL did not show the schema within 20s: %q (resources %q)", state.Text, state.Resources)
	}
	introspected := false
	for _, u := range state.Resources {
		if !strings.HasPrefix(u, srv.URL+"/") {
			t.Errorf("the page requested %s, not on its own origin", u)
		}
		if u == srv.URL+"/graphql" {
			introspected = true
		}
	}
	if !introspected {
		t.Errorf("no request to /graphql among %q", state.Resources)
	}
	for _, l := range tab.Logs() {
		if strings.HasPrefix(l, "error") || strings.HasPrefix(l, "exception") {
			t.Errorf("browser console: %s", l)
		}
	}
}
