// Package graph is the GraphQL door: the gqlgen schema in graph/schema,
// one-line resolvers over the same internal services REST calls, the
// server wiring (server.go: transports, limits, rate limits, connection_init
// authentication) and the error presenter. What replaces parts of gqlgen's
// own machinery lives beside it: graph/engine (POST and GET, the complexity
// memo, voucherUpdated's shared renderers) and graph/wstransport (the
// websocket transport).
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
}
