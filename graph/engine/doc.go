// Package engine is the execution machinery of the GraphQL door that
// replaces parts of gqlgen; package graph keeps the schema, the one-line
// resolvers, the server wiring and the error presenter, and mounts these.
// The websocket transport, the largest such part, is its own package
// (graph/wstransport). Each part here replaces one piece of gqlgen, keeps
// what a client sees (status codes, bodies, error codes, statistics) and
// exists because make bench measured gqlgen's piece (docs/performance.md).
// It is generic GraphQL execution: it knows nothing of the service (no
// package under internal/, not ent, not the door; internal/layering holds
// it to that), and what is about the service the door passes in (Options,
// Refusals, a Stream per subscription):
//
//   - Post replaces transport.POST. It decodes the body graph's limitBody
//     already read (NewReadBody; gqlgen reads it again into a new buffer),
//     with decodeParams when limitBody's JSON check passed it, variables
//     included (encoding/json took 0.75 ms for a 59 KiB document;
//     docs/hardening.md), recognises application/json without
//     mime.ParseMediaType, sets its one header without building header
//     maps, and writes a
//     data-only answer as {"data":...} around the executor's bytes (gqlgen
//     passes them through json.Marshal, which validates, compacts and
//     copies them once more). With the complexity memo, the whole /graphql
//     read in process (BenchmarkGraphQLRead, SQLite) went from 34.8 KiB and
//     487 allocations to 32.6 KiB and 465.
//   - Get replaces transport.GET: gqlgen answers request errors 200 or 422
//     with "data": null, which the GraphQL-over-HTTP audit flags; Get answers
//     them as the spec says (400 without data, 405 and Allow: POST for a
//     mutation), and so do Post's (Refusals.WriteRequestErrors and
//     WriteMalformed, with the door's error code and statuses).
//   - ComplexityLimit replaces extension.FixedComplexityLimit (the same error
//     code and statistics). It computes an operation's cost once when the
//     cost cannot depend on the variables (walking the document and building
//     every field's argument map was about 9 µs of a 450 µs read), and costs
//     each fragment once where gqlgen's walk expands every spread again
//     (fragments spreading each other twice per level doubled its work per
//     level: a document could hold a CPU).
//   - Schema wraps the generated executable schema. It prices connections by
//     their page size and nodes(ids:) by the number of ids, and it takes the
//     per-subscriber response loop of a subscription field started with
//     Subscribe over: gqlgen resolves and serializes every event per
//     subscriber and keeps its per-operation state (field contexts,
//     CollectFields cache, OperationContext) for the life of the
//     subscription. Here a subscription keeps only the door's Stream (for
//     voucherUpdated, its hub mailbox), the parsed operation and an
//     interned fingerprint of its selection; an event is rendered once per
//     selection shape and the response shared (Shared), by the door's plan
//     for the shape when it has one (Options.Plan: a Plan[V] writes the
//     value as the generated code would, without it), else by a pool of
//     renderers per shape (gqlgen's generated code run once and fed one
//     value per rendering), and the websocket transport calls the
//     subscription's handler without gqlgen's per-call wrapper
//     (wstransport.HandleDirectly). Figures, for voucherUpdated: live heap per idle
//     subscription 7.6 → 3.4 KiB; rendering CPU in the 1,000 changes/s
//     phase 0.42 → 0.17 s per 11 s; fan-out to 5,000 subscribers 1.35x a
//     bare websocket writer (target 1.5x).
//
// Tied to gqlgen v0.17.90 and gqlparser v2.5.33: it implements
// graphql.Transport and graphql.HandlerExtension, copies the cost rules of
// gqlgen's complexity.Calculate and drives the executor's
// OperationContext and ResponseHandler as that version does.
// graph/wstransport/gqlgen_test.go fails when the module versions move, so
// an upgrade re-reads gqlgen's handler/transport, complexity and
// graphql/executor first.
package engine
