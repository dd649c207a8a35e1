package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/auth"
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
	// noKey: the operation's caller is not an API key, so rule 3 has
	// nothing to hold (fieldMiddleware decides it once per operation).
	noKey bool
	// plans render voucher(id:)'s answer when its selection allows
	// (readplan.go); nil: gqlgen renders every field.
	plans *readPlans
}

func (f fieldRules) around(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	res, err := f.resolve(ctx, fc, next)
	if err != nil {
		return res, internalError(ctx, fc, err)
	}
	if f.plans != nil {
		if v, ok := res.(*ent.Voucher); ok && fc.Object == "Query" && fc.Field.Name == "voucher" && isRootField(fc) {
			if m := f.plans.render(fc.Field, v); m != nil {
				return m, nil
			}
		}
	}
	return nullForAbsent(fc, res), nil
}

func (f fieldRules) resolve(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	if !f.noKey {
		if err := keyScopes(ctx, fc); err != nil {
			return nil, err
		}
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

// fieldMiddleware gives every operation the door's field middleware
// (fieldRules, then the tests' hook when there is one) as the operation's
// ResolverMiddleware, instead of registering it with AroundFields: gqlgen
// chains AroundFields middleware through a closure made for every field
// of every answer (one allocation per field and middleware, before any
// rule runs), where a ResolverMiddleware set once is called as it is. It is
// an OperationContextMutator registered before the others, so every
// operation that runs (queries, mutations and subscriptions, on every
// transport) runs its fields through it, as AroundFields did.
//
// A query or mutation whose caller is not an API key gets the rules
// without keyScopes: its caller is its request's (or its websocket's) for
// the whole operation, so keyScopes would find no key at every field, one
// walk up the field's context chain each. Subscriptions always get the
// whole rules: the engine renders their events with the middleware of
// whichever subscription came first (engine.Schema), for every caller.
type fieldMiddleware struct {
	mw, noKey graphql.FieldMiddleware
}

// plans is nil with the tests' hook, which observes every field: with it,
// gqlgen renders them all.
func newFieldMiddleware(rules fieldRules, hook graphql.FieldMiddleware, plans *readPlans) fieldMiddleware {
	noKey := rules
	noKey.noKey = true
	noKey.plans = plans
	return fieldMiddleware{mw: withHook(rules, hook), noKey: withHook(noKey, hook)}
}

func withHook(rules fieldRules, hook graphql.FieldMiddleware) graphql.FieldMiddleware {
	if hook == nil {
		return rules.around
	}
	return func(ctx context.Context, next graphql.Resolver) (any, error) {
		return rules.around(ctx, func(ctx context.Context) (any, error) { return hook(ctx, next) })
	}
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = fieldMiddleware{}

func (fieldMiddleware) ExtensionName() string                   { return "FieldRules" }
func (fieldMiddleware) Validate(graphql.ExecutableSchema) error { return nil }

func (f fieldMiddleware) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	oc.ResolverMiddleware = f.mw
	if oc.Operation != nil && oc.Operation.Operation != ast.Subscription && !auth.FromContext(ctx).IsAPIKey() {
		oc.ResolverMiddleware = f.noKey
	}
	return nil
}
