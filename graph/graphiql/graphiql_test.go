package graphiql_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/graph/graphiql"
)

// Every asset the page names is served; compressed to clients that accept
// gzip and plain to the others; the page and assets carry the same-origin
// policy.
func TestAssets(t *testing.T) {
	h := graphiql.Handler()
	page := httptest.NewRecorder()
	h.ServeHTTP(page, httptest.NewRequest("GET", "/graphiql", nil))
	if page.Code != 200 || !strings.Contains(page.Header().Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("page: %d %q", page.Code, page.Header())
	}
	refs := 0
	for _, part := range strings.Split(page.Body.String(), `"/graphiql/assets/`)[1:] {
		name, _, _ := strings.Cut(part, `"`)
		refs++
		plain := httptest.NewRecorder()
		h.ServeHTTP(plain, httptest.NewRequest("GET", "/graphiql/assets/"+name, nil))
		if plain.Code != 200 || plain.Header().Get("Content-Encoding") != "" || plain.Body.Len() < 20 {
			t.Errorf("%s without gzip: %d %q, %d bytes", name, plain.Code, plain.Header().Get("Content-Encoding"), plain.Body.Len())
		}
		req := httptest.NewRequest("GET", "/graphiql/assets/"+name, nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		gz := httptest.NewRecorder()
		h.ServeHTTP(gz, req)
		if gz.Code != 200 {
			t.Errorf("%s with gzip: %d", name, gz.Code)
		}
		if gz.Header().Get("Content-Encoding") == "gzip" && !bytes.HasPrefix(gz.Body.Bytes(), []byte{0x1f, 0x8b}) {
			t.Errorf("%s: Content-Encoding gzip on a body that is not gzip", name)
		}
	}
	if refs != 6 {
		t.Errorf("the page names %d assets, want 6", refs)
	}
	nf := httptest.NewRecorder()
	h.ServeHTTP(nf, httptest.NewRequest("GET", "/graphiql/assets/nope.txt", nil))
	if nf.Code != http.StatusNotFound {
		t.Errorf("unknown asset: %d", nf.Code)
	}
}
