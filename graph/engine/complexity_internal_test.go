package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/generated"
)

// countingSchema counts the cost calculations reaching the schema.
type countingSchema struct {
	graphql.ExecutableSchema
	calls int
}

func (c *countingSchema) Complexity(ctx context.Context, typeName, field string, child int, args map[string]any) (int, bool) {
	c.calls++
	return c.ExecutableSchema.Complexity(ctx, typeName, field, child, args)
}

// An operation's cost is computed once when it cannot depend on the
// variables, and on every request when it can: a connection's page size
// or a list of ids given as variables must never be served from the memo.
func TestComplexityMemoOnlyKeepsCostsWithoutVariables(t *testing.T) {
	es := &countingSchema{ExecutableSchema: NewSchema(generated.NewExecutableSchema(generated.Config{}), Options{DefaultPageSize: 20, MaxPageSize: 100})}
	limit := NewComplexityLimit(300)
	if err := limit.Validate(es); err != nil {
		t.Fatal(err)
	}
	docs := map[string]*ast.QueryDocument{}
	run := func(query, vars string) (cost int, calls int, refused bool) {
		t.Helper()
		doc := docs[query]
		if doc == nil {
			var errs gqlerror.List
			if doc, errs = gqlparser.LoadQueryWithRules(es.Schema(), query, nil); len(errs) > 0 {
				t.Fatalf("%s: %v", query, errs)
			}
			docs[query] = doc // gqlgen's query cache: one parse per text
		}
		var v map[string]any
		d := json.NewDecoder(strings.NewReader(vars))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		oc := &graphql.OperationContext{Doc: doc, Operation: doc.Operations[0], Variables: v}
		before := es.calls
		gerr := limit.MutateOperationContext(context.Background(), oc)
		return costOf(t, oc), es.calls - before, gerr != nil
	}

	read := `query($id: ID!) { voucher(id: $id) { id code expectedPayment { amount } } }`
	c1, n1, _ := run(read, `{"id": "vch_a"}`)
	c2, n2, _ := run(read, `{"id": "vch_b"}`)
	if n1 == 0 || n2 != 0 || c1 != c2 || c1 != 5 {
		t.Fatalf("read: costs %d then %d, calculations %d then %d; want 5 twice, the second from the memo", c1, c2, n1, n2)
	}

	page := `query($n: Int) { vouchers(first: $n) { edges { node { id code } } } }`
	small, ns, refusedSmall := run(page, `{"n": 1}`)
	big, nb, refusedBig := run(page, `{"n": 100}`)
	again, na, _ := run(page, `{"n": 1}`)
	if ns == 0 || nb == 0 || na == 0 {
		t.Fatalf("page: calculations %d, %d, %d; a cost read from a variable must be computed every time", ns, nb, na)
	}
	if refusedSmall || !refusedBig || small >= big || again != small {
		t.Fatalf("page: cost %d (refused %v) at 1, %d (refused %v) at 100, %d at 1 again", small, refusedSmall, big, refusedBig, again)
	}

	nodes := `query($ids: [ID!]!) { nodes(ids: $ids) { id } }`
	one, _, _ := run(nodes, `{"ids": ["vch_a"]}`)
	many, nm, _ := run(nodes, `{"ids": ["vch_a", "vch_b", "vch_c"]}`)
	if nm == 0 || many <= one {
		t.Fatalf("nodes: cost %d for one id, %d for three (calculations %d)", one, many, nm)
	}
}

func costOf(t *testing.T, oc *graphql.OperationContext) int {
	t.Helper()
	s, ok := oc.Stats.GetExtension(complexityExtension).(*extension.ComplexityStats)
	if !ok {
		t.Fatalf("no complexity statistics: %#v", oc.Stats.GetExtension(complexityExtension))
	}
	return s.Complexity
}
