package graph

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/internal/apperr"
)

// internalError turns a plain error from a field's resolver into internal
// (the services return *apperr.Error for everything a caller should see),
// so the presenter can tell a bug, whose text must not leak, from gqlgen's
// own argument errors, which are the caller's (fieldRules).
func internalError(ctx context.Context, fc *graphql.FieldContext, err error) error {
	if fc != nil && strings.HasPrefix(fc.Field.Name, "__") {
		return err // introspection, refused outside development: the caller's
	}
	if outOfTime(ctx, err) {
		return errOutOfTime()
	}
	var ae *apperr.Error
	var ge *gqlerror.Error
	if !errors.As(err, &ae) && !errors.As(err, &ge) {
		err = apperr.InternalError(err)
	}
	return err
}

// presentError puts the service's error code in extensions.code; internal
// causes are logged, never shown.
func presentError(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gerr := graphql.DefaultErrorPresenter(ctx, err)
		var ae *apperr.Error
		if errors.As(err, &ae) {
			if ae.Code == apperr.Internal {
				log.ErrorContext(ctx, "graphql request failed", "err", ae.Error(), "path", gerr.Path.String())
			}
			gerr.Message = ae.Message
			if gerr.Message == "" {
				gerr.Message = string(ae.Code)
			}
			ext := map[string]any{"code": string(ae.Code)}
			if len(ae.Details) > 0 {
				ext["details"] = ae.Details
			}
			if ae.RetryAfterSeconds > 0 {
				ext["retryAfter"] = ae.RetryAfterSeconds
			}
			gerr.Extensions = ext
			return gerr
		}
		// gqlgen's own errors: parse, validation, complexity, argument
		// coercion. All are the caller's, except a non-null field left
		// null, which is ours.
		code := apperr.ValidationFailed
		if gerr.Path != nil && gerr.Message == "must not be null" {
			code = apperr.Internal
			log.ErrorContext(ctx, "graphql request failed", "err", gerr.Message, "path", gerr.Path.String())
		}
		if strings.HasPrefix(gerr.Message, "json request body could not be decoded") {
			// gqlgen echoes the whole body, which may hold a password.
			gerr.Message = engine.NotGraphQLRequest
		}
		gerr.Extensions = map[string]any{"code": string(code)}
		return gerr
	}
}

// refusalStatus is the HTTP status a request error asks for over POST and
// GET (engine.Refusals; 0: the GraphQL-over-HTTP spec's): 405 with Allow:
// POST for a mutation over GET, 429 with Retry-After past a rate limit.
func refusalStatus(err error, h http.Header) int {
	var ae *apperr.Error
	if !errors.As(err, &ae) {
		return 0
	}
	switch ae.Code {
	case apperr.MethodNotAllowed:
		h.Set("Allow", http.MethodPost)
		return http.StatusMethodNotAllowed
	case apperr.RateLimit:
		if ae.RetryAfterSeconds > 0 {
			h.Set("Retry-After", strconv.Itoa(ae.RetryAfterSeconds))
		}
		return http.StatusTooManyRequests
	}
	return 0
}
