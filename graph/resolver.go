// Package graph is the GraphQL door: the gqlgen schema in graph/schema, thin
// resolvers over the same internal services REST calls, the error presenter
// and the server's transports.
package graph

import (
	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/session"
)

//go:generate go run github.com/99designs/gqlgen generate --config ../gqlgen.yml

// Resolver holds the services resolvers call.
type Resolver struct {
	Client   *ent.Client
	Identity *identity.Service
	Sessions *session.Service
}
