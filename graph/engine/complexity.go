package engine

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// ComplexityLimit refuses an operation costing more than limit, as gqlgen's
// extension.FixedComplexityLimit does (same error, same statistics), but
// computes an operation's cost once when the cost cannot depend on the
// request's variables. Walking the document and building every field's
// argument map was about 9 µs of a 450 µs read (docs/performance.md), and
// most operations cost the same every time: only a connection's page size
// and a list of ids (Schema.Complexity) read arguments, which may be
// variables. An operation whose cost read any argument is computed on
// every request. Costs are kept per parsed operation, which stays the same
// while gqlgen's query cache holds its document, for at most
// complexityMemoSize operations.
type ComplexityLimit struct {
	limit int
	es    graphql.ExecutableSchema
	memo  *lru.Cache[*ast.OperationDefinition, int]
}

const complexityMemoSize = 1000

// The names gqlgen's own limit uses, so tools reading its statistics
// (extension.GetComplexityStats) and its error code still work.
const (
	complexityExtension = "ComplexityLimit"
	errComplexityLimit  = "COMPLEXITY_LIMIT_EXCEEDED"
)

// NewComplexityLimit refuses operations costing more than limit.
func NewComplexityLimit(limit int) *ComplexityLimit {
	memo, err := lru.New[*ast.OperationDefinition, int](complexityMemoSize)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &ComplexityLimit{limit: limit, memo: memo}
}

var _ interface {
	graphql.OperationContextMutator
	graphql.HandlerExtension
} = &ComplexityLimit{}

// ExtensionName is gqlgen's own limit's name.
func (*ComplexityLimit) ExtensionName() string { return complexityExtension }

// Validate keeps the schema whose costs it computes.
func (c *ComplexityLimit) Validate(es graphql.ExecutableSchema) error {
	c.es = es
	return nil
}

// MutateOperationContext refuses an operation costing more than the limit
// and records its cost in the operation's statistics, as gqlgen's does.
func (c *ComplexityLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	cost, err := c.cost(ctx, oc)
	if err != nil {
		return err
	}
	oc.Stats.SetExtension(complexityExtension, &extension.ComplexityStats{Complexity: cost, ComplexityLimit: c.limit})
	if cost > c.limit {
		err := gqlerror.Errorf("operation has complexity %d, which exceeds the limit of %d", cost, c.limit)
		errcode.Set(err, errComplexityLimit)
		return err
	}
	return nil
}

func (c *ComplexityLimit) cost(ctx context.Context, oc *graphql.OperationContext) (int, *gqlerror.Error) {
	op := oc.Operation
	if op == nil {
		return 0, gqlerror.Errorf("no operation to run")
	}
	if cost, ok := c.memo.Get(op); ok {
		return cost, nil
	}
	var readArgs bool
	cost := calculate(context.WithValue(ctx, argsReadKey{}, &readArgs), c.es, op, oc.Doc, oc.Variables)
	if !readArgs {
		c.memo.Add(op, cost)
	}
	return cost, nil
}

type argsReadKey struct{}

// argsRead notes, during a complexity calculation, that a field's cost
// read its arguments: the operation's cost may then change with its
// variables.
func argsRead(ctx context.Context) {
	if p, ok := ctx.Value(argsReadKey{}).(*bool); ok {
		*p = true
	}
}

// calculate is gqlgen's complexity.Calculate (the same costs, field by
// field) with each fragment's cost computed once and reused at every spread
// of it: gqlgen's walk expands every spread again, so fragments spreading
// each other twice per level double its work per level. A fragment's cost
// cannot depend on where it is spread (its fields, arguments and the
// operation's variables are the same everywhere). Sums saturate.
func calculate(ctx context.Context, es graphql.ExecutableSchema, op *ast.OperationDefinition, doc *ast.QueryDocument, vars map[string]any) int {
	w := costWalker{es: es, schema: es.Schema(), vars: vars, frags: map[string]int{}}
	return w.set(ctx, op.SelectionSet)
}

type costWalker struct {
	es     graphql.ExecutableSchema
	schema *ast.Schema
	vars   map[string]any
	frags  map[string]int
}

func (w *costWalker) set(ctx context.Context, set ast.SelectionSet) int {
	var total int
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			total = saturatingAdd(total, w.field(ctx, s))
		case *ast.FragmentSpread:
			cost, ok := w.frags[s.Name]
			if !ok && s.Definition != nil {
				w.frags[s.Name] = 0 // a cycle (validation refuses them) costs nothing more
				cost = w.set(ctx, s.Definition.SelectionSet)
				w.frags[s.Name] = cost
			}
			total = saturatingAdd(total, cost)
		case *ast.InlineFragment:
			total = saturatingAdd(total, w.set(ctx, s.SelectionSet))
		}
	}
	return total
}

func (w *costWalker) field(ctx context.Context, s *ast.Field) int {
	if s.Definition == nil || s.ObjectDefinition == nil {
		return 0
	}
	def := w.schema.Types[s.Definition.Type.Name()]
	if def == nil || def.Name == "__Schema" {
		return 0
	}
	var child int
	switch def.Kind {
	case ast.Object, ast.Interface, ast.Union:
		child = w.set(ctx, s.SelectionSet)
	}
	args := s.ArgumentMap(w.vars)
	if s.ObjectDefinition.Kind != ast.Interface {
		return w.fieldCost(ctx, s.ObjectDefinition, def.Kind, s.Name, child, args)
	}
	// An interface's field costs what its most expensive implementation's does.
	var most int
	for _, t := range w.schema.GetPossibleTypes(s.ObjectDefinition) {
		most = max(most, w.fieldCost(ctx, t, def.Kind, s.Name, child, args))
	}
	return most
}

func (w *costWalker) fieldCost(ctx context.Context, on *ast.Definition, kind ast.DefinitionKind, field string, child int, args map[string]any) int {
	if c, ok := w.es.Complexity(ctx, on.Name, field, child, args); ok && c >= 1 {
		return c
	}
	return saturatingAdd(1, child)
}

// saturatingAdd adds non-negative costs without overflowing (negative ones,
// from a custom cost gone wrong, are ignored), as gqlgen's walk does.
func saturatingAdd(a, b int) int {
	a, b = max(a, 0), max(b, 0)
	if c := a + b; c >= a {
		return c
	}
	return int(^uint(0) >> 1)
}
