package layering_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Pagination is the GraphQL door's. The domain has one list per entity (a
// query scoped to what the caller may see); the doors page it, GraphQL
// with entgql's cursors, orders and where inputs, REST with limit and
// offset. So no internal/ package's exported API names entgql, nor a type
// ent generates for entgql's connections (ent/gql_pagination.go: Cursor,
// PageInfo, the *Connection, *Edge, *Order, *OrderField and
// *PaginateOption types) or its where inputs (ent/gql_where_input.go).
// Tests in internal/ may use them: they are not API.

const entgqlPath = "entgo.io/contrib/entgql"

// forbidden holds, per import path, the names an exported declaration may
// not use from it; a nil set forbids the whole package.
type forbidden map[string]map[string]bool

// paginationTypes reads the forbidden ent names from ent's generated
// entgql files, so a new entity's types are covered without a change here.
func paginationTypes(t *testing.T, root string) forbidden {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range []string{"gql_pagination.go", "gql_where_input.go"} {
		f, err := parser.ParseFile(fset, filepath.Join(root, "ent", name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("ent's generated %s: %v", name, err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						names[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, must := range []string{"Cursor", "PageInfo", "VoucherConnection", "VoucherOrder", "VoucherWhereInput"} {
		if !names[must] {
			t.Fatalf("ent's generated entgql files declare no %s: has the generator moved it? (found %d names)", must, len(names))
		}
	}
	return forbidden{entgqlPath: nil, module + "/ent": names}
}

// exportedPagination returns, for one parsed file, each place its exported
// API names a forbidden type: exported functions, exported methods of
// exported types, exported types (their exported fields and methods,
// embedded types, type parameters) and exported variables and constants
// (their types, or their values when the type is inferred).
func exportedPagination(fset *token.FileSet, f *ast.File, bad forbidden) []string {
	pkgOf := map[string]string{} // the file's name for a package → its path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		pkgOf[name] = path
	}
	var found []string
	check := func(what string, n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			path, ok := pkgOf[x.Name]
			if !ok {
				return true
			}
			names, listed := bad[path]
			if listed && (names == nil || names[sel.Sel.Name]) {
				found = append(found, fset.Position(sel.Pos()).String()+": "+what+" names "+x.Name+"."+sel.Sel.Name)
			}
			return true
		})
	}
	exportedType := map[string]bool{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				exportedType[ts.Name.Name] = ts.Name.IsExported()
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			what := "func " + d.Name.Name
			if d.Recv != nil {
				recv := receiverName(d.Recv.List[0].Type)
				// A method of an unexported type is not API, unless the
				// type is declared in another file of the package: then
				// judge it (the test errs on the strict side).
				if exported, known := exportedType[recv]; known && !exported || !known && !ast.IsExported(recv) {
					continue
				}
				what = "method " + recv + "." + d.Name.Name
			}
			check(what, d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					what := "type " + s.Name.Name
					if s.TypeParams != nil {
						check(what, s.TypeParams)
					}
					switch ty := s.Type.(type) {
					case *ast.StructType:
						for _, fld := range ty.Fields.List {
							if exportedField(fld) {
								check(what, fld.Type)
							}
						}
					case *ast.InterfaceType:
						for _, m := range ty.Methods.List {
							if exportedField(m) {
								check(what, m.Type)
							}
						}
					default:
						check(what, s.Type)
					}
				case *ast.ValueSpec:
					for i, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						what := "var " + n.Name
						if d.Tok == token.CONST {
							what = "const " + n.Name
						}
						if s.Type != nil {
							check(what, s.Type)
						} else if i < len(s.Values) {
							check(what, s.Values[i])
						}
					}
				}
			}
		}
	}
	return found
}

// exportedField reports whether a struct field or interface method list
// entry is API: a named exported one, or an embedded exported type (an
// embedded interface's or struct's methods are promoted).
func exportedField(f *ast.Field) bool {
	if len(f.Names) == 0 {
		return ast.IsExported(receiverName(f.Type))
	}
	for _, n := range f.Names {
		if n.IsExported() {
			return true
		}
	}
	return false
}

// receiverName is the base type name of a receiver or embedded field:
// T, *T, T[P], pkg.T.
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestNoPaginationTypesInDomainAPI holds every non-test file under
// internal/ to the rule above.
func TestNoPaginationTypesInDomainAPI(t *testing.T) {
	root := moduleRoot(t)
	bad := paginationTypes(t, root)
	fset := token.NewFileSet()
	files := 0
	var found []string
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		found = append(found, exportedPagination(fset, f, bad)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d files under internal/", files)
	}
	sort.Strings(found)
	for _, f := range found {
		rel, _ := filepath.Rel(root, f)
		if rel == "" || strings.HasPrefix(rel, "..") {
			rel = f
		}
		t.Errorf("%s: pagination types are the GraphQL door's; return the domain's one list (a scoped ent query) and page it in graph/ (REST: internal/paging)", rel)
	}
}

// TestExportedPaginationFinds proves the check on sources it must flag and
// sources it must pass.
func TestExportedPaginationFinds(t *testing.T) {
	bad := forbidden{entgqlPath: nil, module + "/ent": {"Cursor": true, "VoucherOrder": true, "VoucherWhereInput": true, "VoucherConnection": true}}
	const header = `package x
import (
	"context"
	"entgo.io/contrib/entgql"
	"github.com/voucherd/voucherd/ent"
	gent "github.com/voucherd/voucherd/ent"
)
var _ = context.Background
var _ entgql.Cursor[string]
var _ ent.Cursor
var _ gent.Cursor
`
	for _, c := range []struct {
		name, src string
		want      int
	}{
		{"func param", `func Connection(ctx context.Context, after *ent.Cursor) {}`, 1},
		{"func result", `func List() (*ent.VoucherConnection, error) { return nil, nil }`, 1},
		{"aliased import", `func List(o *gent.VoucherOrder) {}`, 1},
		{"entgql itself", `func List(d entgql.OrderDirection) {}`, 1},
		{"method of an exported type", `type S struct{}
func (s *S) Page(w *ent.VoucherWhereInput) {}`, 1},
		{"exported field", `type In struct{ Where *ent.VoucherWhereInput }`, 1},
		{"embedded", `type In struct{ ent.VoucherOrder }`, 1},
		{"interface method", `type L interface{ Page(*ent.Cursor) }`, 1},
		{"alias", `type Cursor = ent.Cursor`, 1},
		{"typed var", `var Default *ent.VoucherOrder`, 1},
		{"inferred var", `var Default = &ent.VoucherOrder{}`, 1},
		{"generic", `func P[T ent.VoucherConnection]() {}`, 1},
		{"scoped query is fine", `func List(ctx context.Context) (*ent.VoucherQuery, error) { return nil, nil }`, 0},
		{"unexported func", `func page(after *ent.Cursor) {}`, 0},
		{"method of an unexported type", `type s struct{}
func (s) Page(after *ent.Cursor) {}`, 0},
		{"unexported field", `type In struct{ where *ent.VoucherWhereInput }`, 0},
		{"body only", `func List() { var o *ent.VoucherOrder; _ = o }`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", header+c.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			// The header's blank vars are not exported: only c.src counts.
			if got := exportedPagination(fset, f, bad); len(got) != c.want {
				t.Fatalf("found %d, want %d: %v", len(got), c.want, got)
			}
		})
	}
}
