package graph_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/graph"
)

// The committed printed schema is the one the service serves: `make
// generate` rewrites it, and this fails while it is stale. It is one
// valid SDL document without any code-generation directive.
func TestPrintedSchemaIsCommitted(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", graph.SchemaFile))
	if err != nil {
		t.Fatalf("%v (run make generate)", err)
	}
	printed := graph.PrintSchema()
	if !bytes.Equal(committed, printed) {
		t.Fatalf("%s is stale: run make generate and commit it", graph.SchemaFile)
	}
	for _, bad := range []string{"@go", "@entgql"} {
		if strings.Contains(string(printed), bad) {
			t.Errorf("the printed schema holds %s", bad)
		}
	}
	s, gerr := gqlparser.LoadSchema(&ast.Source{Name: "schema.graphql", Input: string(printed)})
	if gerr != nil {
		t.Fatalf("the printed schema does not load: %v", gerr)
	}
	if s.Query == nil || s.Mutation == nil || s.Subscription == nil || s.Types["Voucher"] == nil {
		t.Fatal("the printed schema lacks Query, Mutation, Subscription or Voucher")
	}
}
