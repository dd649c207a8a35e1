package graph

import "github.com/voucherd/voucherd/graph/wstransport"

// Websocket close codes the GraphQL door sends besides the protocol's own
// (graph/wstransport lists them all; docs/graphql-websockets.md explains
// them).
const (
	// CloseForbidden refuses a bad token in connection_init, and ends a
	// connection whose token expired (graphql-transport-ws 4403 Forbidden).
	CloseForbidden = wstransport.CloseForbidden
	// CloseBadRequest refuses a connection_init whose credentials are in a
	// shape the server does not read (graphql-transport-ws 4400 is the
	// protocol's code for an invalid message).
	CloseBadRequest = wstransport.CloseInvalidMessage
	// CloseInitTimeout ends a connection that sent no connection_init in
	// time (graphql-transport-ws 4408).
	CloseInitTimeout = wstransport.CloseInitTimeout
)
