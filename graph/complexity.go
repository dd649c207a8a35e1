package graph

import (
	"context"

	"github.com/99designs/gqlgen/complexity"
	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// complexityLimit refuses an operation costing more than limit, as gqlgen's
// extension.FixedComplexityLimit does (same error, same statistics), but
// computes an operation's cost once when the cost cannot depend on the
// request's variables. Walking the document and building every field's
// argument map was about 9 µs of a 450 µs read (docs/performance.md), and
// most operations cost the same every time: only a connection's page size
// and a list of ids (execSchema.Complexity) read arguments, which may be
// variables. An operation whose cost read any argument is computed on
// every request. Costs are kept per parsed operation, which stays the same
// while gqlgen's query cache holds its document, for at most
// complexityMemoSize operations.
type complexityLimit struct {
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

func newComplexityLimit(limit int) *complexityLimit {
	memo, err := lru.New[*ast.OperationDefinition, int](complexityMemoSize)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &complexityLimit{limit: limit, memo: memo}
}

var _ interface {
	graphql.OperationContextMutator
	graphql.HandlerExtension
} = &complexityLimit{}

func (*complexityLimit) ExtensionName() string { return complexityExtension }

func (c *complexityLimit) Validate(es graphql.ExecutableSchema) error {
	c.es = es
	return nil
}

func (c *complexityLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
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

func (c *complexityLimit) cost(ctx context.Context, oc *graphql.OperationContext) (int, *gqlerror.Error) {
	op := oc.Operation
	if op == nil {
		return 0, gqlerror.Errorf("no operation to run")
	}
	if cost, ok := c.memo.Get(op); ok {
		return cost, nil
	}
	var readArgs bool
	cost := complexity.Calculate(context.WithValue(ctx, argsReadKey{}, &readArgs), c.es, op, oc.Variables)
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
