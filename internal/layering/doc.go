// Package layering holds the test that keeps the map in
// docs/architecture.md true: the doors (graph, rest, checkoutpage) never
// import each other, no internal/ package (nor its tests) imports a door,
// and only the
// infrastructure packages named in the test, each with its reason, import
// net/http. It has no code of its own.
package layering
