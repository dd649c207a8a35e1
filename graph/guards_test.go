package graph_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/graph/generated"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The services' own token checks agree with the guards the operations table
// declares. The GraphQL door checks no token itself, so every Query and
// Mutation field is sent, with made-up arguments, by each kind of caller
// (none, a payee's resource token, a device, a user): the guard's refusals
// must be exactly unauthorized/forbidden, and a caller the guard admits must
// get past it (to not_found, a validation error or an answer). The REST door
// is held to the same table on the same server.
func TestServicesApplyTheTablesGuards(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	payer := srv.Device(t)
	_, code := srv.Session(t, payer)
	callers := []struct {
		kind  *auth.Kind
		token string
	}{
		{nil, ""},
		{kindPtr(auth.KindResource), srv.Resource(t, code).Token},
		{kindPtr(auth.KindDevice), srv.Device(t).Token},
		{kindPtr(auth.KindUser), srv.User(t).Token},
	}
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	checked := 0
	for _, op := range operation.All() {
		obj, name, _ := strings.Cut(op.GraphQL, ".")
		var def *ast.Definition
		switch obj {
		case "Query":
			def = schema.Query
		case "Mutation":
			def = schema.Mutation
		}
		for _, c := range callers {
			who := "no token"
			if c.kind != nil {
				who = string(*c.kind)
			}
			if def != nil {
				doc, vars := document(t, schema, strings.ToLower(obj), def.Fields.ForName(name))
				res := srv.GraphQL(t, c.token, doc, vars)
				var codes []string
				for _, e := range res.Errors {
					code, _ := e.Extensions["code"].(string)
					codes = append(codes, code)
				}
				checkGuard(t, fmt.Sprintf("GraphQL %s as %s", op.GraphQL, who), op.Guard, c.kind, codes)
				checked++
			}
			if op.REST != "" {
				method, path, _ := strings.Cut(op.REST, " ")
				r := srv.Do(t, method, restPath(path), c.token, nil)
				checkGuard(t, fmt.Sprintf("REST %s as %s", op.REST, who), op.Guard, c.kind, []string{r.Code()})
			}
		}
	}
	if checked < 4*25 {
		t.Fatalf("checked only %d field calls", checked)
	}
}

func kindPtr(k auth.Kind) *auth.Kind { return &k }

// checkGuard: refused callers get exactly the guard's error; admitted ones
// none of the guard's errors.
func checkGuard(t *testing.T, what string, g auth.Guard, k *auth.Kind, codes []string) {
	t.Helper()
	want := ""
	switch {
	case g.Admits(k):
	case k == nil:
		want = "unauthorized"
	default:
		want = "forbidden"
	}
	if want == "" {
		for _, c := range codes {
			if c == "unauthorized" || c == "forbidden" {
				t.Errorf("%s: %s, but the table's guard (%s) admits this caller", what, c, g)
			}
		}
		return
	}
	if len(codes) == 0 || codes[0] != want {
		t.Errorf("%s: got %v, want %s (the table's guard: %s)", what, codes, want, g)
	}
}

var wildcard = regexp.MustCompile(`\{[^}$]*\}`)

func restPath(pattern string) string {
	return strings.ReplaceAll(wildcard.ReplaceAllString(pattern, "x_1"), "{$}", "")
}

// document is a one-field operation calling f with a made-up value for each
// required argument, passed as variables.
func document(t *testing.T, schema *ast.Schema, kind string, f *ast.FieldDefinition) (string, map[string]any) {
	t.Helper()
	if f == nil {
		t.Fatal("field missing from the schema")
	}
	vars := map[string]any{}
	var params, args []string
	for _, a := range f.Arguments {
		if !a.Type.NonNull || a.DefaultValue != nil {
			continue
		}
		params = append(params, fmt.Sprintf("$%s: %s", a.Name, a.Type.String()))
		args = append(args, fmt.Sprintf("%s: $%s", a.Name, a.Name))
		vars[a.Name] = valueOf(schema, a.Type, 0)
	}
	sort.Strings(params)
	doc := kind
	if len(params) > 0 {
		doc += "(" + strings.Join(params, ", ") + ")"
	}
	doc += " { " + f.Name
	if len(args) > 0 {
		doc += "(" + strings.Join(args, ", ") + ")"
	}
	if d := schema.Types[f.Type.Name()]; d != nil && (d.Kind == ast.Object || d.Kind == ast.Interface || d.Kind == ast.Union) {
		doc += " { __typename }"
	}
	return doc + " }", vars
}

// valueOf is a value of type ty: valid as GraphQL input, meaningless to the
// service (ids name nothing).
func valueOf(schema *ast.Schema, ty *ast.Type, depth int) any {
	if ty.Elem != nil {
		return []any{}
	}
	switch ty.NamedType {
	case "ID", "String":
		return "x_1"
	case "Int":
		return 1
	case "Float":
		return 1.5
	case "Boolean":
		return false
	case "Time":
		return "2026-01-01T00:00:00Z"
	case "Decimal":
		return "1"
	}
	d := schema.Types[ty.NamedType]
	switch {
	case d == nil:
		return nil
	case d.Kind == ast.Enum:
		return d.EnumValues[0].Name
	case d.Kind == ast.InputObject && depth < 5:
		obj := map[string]any{}
		for _, f := range d.Fields {
			if f.Type.NonNull && f.DefaultValue == nil {
				obj[f.Name] = valueOf(schema, f.Type, depth+1)
			}
		}
		return obj
	}
	return map[string]any{}
}
