package operation

import (
	"context"

	"github.com/voucherd/voucherd/internal/auth"
)

// Authorize is the one place a caller is admitted to an operation: every
// door and every service reaches it (through Admit or Caller; GraphQL's
// nested fields that read for an operation through graph's keyScopes),
// and nothing else judges a token against an operation. p is the caller, nil when the
// request carries no token. It returns nil, an unauthorized error (no
// token) or a forbidden one (a token the operation does not admit).
//
// What depends on the data (the payee only, an ACTIVE member, an OWNER or
// ADMIN) is the domain's rule, applied after this by the service that
// loads the data.
//
// A business's API key is admitted by its scopes instead (AdmitKey): to
// an open operation, or to one whose scope it holds.
func Authorize(op *Op, p *auth.Principal) error {
	if p.IsAPIKey() {
		return AdmitKey(op, p)
	}
	return op.Guard.Err(p)
}

type admittedKey struct{}

// admission records that a door admitted the caller to op.
type admission struct {
	op *Op
	p  *auth.Principal
}

// Admit is a door's check of op, before it reads anything of the request:
// Authorize for the caller in ctx. It returns the caller and a context
// recording the admission, so that the service the door then calls (which
// asks Caller for the same op) does not judge the caller again.
func Admit(ctx context.Context, op *Op) (context.Context, *auth.Principal, error) {
	p := auth.FromContext(ctx)
	if err := Authorize(op, p); err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, admittedKey{}, admission{op: op, p: p}), p, nil
}

// Caller returns the caller in ctx once it is admitted to op: at once when
// a door already admitted this caller to op (Admit), else by Authorize. A
// service starts with it; op is the operation the service method performs.
func Caller(ctx context.Context, op *Op) (*auth.Principal, error) {
	p := auth.FromContext(ctx)
	if a, ok := ctx.Value(admittedKey{}).(admission); ok && a.op == op && a.p == p {
		return p, nil
	}
	if err := Authorize(op, p); err != nil {
		return nil, err
	}
	return p, nil
}
