package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/operation"
)

// keyScopes is the GraphQL door's one check of a business's API key
// against the operations table (operation.AdmitKey): every root field by
// its operation, and every nested field the table names (Business.events,
// Business.webhookEndpoints, ...) by the operation whose reads it makes.
// A root field the table does not know is closed to keys. Other callers
// pass untouched (their guards are the services').
func keyScopes(ctx context.Context, next graphql.Resolver) (any, error) {
	p := auth.FromContext(ctx)
	if !p.IsAPIKey() {
		return next(ctx)
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || strings.HasPrefix(fc.Field.Name, "__") {
		return next(ctx)
	}
	field := fc.Object + "." + fc.Field.Name
	if isRootField(fc) {
		op, ok := operation.ByField(field)
		if !ok {
			return nil, apperr.Newf(apperr.Forbidden, "%s is not open to API keys", fc.Field.Name)
		}
		if err := operation.AdmitKey(op, p); err != nil {
			return nil, err
		}
		return next(ctx)
	}
	if op, ok := operation.ByNestedField(field); ok {
		if err := operation.AdmitKey(op, p); err != nil {
			return nil, err
		}
	}
	return next(ctx)
}
