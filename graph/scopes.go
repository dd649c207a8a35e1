package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/operation"
)

// keyScopes brings a business's API key to operation.Authorize on the
// GraphQL door where no service would: every nested field the table names
// (Business.webhookEndpoints and Business.widgets are ent edges that no
// service reads) by the operation whose reads it makes, and every root
// field by its operation before any resolver runs (a root field the table
// does not know is closed to keys). Other callers pass untouched: their
// guards are applied by the services (operation.Caller).
func keyScopes(ctx context.Context, fc *graphql.FieldContext) error {
	p := auth.FromContext(ctx)
	if !p.IsAPIKey() {
		return nil
	}
	if fc == nil || fc.Field.Field == nil || strings.HasPrefix(fc.Field.Name, "__") {
		return nil
	}
	field := fc.Object + "." + fc.Field.Name
	if isRootField(fc) {
		op, ok := operation.ByField(field)
		if !ok {
			return apperr.Newf(apperr.Forbidden, "%s is not open to API keys", fc.Field.Name)
		}
		return operation.Authorize(op, p)
	}
	if op, ok := operation.ByNestedField(field); ok {
		return operation.Authorize(op, p)
	}
	return nil
}
