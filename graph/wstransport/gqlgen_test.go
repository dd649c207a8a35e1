package wstransport_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/graph/wstransport"
)

// The engine (this transport, and graph/engine: the lean POST, GET, the
// complexity memo and the per-selection renderers) replaces parts of gqlgen and leans on its
// internals: the OperationContext's fields, the executor's
// ResponseHandler protocol, transport.WebsocketInitFunc and the
// per-operation contexts. It is written against these exact versions; an
// upgrade must re-read those parts of gqlgen (handler/transport's
// websocket, POST and GET, complexity, graphql/executor) and then move
// these pins.
const (
	gqlgenVersion    = "v0.17.90"
	gqlparserVersion = "v2.5.33"
)

// What the engine implements and takes from gqlgen, checked at compile time.
var (
	_ graphql.Transport               = (*wstransport.Transport)(nil)
	_ graphql.Transport               = engine.Post{}
	_ graphql.Transport               = engine.Get{}
	_ graphql.ExecutableSchema        = (*engine.Schema)(nil)
	_ graphql.HandlerExtension        = (*engine.ComplexityLimit)(nil)
	_ graphql.OperationContextMutator = (*engine.ComplexityLimit)(nil)
	_ transport.WebsocketInitFunc     = transport.WebsocketInitFunc(nil)
	_ graphql.ResponseHandler         = graphql.ResponseHandler(nil)
	_ graphql.RootFieldMiddleware     = graphql.RootFieldMiddleware(nil)
	_ graphql.FieldMiddleware         = graphql.FieldMiddleware(nil)
	_ func(*graphql.OperationContext) = func(oc *graphql.OperationContext) {
		_, _, _, _ = oc.ResolverMiddleware, oc.RootResolverMiddleware, oc.DisableIntrospection, oc.RecoverFunc
	}
)

// The versions come from the build list the go command selects (go list
// -m), which is what builds the binary; test binaries carry no module
// list of their own (debug.ReadBuildInfo reports no dependencies in them),
// so a binary built from a checkout reports the same through
// voucherd_build_info instead.
func TestTiedToGqlgenVersion(t *testing.T) {
	want := map[string]string{"github.com/99designs/gqlgen": gqlgenVersion, "github.com/vektah/gqlparser/v2": gqlparserVersion}
	for path, v := range want {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}|{{with .Replace}}{{.Path}} {{.Version}}{{end}}", path).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", path, err)
		}
		got, replaced, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
		if replaced != "" {
			t.Errorf("%s is replaced (%s): the engine is written against %s %s", path, replaced, path, v)
		}
		if got != v {
			t.Errorf("%s is %s; the engine (graph/wstransport, graph/engine) is written against %s: re-read what it replaces in gqlgen before moving this pin", path, got, v)
		}
	}
	// The pin is visible where a reader looks for it.
	b, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*github\.com/99designs/gqlgen ` + regexp.QuoteMeta(gqlgenVersion) + `\s*$`).Match(b) {
		t.Errorf("go.mod does not require github.com/99designs/gqlgen %s", gqlgenVersion)
	}
}
