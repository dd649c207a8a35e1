// Package graph is the GraphQL door: the gqlgen schema in graph/schema,
// one-line resolvers over the same internal services REST calls, the
// server wiring (server.go: transports, limits, rate limits, connection_init
// authentication) and the error presenter. What replaces parts of gqlgen's
// own machinery lives beside it: graph/engine (POST and GET, the complexity
// memo, subscriptions rendered once per selection shape) and
// graph/wstransport (the websocket transport); neither knows of vouchers
// or of any internal/ package. What voucherUpdated follows, who may
// follow it and in which order it sends is the door's (vouchers_stream.go).
package graph

import (
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/services"
)

//go:generate go run github.com/99designs/gqlgen generate --config ../gqlgen.yml

// Resolver holds the services resolvers call: the same set the REST door
// holds (internal/services), and the hub voucherUpdated subscribes to. It
// holds no database client: every rule, who may follow what on
// voucherUpdated included, is a service's.
type Resolver struct {
	services.Services
	// Hub fans voucher changes out to voucherUpdated subscribers.
	Hub *pubsub.Hub
	// feeds is what voucherUpdated's subscriptions share; NewHandler sets
	// it on its copy of the Resolver.
	feeds *voucherFeeds
}
