package rest

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/operation"
)

var wildcard = regexp.MustCompile(`\{[^}$]*\}`)

// The door serves the REST routes of the operations table: every operation
// with a route (and each alias) reaches a handler under that very pattern.
// (The door cannot register anything else: route takes an operation.)
func TestRoutesAreTheOperationsTable(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux, Services{}, Options{})
	want := map[string]bool{}
	for _, op := range operation.All() {
		for _, p := range append([]string{op.REST}, op.Aliases...) {
			if p == "" {
				continue
			}
			want[p] = true
			r := probe(p)
			if _, got := mux.Handler(r); got != p {
				t.Errorf("%s: %s %s is served by %q, want %q", op.Name, r.Method, r.URL.Path, got, p)
			}
		}
	}
	if len(want) < 25 {
		t.Fatalf("only %d routes in the table", len(want))
	}
}

// probe is a request the pattern p matches.
func probe(p string) *http.Request {
	method, path, _ := strings.Cut(p, " ")
	path = strings.ReplaceAll(wildcard.ReplaceAllString(path, "x_1"), "{$}", "")
	return httptest.NewRequest(method, path, nil)
}
