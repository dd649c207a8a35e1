// Package graph is the GraphQL door: the gqlgen schema in graph/schema, thin
// resolvers over the same internal services REST calls, the error presenter
// and the server's transports.
package graph

import (
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/widget"
)

//go:generate go run github.com/99designs/gqlgen generate --config ../gqlgen.yml

// Resolver holds the services resolvers call. It holds no database
// client: every rule, who may follow what on voucherUpdated included, is
// a service's.
type Resolver struct {
	Identity *identity.Service
	Sessions *session.Service
	// Businesses owns businesses and memberships.
	Businesses *business.Service
	// Webhooks owns webhook endpoints, events and deliveries.
	Webhooks *webhook.Service
	// Vouchers owns vouchers: their visibility, transitions and queries.
	Vouchers *voucher.Service
	// Finance serves the token registry and rates.
	Finance *finance.Service
	// Widgets owns widgets (the business's widget writes).
	Widgets *widget.Service
	// Hub fans voucher changes out to voucherUpdated subscribers.
	Hub *pubsub.Hub
}
