// Package testsupport is the one parent of what tests share: testpg (a
// throwaway PostgreSQL cluster), testdb (a fresh SQLite or PostgreSQL
// database per test), testserver (the real voucherd binary and a client
// checked against the OpenAPI document), apiclient (the HTTP client of both
// doors that testserver and the bench share), testbrowser (headless
// Chromium), testanvil (anvil, an independent EVM node) and testnode (the
// npm packages tests drive).
// The service binary never imports them (the layering test holds that);
// tools that need a throwaway database (cmd/migrategen, the bench) may.
// It sits outside internal/ because testserver drives a door (it checks
// exchanges against the REST door's OpenAPI document), and no internal/
// package may depend on a door.
package testsupport
