// Package testbrowser drives a real headless Chromium (Debian's
// /usr/bin/chromium, installed by `make test` through
// scripts/ensure-chromium.sh) with github.com/chromedp/chromedp, for tests
// that must see what a browser does: CORS, the hosted checkout page,
// GraphiQL. A test starts a Browser, opens Tabs, and serves pages on
// origins of its own with Origin.
//
//	b := testbrowser.Start(t)
//	page := testbrowser.Origin(t, http.HandlerFunc(...))  // http://127.0.0.1:PORT
//	tab := b.Tab(t)
//	tab.Run(t, chromedp.Navigate(page))
//	var got string
//	tab.Eval(t, `fetch(api).then(r => r.text())`, &got)    // awaited, decoded as JSON
//
// Without Chromium the test is skipped, except under CI=true, where it
// fails: nothing silently skips in CI.
package testbrowser

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// DefaultTimeout bounds everything one tab does.
const DefaultTimeout = 30 * time.Second

// Path returns the Chromium binary: $CHROMIUM_BIN, else /usr/bin/chromium
// (Debian), else chromium or chromium-browser on PATH. Without one the test
// is skipped, or fails under CI=true.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CHROMIUM_BIN=%s: %v", p, err)
		}
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if found, err := exec.LookPath(p); err == nil {
			return found
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is required in CI for browser tests (make test installs it: scripts/ensure-chromium.sh)")
	}
	t.Skip("chromium not found: run scripts/ensure-chromium.sh (apt-get install -y chromium) or set CHROMIUM_BIN")
	return ""
}

// Browser is one headless Chromium process.
type Browser struct {
	ctx context.Context // the browser's first tab; new tabs derive from it
}

// Start launches a headless Chromium that ends with t. Flags: chromedp's
// defaults (headless, no background networking, no first-run, no
// extensions, ...) plus --no-sandbox (tests and CI run as root),
// --disable-gpu and a fixed window size.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin := Path(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // kills the process and removes its profile directory
	})
	// Launch now (no timeout on this first run: it would end the browser),
	// so a browser that cannot start fails here, named.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", bin, err)
	}
	return &Browser{ctx: ctx}
}

// Tab is one browser tab. What its pages print on the console and their
// uncaught exceptions are kept, and logged when the test fails.
type Tab struct {
	Ctx context.Context

	mu   sync.Mutex
	logs []string
}

// Tab opens a new tab that closes when t ends or after DefaultTimeout.
func (b *Browser) Tab(t testing.TB) *Tab {
	t.Helper()
	tctx, cancelTab := chromedp.NewContext(b.ctx)
	// Create the tab before the timeout, which would otherwise close it.
	if err := chromedp.Do(tctx); err != nil {
		cancelTab()
		t.Fatalf("open tab: %v", err)
	}
	ctx, cancel := context.WithTimeout(tctx, DefaultTimeout)
	tab := &Tab{Ctx: ctx}
	msgs := chromedp.Console(tctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			tab.log(m.String())
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelTab()
		<-done
		if t.Failed() {
			for _, l := range tab.Logs() {
				t.Logf("browser console: %s", l)
			}
		}
	})
	return tab
}

func (tab *Tab) log(s string) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.logs = append(tab.logs, s)
}

// Logs returns the console lines and exceptions seen so far.
func (tab *Tab) Logs() []string {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return append([]string(nil), tab.logs...)
}

// Run runs chromedp actions in the tab, in order, failing t on error.
func (tab *Tab) Run(t testing.TB, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tab.Ctx, actions...); err != nil {
		t.Fatalf("browser: %v\n%s", err, strings.Join(tab.Logs(), "\n"))
	}
}

// Eval evaluates a JavaScript expression in the page, awaits it when it is
// a promise, and decodes its value (as JSON) into out. A thrown error or a
// rejected promise fails t.
func (tab *Tab) Eval(t testing.TB, expr string, out any) {
	t.Helper()
	js := "(async () => JSON.stringify(await (" + expr + ")))()"
	s, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("browser: %s: %v\n%s", expr, err, strings.Join(tab.Logs(), "\n"))
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		t.Fatalf("browser: %s gave %s: %v", expr, s, err)
	}
}

// Origin serves h on a fresh loopback port until t ends and returns its
// origin (http://127.0.0.1:PORT): a page there is cross-origin to the
// service under test and to every other Origin.
func Origin(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// Page is a handler answering every GET with html (text/html; UTF-8):
// the simplest page for Origin.
func Page(html string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(html))
	})
}
