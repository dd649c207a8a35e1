package graph

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/bounds"
	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
)

// No document holds a CPU (docs/hardening.md): documentBounds
// measures every document gqlgen has not already validated before gqlgen
// parses and validates it (graph/bounds), the complexity walk costs each
// fragment once (graph/engine/complexity.go), every request runs under a time budget,
// and a refused document spends rate-limit budget like a field does
// (guardedTransport), so a client sending hostile documents back to back is
// soon answered 429 without further work.

// DefaultTimeBudget is how long one query or mutation may take, from its
// request's arrival to its answer.
const DefaultTimeBudget = time.Second

// documentBounds is the gqlgen extension that runs graph/bounds before
// parsing and validation (an OperationParameterMutator runs first), and
// keeps the text rules (no NUL, valid UTF-8) for the document's string
// values and the variables, whichever transport brought them.
type documentBounds struct {
	limits bounds.Limits
	// cache is the server's query cache: a document in it was measured
	// and validated when it entered.
	cache graphql.Cache[*ast.QueryDocument]
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = documentBounds{}

func (documentBounds) ExtensionName() string                   { return "DocumentBounds" }
func (documentBounds) Validate(graphql.ExecutableSchema) error { return nil }

func (b documentBounds) MutateOperationParameters(ctx context.Context, p *graphql.RawParams) *gqlerror.Error {
	if field, ok := badText(p.Variables, "variables"); !ok {
		return textRefusal(field)
	}
	if field, ok := badTextString(p.OperationName, "operationName"); !ok {
		return textRefusal(field)
	}
	if _, ok := b.cache.Get(ctx, p.Query); ok {
		return nil
	}
	doc, err := bounds.Check(p.Query, b.limits)
	if err != nil {
		return err
	}
	if !valuesText(doc) {
		return textRefusal("query")
	}
	return nil
}

func textRefusal(field string) *gqlerror.Error {
	msg := field + " must not contain a NUL character or invalid UTF-8"
	err := &gqlerror.Error{Message: msg, Err: apperr.Invalid(field, "must not contain a NUL character or invalid UTF-8")}
	errcode.Set(err, errcode.ValidationFailed)
	return err
}

func badTextString(s, field string) (string, bool) {
	return field, strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// badText walks decoded JSON variables; it reports the first field
// breaking the text rules.
func badText(v any, field string) (string, bool) {
	switch v := v.(type) {
	case string:
		return badTextString(v, field)
	case []any:
		for _, x := range v {
			if f, ok := badText(x, field); !ok {
				return f, false
			}
		}
	case map[string]any:
		for k, x := range v {
			if f, ok := badTextString(k, field); !ok {
				return f, false
			}
			if f, ok := badText(x, field+"."+k); !ok {
				return f, false
			}
		}
	}
	return field, true
}

// valuesText reports whether every string literal of doc (arguments,
// directive arguments, defaults), once its escapes are decoded, keeps the
// text rules: the raw document was checked, but "\u0000" is a NUL.
func valuesText(doc *ast.QueryDocument) bool {
	ok := true
	var value func(v *ast.Value)
	value = func(v *ast.Value) {
		if v == nil || !ok {
			return
		}
		if v.Kind == ast.StringValue || v.Kind == ast.BlockValue || v.Kind == ast.EnumValue {
			if _, good := badTextString(v.Raw, ""); !good {
				ok = false
				return
			}
		}
		for _, c := range v.Children {
			value(c.Value)
		}
	}
	args := func(as ast.ArgumentList) {
		for _, a := range as {
			value(a.Value)
		}
	}
	dirs := func(ds ast.DirectiveList) {
		for _, d := range ds {
			args(d.Arguments)
		}
	}
	var set func(ast.SelectionSet)
	set = func(s ast.SelectionSet) {
		for _, sel := range s {
			switch s := sel.(type) {
			case *ast.Field:
				args(s.Arguments)
				dirs(s.Directives)
				set(s.SelectionSet)
			case *ast.InlineFragment:
				dirs(s.Directives)
				set(s.SelectionSet)
			case *ast.FragmentSpread:
				dirs(s.Directives)
			}
		}
	}
	for _, op := range doc.Operations {
		for _, v := range op.VariableDefinitions {
			value(v.DefaultValue)
		}
		dirs(op.Directives)
		set(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		dirs(f.Directives)
		set(f.SelectionSet)
	}
	return ok
}

// guardedTransport hands its transport an executor that charges refused
// documents to the caller's rate-limit budget (when the limits are on) and
// to its address's pacing (pacing.go).
type guardedTransport struct {
	graphql.Transport
	lim *limits
}

func (t guardedTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	t.Transport.Do(w, r, guardedExec{GraphExecutor: exec, lim: t.lim})
}

type guardedExec struct {
	graphql.GraphExecutor
	lim *limits
}

func (e guardedExec) CreateOperationContext(ctx context.Context, p *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	charge, err := paceOperation(ctx)
	if err != nil {
		// The socket's operation ended while it waited its turn.
		return &graphql.OperationContext{}, gqlerror.List{{Message: "the operation ended while waiting", Err: errOutOfTime()}}
	}
	oc, errs := e.GraphExecutor.CreateOperationContext(ctx, p)
	if len(errs) > 0 {
		if charge != nil {
			charge()
		} else {
			refusedPaced(ctx)
		}
		if err := e.lim.refused(ctx); err != nil {
			return oc, gqlerror.List{err}
		}
	}
	return oc, errs
}

// timeBudget bounds a query or mutation sent over a websocket (HTTP
// requests are bounded by limitBody): its context ends after budget, so
// database work stops and the answer goes out. Subscription events are
// bounded by the websocket's write deadline instead.
func timeBudget(budget time.Duration) graphql.ResponseMiddleware {
	return func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
		if wstransport.ConnFromContext(ctx) == nil || !graphql.HasOperationContext(ctx) {
			return next(ctx)
		}
		if oc := graphql.GetOperationContext(ctx); oc.Operation == nil || oc.Operation.Operation == ast.Subscription {
			return next(ctx)
		}
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		return next(ctx)
	}
}

// errOutOfTime is what a field answers when its request's time budget
// ran out before it could be resolved.
func errOutOfTime() error {
	return apperr.New(apperr.Unavailable, "the request ran out of its time budget")
}

func outOfTime(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || (ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded))
}
