package openapi_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/rest"
	"github.com/voucherd/voucherd/rest/openapi"
)

func source(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", openapi.SourcePath))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The committed document is what the source and the routes generate.
func TestCommittedDocumentIsFresh(t *testing.T) {
	want, err := openapi.Generate(source(t), rest.Routes())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, rest.OpenAPI()) {
		t.Fatalf("%s is stale: run `make generate` and commit it", openapi.OutputPath)
	}
}

// kin-openapi loads the served document as OpenAPI 3.1 and finds it valid,
// every example matching its schema.
func TestDocumentIsValid(t *testing.T) {
	v, err := openapi.Load(rest.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Doc().OpenAPI; got != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", got)
	}
	if n := v.Doc().Paths.Len(); n != len(pathsOf(rest.Routes())) {
		t.Fatalf("%d paths, routes have %d", n, len(pathsOf(rest.Routes())))
	}
}

func pathsOf(routes []rest.Route) map[string]bool {
	m := map[string]bool{}
	for _, r := range routes {
		m[r.Path] = true
	}
	return m
}

// Check names exactly what is out of step.
func TestCheckFindsDrift(t *testing.T) {
	doc, err := openapi.Parse(source(t))
	if err != nil {
		t.Fatal(err)
	}
	if p := openapi.Check(doc, rest.Routes()); len(p) != 0 {
		t.Fatalf("the source and the routes disagree:\n%s", strings.Join(p, "\n"))
	}
	routes := append(rest.Routes(), rest.Route{Method: "POST", Path: "/api/v1/widgets/{widgetId}/refund-checkout",
		Pattern: "POST /api/v1/widgets/{widgetId}/refund-checkout", Group: "widgets-public", Token: "none"})
	routes = routes[1:] // sign-up no longer routed
	for i := range routes {
		if routes[i].Path == "/api/v1/vouchers/{voucherId}" {
			routes[i].Token = "none" // the document says bearer
		}
	}
	paths := doc["paths"].(map[string]any)
	paths["/api/v1/vouchers/sessions/{sessionId}"].(map[string]any)["get"].(map[string]any)["parameters"] = []any{}
	got := strings.Join(openapi.Check(doc, routes), "\n")
	for _, want := range []string{
		`POST /api/v1/widgets/{widgetId}/refund-checkout (route "POST /api/v1/widgets/{widgetId}/refund-checkout") has no operation: add paths."/api/v1/widgets/{widgetId}/refund-checkout".post to rest/openapi.yaml`,
		"POST /api/v1/auth/sign-up is documented but no route serves it",
		"GET /api/v1/vouchers/sessions/{sessionId}: path parameters [], the route has [sessionId]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Check does not report %q; it reported:\n%s", want, got)
		}
	}
	if _, err := openapi.Generate([]byte("openapi: 3.0.3\npaths: {}\n"), rest.Routes()); err == nil || !strings.Contains(err.Error(), "must be 3.1") {
		t.Errorf("a 3.0 document generated: %v", err)
	}
}

// The Error schema's code enum is exactly apperr's codes.
func TestErrorCodesAreDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "internal", "apperr", "apperr.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				c, _ := strconv.Unquote(lit.Value)
				codes = append(codes, c)
			}
		}
		return true
	})
	v, err := openapi.Load(rest.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, e := range v.Doc().Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, e.(string))
	}
	slices.Sort(codes)
	slices.Sort(documented)
	if len(codes) < 20 || !slices.Equal(codes, documented) {
		t.Fatalf("apperr codes %v\nErrorCode enum in %s %v", codes, openapi.SourcePath, documented)
	}
}

// The validator refuses what the document does not allow.
func TestValidatorFindsMismatches(t *testing.T) {
	v, err := openapi.Load(rest.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Request { return httptest.NewRequest("GET", path, nil) }
	json := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	rates := `{"base":"USD","rates":{"ETH":"3120.5"},"updatedAt":"2026-11-25T12:00:00.000Z","sources":{"ETH":{"source":"feed","updatedAt":"2026-11-25T12:00:00.000Z"}}}`
	if err := v.Exchange(get("/api/v1/finance/rates"), nil, 200, json, []byte(rates)); err != nil {
		t.Fatalf("a right answer: %v", err)
	}
	for name, c := range map[string]struct {
		req    *http.Request
		body   string
		status int
		answer string
	}{
		"a number for money":     {get("/api/v1/finance/rates"), "", 200, `{"base":"USD","rates":{"ETH":3120.5},"updatedAt":"2026-11-25T12:00:00.000Z","sources":{}}`},
		"an undocumented field":  {get("/api/v1/finance/rates"), "", 200, `{"base":"USD","rates":{},"updatedAt":"2026-11-25T12:00:00.000Z","sources":{},"x":1}`},
		"an undocumented status": {get("/api/v1/finance/rates"), "", 418, `{"code":"internal","message":"teapot"}`},
		"an unknown error code":  {get("/api/v1/finance/rates"), "", 500, `{"code":"oops","message":"?"}`},
		"an unknown route, 200":  {get("/api/v1/nowhere"), "", 200, `{}`},
		"a refused body let through": {httptest.NewRequest("POST", "/api/v1/businesses/create-business", strings.NewReader(`{"name":""}`)),
			`{"name":""}`, 200, `{"id":"biz_x","name":"","status":"ACTIVE","createdAt":"2026-11-25T12:00:00.000Z"}`},
	} {
		if err := v.Exchange(c.req, []byte(c.body), c.status, json, []byte(c.answer)); err == nil {
			t.Errorf("%s: no mismatch found", name)
		}
	}
}
