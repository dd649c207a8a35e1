package graph

import (
	"bytes"
	"maps"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"

	"github.com/voucherd/voucherd/graph/generated"
)

// SchemaFile is where `make generate` writes the printed schema (cmd/printschema),
// relative to the module root.
const SchemaFile = "graph/schema.graphql"

// codegenDirective reports whether a directive only steers code generation
// (gqlgen's @goModel, @goField, @goTag, ..., entgql's): clients never see
// or send one.
func codegenDirective(name string) bool {
	return strings.HasPrefix(name, "go") || strings.HasPrefix(name, "entgql")
}

// publicSchema returns s without the code-generation directives'
// definitions: what introspection shows and documents are validated
// against (generated.Config.Schema). Their uses on types and fields are left in place (introspection
// never shows applied directives); the definitions are shared with s.
func publicSchema(s *ast.Schema) *ast.Schema {
	out := *s
	out.Directives = make(map[string]*ast.DirectiveDefinition, len(s.Directives))
	for name, d := range s.Directives {
		if !codegenDirective(name) {
			out.Directives[name] = d
		}
	}
	return &out
}

// PrintSchema returns the schema the GraphQL door serves, as SDL in one
// document with no code-generation directive (their definitions and their
// uses), types in name order: what `make generate` commits at SchemaFile
// and GET /graphql/schema.graphql serves in development.
func PrintSchema() []byte {
	s := generated.NewExecutableSchema(generated.Config{}).Schema()
	out := *publicSchema(s)
	out.Types = make(map[string]*ast.Definition, len(s.Types))
	for name, def := range s.Types {
		d := *def
		d.Directives = stripDirectives(def.Directives)
		d.Fields = make(ast.FieldList, len(def.Fields))
		for i, f := range def.Fields {
			fc := *f
			fc.Directives = stripDirectives(f.Directives)
			fc.Arguments = make(ast.ArgumentDefinitionList, len(f.Arguments))
			for j, a := range f.Arguments {
				ac := *a
				ac.Directives = stripDirectives(a.Directives)
				fc.Arguments[j] = &ac
			}
			d.Fields[i] = &fc
		}
		d.EnumValues = make(ast.EnumValueList, len(def.EnumValues))
		for i, v := range def.EnumValues {
			vc := *v
			vc.Directives = stripDirectives(v.Directives)
			d.EnumValues[i] = &vc
		}
		out.Types[name] = &d
	}
	// One definition at a time, so that they can be set apart by a blank
	// line (the formatter writes them back to back); directives first,
	// then types, each in name order.
	var blocks []string
	for _, name := range slices.Sorted(maps.Keys(out.Directives)) {
		if !specifiedDirectives[name] {
			// @defer is gqlparser's built-in but not the spec's: a client
			// learns it from the schema, as introspection shows it.
			blocks = append(blocks, format(&ast.Schema{Directives: map[string]*ast.DirectiveDefinition{name: out.Directives[name]}}, formatter.WithBuiltin()))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(out.Types)) {
		if def := out.Types[name]; !def.BuiltIn {
			blocks = append(blocks, format(&ast.Schema{Types: map[string]*ast.Definition{name: def}}))
		}
	}
	if out.Query != nil && out.Query.Name != "Query" || out.Mutation != nil && out.Mutation.Name != "Mutation" ||
		out.Subscription != nil && out.Subscription.Name != "Subscription" {
		panic("graph: root types not named Query, Mutation, Subscription need a schema definition in PrintSchema")
	}
	blocks = slices.DeleteFunc(blocks, func(b string) bool { return b == "" }) // built-ins print nothing
	return []byte(strings.Join(blocks, "\n"))
}

// specifiedDirectives are the GraphQL specification's own directives,
// which every schema has and printers leave out (as graphql-js does).
var specifiedDirectives = map[string]bool{"include": true, "skip": true, "deprecated": true, "specifiedBy": true, "oneOf": true}

func format(s *ast.Schema, opts ...formatter.FormatterOption) string {
	var buf bytes.Buffer
	formatter.NewFormatter(&buf, append([]formatter.FormatterOption{formatter.WithIndent("  ")}, opts...)...).FormatSchema(s)
	return buf.String()
}

func stripDirectives(l ast.DirectiveList) ast.DirectiveList {
	var out ast.DirectiveList
	for _, d := range l {
		if !codegenDirective(d.Name) {
			out = append(out, d)
		}
	}
	return out
}
