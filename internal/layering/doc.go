// Package layering holds the test that keeps the map in
// docs/architecture.md true: the doors (graph, rest, checkoutpage) never
// import each other, no internal/ package (nor its tests) imports a door,
// the GraphQL door's engines (graph/engine, graph/wstransport) depend on
// no internal/ package, on neither ent nor the door (their tests import
// nothing under internal/), and only the
// infrastructure packages named in the test, each with its reason, import
// net/http; and no internal/ package's exported API names entgql's
// pagination types (cursors, connections, orders, where inputs), which are
// the GraphQL door's. It has no code of its own.
package layering
