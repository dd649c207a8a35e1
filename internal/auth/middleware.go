package auth

import (
	"context"
	"net/http"
)

// Verifier turns a bearer token into a principal (the Issuer is one).
type Verifier interface {
	Verify(ctx context.Context, token string) (*Principal, error)
}

// Middleware attaches the caller proven by a valid bearer token to the
// request context. A missing or invalid token leaves the request anonymous;
// the guards then answer unauthorized, and open routes stay open.
func Middleware(v Verifier, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := BearerToken(r.Header.Get("Authorization")); ok {
			if p, err := v.Verify(r.Context(), tok); err == nil {
				r = r.WithContext(WithPrincipal(r.Context(), p))
			}
		}
		next.ServeHTTP(w, r)
	})
}
