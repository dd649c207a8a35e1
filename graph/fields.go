package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/internal/metrics"
)

// fieldRules is the graph's one field middleware. gqlgen wraps every field
// of every answer in each registered field middleware, a closure and a
// call per field and middleware, so the rules that apply to fields run in
// one: with five middlewares a voucher(id:) read of 15 fields cost 32
// allocations and about a fifth of the door's CPU more (BenchmarkGraphQLRead).
// Outermost first, as they were registered before:
//  1. a plain error from a resolver becomes internal (internalError);
//  2. an absent optional value is null (nullForAbsent);
//  3. a business's API key is held to its scopes before anything runs
//     (keyScopes);
//  4. root fields only: the metrics count the outcome (outside the rate
//     limits, so a refused field counts too) and the rate limits charge
//     the field's budget (limits.aroundFields).
type fieldRules struct {
	lim     *limits
	metrics *metrics.GraphQL
}

func (f fieldRules) around(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	res, err := f.resolve(ctx, fc, next)
	if err != nil {
		return res, internalError(ctx, fc, err)
	}
	return nullForAbsent(fc, res), nil
}

func (f fieldRules) resolve(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	if err := keyScopes(ctx, fc); err != nil {
		return nil, err
	}
	if !isRootField(fc) || strings.HasPrefix(fc.Field.Name, "__") {
		return next(ctx)
	}
	res, err := f.limited(ctx, next)
	if f.metrics != nil {
		f.metrics.Field(fc.Object+"."+fc.Field.Name, err)
	}
	return res, err
}

func (f fieldRules) limited(ctx context.Context, next graphql.Resolver) (any, error) {
	if f.lim == nil {
		return next(ctx)
	}
	return f.lim.aroundFields(ctx, next)
}
