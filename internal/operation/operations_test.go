package operation

import (
	"net/http"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/ratelimit"
)

// The table is well formed: names, routes and fields are unique, every
// route is a valid ServeMux pattern under /api/v1, every field a root field,
// every group one of the spec's, and every operation reachable by a door.
func TestTable(t *testing.T) {
	if len(All()) < 30 {
		t.Fatalf("only %d operations", len(All()))
	}
	names, routes, budgets := map[string]bool{}, map[string]string{}, map[string]string{}
	mux := http.NewServeMux()
	for _, o := range All() {
		if o.Name == "" || names[o.Name] {
			t.Errorf("operation name %q empty or repeated", o.Name)
		}
		names[o.Name] = true
		if o.REST == "" && o.GraphQL == "" && o != RefusedDocument {
			t.Errorf("%s: neither a REST route nor a GraphQL field", o.Name)
		}
		if o.REST == "" && len(o.Aliases) > 0 {
			t.Errorf("%s: aliases without a route", o.Name)
		}
		for _, p := range append([]string{o.REST}, o.Aliases...) {
			if p == "" {
				continue
			}
			method, path, ok := strings.Cut(p, " ")
			if !ok || (method != http.MethodGet && method != http.MethodPost) || !strings.HasPrefix(path, "/api/v1/") && path != "/api/v1" {
				t.Errorf("%s: route %q is not \"GET|POST /api/v1/...\"", o.Name, p)
				continue
			}
			if prev, dup := routes[p]; dup {
				t.Errorf("%s: route %q already belongs to %s", o.Name, p, prev)
			}
			routes[p] = o.Name
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: ServeMux refuses %q: %v", o.Name, p, r)
					}
				}()
				mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
			}()
			if ratelimit.Operation(p) != o.Budget() {
				t.Errorf("%s: alias %q would spend budget %q, not %q", o.Name, p, ratelimit.Operation(p), o.Budget())
			}
		}
		if o.GraphQL != "" {
			obj, field, _ := strings.Cut(o.GraphQL, ".")
			if (obj != "Query" && obj != "Mutation" && obj != "Subscription") || field == "" {
				t.Errorf("%s: GraphQL field %q is not Query.x, Mutation.x or Subscription.x", o.Name, o.GraphQL)
			}
			if got, _ := ByField(o.GraphQL); got != o {
				t.Errorf("%s: field %s is declared twice", o.Name, o.GraphQL)
			}
			if obj == "Subscription" && o.Group != "" {
				t.Errorf("%s: subscriptions spend no budget", o.Name)
			}
			if obj != "Subscription" && o.Group == "" {
				t.Errorf("%s: a query or mutation must have a rate group", o.Name)
			}
		}
		if o.Group != "" {
			if _, ok := ratelimit.SpecTable()[o.Group]; !ok {
				t.Errorf("%s: unknown rate group %q", o.Name, o.Group)
			}
		}
		if prev, dup := budgets[o.Budget()]; dup {
			t.Errorf("%s and %s share the budget %q", prev, o.Name, o.Budget())
		}
		budgets[o.Budget()] = o.Name
	}
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		op   *Op
		want string
	}{
		{SignIn, "POST /api/v1/auth/sign-in"},
		{ListBusinesses, "GET /api/v1/businesses"},
		{GetVoucher, "GET /api/v1/vouchers/{}"},
		{Viewer, "GraphQL viewer"},
		{Node, "GraphQL node"},
		{RefusedDocument, "GraphQL refused document"},
	} {
		if got := tc.op.Budget(); got != tc.want {
			t.Errorf("%s: budget %q, want %q", tc.op.Name, got, tc.want)
		}
	}
}
