// Package auth knows who is calling: the principal a bearer token proves, how
// it travels in a context, and the guards of the spec (registered user,
// registered user or resource, business user) that internal/operation
// applies to each operation.
package auth

import (
	"context"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Kind is the kind of token a principal presented.
type Kind string

const (
	// KindUser is an email-password account (id prefix usr_).
	KindUser Kind = "user"
	// KindDevice is a mobile device (id prefix dev_).
	KindDevice Kind = "device"
	// KindResource is a payee signed in with a payer's context code; its
	// subject is the voucher session (id prefix ses_).
	KindResource Kind = "resource"
	// KindAPIKey is a business's server holding an API key (vsk_…); its
	// subject is the key's id (bak_), never the key.
	KindAPIKey Kind = "apikey"
)

// Scope is a power an API key grants: a key reaches an operation only when
// the operation names a scope (internal/operation) and the key holds it.
type Scope string

// The scopes a key may hold.
const (
	ScopeVouchersRead   Scope = "vouchers:read"
	ScopeCheckoutsWrite Scope = "checkouts:write"
	ScopeWidgetsRead    Scope = "widgets:read"
	ScopeWidgetsWrite   Scope = "widgets:write"
	ScopeWebhooksRead   Scope = "webhooks:read"
	ScopeWebhooksWrite  Scope = "webhooks:write"
	ScopeEventsRead     Scope = "events:read"
	ScopeBusinessRead   Scope = "business:read"
)

// Scopes lists every scope, in the order the docs give them.
var Scopes = []Scope{
	ScopeVouchersRead, ScopeCheckoutsWrite, ScopeWidgetsRead, ScopeWidgetsWrite,
	ScopeWebhooksRead, ScopeWebhooksWrite, ScopeEventsRead, ScopeBusinessRead,
}

// ValidScope reports whether s names a scope.
func ValidScope(s string) bool {
	for _, sc := range Scopes {
		if string(sc) == s {
			return true
		}
	}
	return false
}

// Principal is the authenticated caller.
type Principal struct {
	Kind Kind
	// ID is the subject: a usr_, dev_ or (for resources) ses_ id.
	ID string
	// TokenID is the token's jti, for logs and revocation; never the token.
	TokenID   string
	ExpiresAt time.Time
	// BusinessID and Scopes are an API key's (KindAPIKey): the one
	// business it acts for and what it may do there.
	BusinessID string
	Scopes     []Scope
}

// IsAPIKey reports whether the caller is a business's API key.
func (p *Principal) IsAPIKey() bool { return p != nil && p.Kind == KindAPIKey }

// HasScope reports whether the caller is an API key holding s.
func (p *Principal) HasScope(s Scope) bool {
	if !p.IsAPIKey() {
		return false
	}
	for _, have := range p.Scopes {
		if have == s {
			return true
		}
	}
	return false
}

// IsRegistered reports whether the caller is a registered user or device.
func (p *Principal) IsRegistered() bool {
	return p != nil && (p.Kind == KindUser || p.Kind == KindDevice)
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the caller, or nil when the request is anonymous.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}

var errUnauthorized = apperr.New(apperr.Unauthorized, "bearer token missing or invalid")

// Guard is the token check an operation declares (the spec's guards).
// internal/operation gives every operation one and is the one place that
// applies it (operation.Authorize).
type Guard uint8

const (
	// GuardOpen needs no token.
	GuardOpen Guard = iota
	// GuardAny admits every kind of token (RegisteredUserOrResourceGuard).
	GuardAny
	// GuardRegistered admits user and device tokens (RegisteredUserGuard).
	GuardRegistered
	// GuardUser admits user tokens only (the token half of BusinessUserGuard).
	GuardUser
	// GuardWidgetClient is a widget's public routes: the widget's client
	// secret (X-Client-Secret) or a bearer token. Which secret or whose
	// token opens which widget is the widget service's rule (it needs the
	// widget), so Check lets every caller through to it; only a caller with
	// neither credential is refused (401) there, as Admits says.
	GuardWidgetClient
)

// Err applies the guard to caller p (nil: no token): nil when it passes,
// else unauthorized (no token) or forbidden (a token of the wrong kind).
// An open guard, and a widget client's (whose credentials the widget
// service judges), pass every caller.
func (g Guard) Err(p *Principal) error {
	switch g {
	case GuardOpen, GuardWidgetClient:
		return nil
	}
	if p == nil {
		return errUnauthorized
	}
	if g.Admits(&p.Kind) {
		return nil
	}
	switch g {
	case GuardRegistered:
		return apperr.New(apperr.Forbidden, "this operation needs a registered user or device token")
	case GuardUser:
		return apperr.New(apperr.Forbidden, "this operation needs a user token")
	}
	return apperr.New(apperr.Forbidden, "this operation does not admit this token")
}

// Admits reports whether a caller of kind k (nil for no token) passes g.
func (g Guard) Admits(k *Kind) bool {
	switch g {
	case GuardOpen:
		return true
	case GuardAny:
		return k != nil
	case GuardRegistered:
		return k != nil && (*k == KindUser || *k == KindDevice)
	case GuardUser:
		return k != nil && *k == KindUser
	case GuardWidgetClient:
		return k != nil
	}
	return false
}

func (g Guard) String() string {
	switch g {
	case GuardOpen:
		return "open"
	case GuardAny:
		return "any token"
	case GuardRegistered:
		return "registered user or device"
	case GuardUser:
		return "user"
	case GuardWidgetClient:
		return "widget client secret or bearer token"
	}
	return "unknown guard"
}
