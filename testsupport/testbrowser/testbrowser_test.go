package testbrowser_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/voucherd/voucherd/testsupport/testbrowser"
)

// The helper itself: a page on its own origin runs its script, Eval awaits
// promises and decodes their values, and console output is kept.
func TestTabEvalAndConsole(t *testing.T) {
	b := testbrowser.Start(t)
	api := testbrowser.Origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"n": 7}`)) // no CORS headers: a page elsewhere may not read this
	}))
	page := testbrowser.Origin(t, testbrowser.Page(`<!doctype html><title>t</title><script>console.log("hello", 42)</script>`))
	tab := b.Tab(t)
	tab.Run(t, chromedp.Navigate(page))

	var got struct{ A, B int }
	tab.Eval(t, `Promise.resolve({a: 1, b: 2})`, &got)
	if got.A != 1 || got.B != 2 {
		t.Fatalf("Eval gave %+v", got)
	}
	var blocked bool
	tab.Eval(t, `fetch(`+"`"+api+"`"+`).then(() => false, () => true)`, &blocked)
	if !blocked {
		t.Error("a cross-origin read without CORS headers was not blocked")
	}
	var title string
	tab.Eval(t, `document.title`, &title)
	if title != "t" {
		t.Errorf("title %q", title)
	}
	found := false
	for _, l := range tab.Logs() {
		if l == "log: hello 42" {
			found = true
		}
	}
	if !found {
		t.Errorf("console lines %q lack the page's log", tab.Logs())
	}
}
