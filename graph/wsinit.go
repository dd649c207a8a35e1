package graph

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
)

// initFunc authenticates connection_init. The payload's credentials may
// take the shapes clients commonly send (initCredentials). A bad token
// closes the socket with 4403 (after a connection_error message on the
// legacy protocol, which expects one); credentials in a shape it does not
// know close it with 4400, never leaving the connection silently
// anonymous. A good token ends the connection with 4403 when it expires,
// or when its grounds end first (Sockets): every subscription on it ends,
// and the client reconnects with a fresh token.
func initFunc(v auth.Verifier, sockets *Sockets) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		raw, err := initCredentials(payload)
		if err != nil {
			return ctx, nil, &wstransport.CloseError{Code: CloseBadRequest, Reason: err.Error(), Err: apperr.New(apperr.ValidationFailed, err.Error())}
		}
		if raw == "" {
			// The upgrade request's Authorization header may have proven
			// the caller (auth.Middleware): that principal ends at its
			// token's expiry like one from connection_init. A connection
			// without a token may still use open operations.
			if p := auth.FromContext(ctx); p != nil {
				return expireAt(ctx, p, v, sockets)
			}
			return ctx, nil, nil
		}
		tok, ok := auth.BearerToken(raw)
		var p *auth.Principal
		if ok && v != nil {
			p, err = v.Verify(ctx, tok)
		}
		if !ok || v == nil || err != nil {
			return ctx, nil, forbidden()
		}
		return expireAt(auth.WithPrincipal(ctx, p), p, v, sockets)
	}
}

// errInitShape is the 4400 reason for credentials initCredentials cannot read.
var errInitShape = errors.New(`connection_init: unrecognised credentials; send {"Authorization": "Bearer <token>"}`)

// initCredentials finds the Authorization value in a connection_init
// payload, in the shapes clients send:
//
//	{"Authorization": "Bearer <token>"}            (also "authorization")
//	{"headers": {"Authorization": "Bearer <token>"}} (Apollo-style links)
//	{"authToken": "<token>"}                         (also "token", "accessToken"; "Bearer " optional)
//
// "" means no credentials at all. Anything else that looks like
// credentials (a key naming auth or a token, a value of the wrong type,
// two different tokens) is an error: the caller meant to authenticate, and
// the connection must not go on anonymous.
func initCredentials(p transport.InitPayload) (string, error) {
	var found []string
	add := func(v any, bare bool) error {
		s, ok := v.(string)
		if !ok {
			return errInitShape
		}
		if bare && !strings.HasPrefix(strings.ToLower(s), "bearer ") {
			s = "Bearer " + s
		}
		found = append(found, s)
		return nil
	}
	for k, v := range p {
		switch k {
		case "Authorization", "authorization":
			if err := add(v, false); err != nil {
				return "", err
			}
		case "authToken", "token", "accessToken":
			if err := add(v, true); err != nil {
				return "", err
			}
		case "headers":
			h, ok := v.(map[string]any)
			if !ok {
				return "", errInitShape
			}
			for hk, hv := range h {
				if strings.EqualFold(hk, "Authorization") {
					if err := add(hv, false); err != nil {
						return "", err
					}
				} else if credentialKey(hk) {
					return "", errInitShape
				}
			}
		default:
			if credentialKey(k) {
				return "", errInitShape
			}
		}
	}
	for _, s := range found[min(1, len(found)):] {
		if s != found[0] {
			return "", errors.New("connection_init: two different credentials")
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

// credentialKey reports whether a payload key looks like it carries
// credentials.
func credentialKey(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "auth") || strings.Contains(k, "token") || strings.Contains(k, "bearer") ||
		strings.Contains(k, "jwt") || strings.Contains(k, "secret") || strings.Contains(k, "password")
}

func forbidden() error {
	return &wstransport.CloseError{Code: CloseForbidden, Reason: "Forbidden", Err: apperr.New(apperr.Unauthorized, "Forbidden")}
}

// expireAt refuses a principal whose token has expired, and schedules the
// connection's close (4403) at its token's expiry: every query, mutation
// and subscription on it ends then, and the client reconnects with a
// fresh token. It registers the connection in sockets, so that it also
// closes when the token's grounds end first (a session closed, a
// membership ended), and then checks once more that they have not ended
// meanwhile (v's Recheck, when it has one: the check that proved p may
// have run before an end whose Sockets.End found nothing to close).
func expireAt(ctx context.Context, p *auth.Principal, v auth.Verifier, sockets *Sockets) (context.Context, *transport.InitPayload, error) {
	if !p.ExpiresAt.IsZero() && !time.Now().Before(p.ExpiresAt) {
		return ctx, nil, forbidden()
	}
	c := wstransport.ConnFromContext(ctx)
	if c == nil {
		return ctx, nil, nil
	}
	if !p.ExpiresAt.IsZero() {
		c.CloseAt(p.ExpiresAt, CloseForbidden, "Forbidden: token expired")
	}
	sockets.add(c, p)
	if rc, ok := v.(Rechecker); ok {
		if err := rc.Recheck(ctx, p); err != nil {
			if apperr.From(err).Code == apperr.Internal {
				return ctx, nil, &wstransport.CloseError{Code: wstransport.CloseInternalError, Reason: "internal error", Err: err}
			}
			return ctx, nil, forbidden()
		}
	}
	return ctx, nil, nil
}
