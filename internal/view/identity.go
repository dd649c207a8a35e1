package view

import (
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/identity"
)

// Auth is the answer of sign-up and sign-in: the token and whom it names.
type Auth struct {
	Authorization Authorization `json:"authorization"`
	User          *Account      `json:"user,omitempty"`
}

// Authorization is a bearer token and its expiry.
type Authorization struct {
	Token     string       `json:"token"`
	ExpiresAt apitime.Time `json:"expiresAt"`
}

// Account names the signed-in user or device.
type Account struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// OfAuth renders a sign-up or sign-in result for REST.
func OfAuth(r *identity.Result) *Auth {
	out := &Auth{Authorization: Authorization{Token: r.Authorization.Token, ExpiresAt: r.Authorization.ExpiresAt}}
	if r.User != nil {
		out.User = &Account{ID: r.User.ID, Type: r.User.Type}
	}
	return out
}
