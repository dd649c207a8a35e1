// Package services names the domain services the doors call. The
// composition root (cmd/voucherd) builds them once and hands the same set
// to the REST door (rest.Register) and the GraphQL door (graph.Resolver),
// so both doors reach a rule through the same service.
package services

import (
	"github.com/voucherd/voucherd/internal/apikey"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/widget"
)

// Services are the domain services, one of each.
type Services struct {
	// Identity signs callers up and in and says who they are.
	Identity *identity.Service
	// Sessions owns voucher sessions (a payer's context).
	Sessions *session.Service
	// Businesses owns businesses and memberships.
	Businesses *business.Service
	// Webhooks owns webhook endpoints, events and deliveries.
	Webhooks *webhook.Service
	// Vouchers owns vouchers: their visibility, transitions and queries.
	Vouchers *voucher.Service
	// Finance serves the token registry, prices and rates.
	Finance *finance.Service
	// Widgets owns widgets and their public checkout operations.
	Widgets *widget.Service
	// APIKeys owns a business's API keys and proves them.
	APIKeys *apikey.Service
}
