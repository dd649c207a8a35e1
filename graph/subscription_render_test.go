package graph_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	gqlgraphql "github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/graph"
)

// A subscription renders each change with its own variables even though
// it keeps none of gqlgen's per-operation state between changes: a
// selection whose directives read variables is not shared, and each
// subscriber gets what its variables ask for — the current state first
// (id) and every change after.
func TestSubscriptionRendersWithItsVariables(t *testing.T) {
	var renders atomic.Int64
	hook := func(ctx context.Context, next gqlgraphql.Resolver) (any, error) {
		if fc := gqlgraphql.GetFieldContext(ctx); fc != nil && fc.Object == "Voucher" && fc.Field.Name == "version" {
			renders.Add(1)
		}
		return next(ctx)
	}
	h := newHarness(t, "sqlite3", harnessOptions{graph: graph.WithFieldHook(graph.Options{}, hook)})
	payer := h.device()
	ses, payee := h.session(payer)
	const bySession = `subscription($s: ID, $st: Boolean!) {
		voucherUpdated(sessionId: $s) { __typename id status @include(if: $st) v: version }
	}`
	const byID = `subscription($id: ID, $st: Boolean!) {
		voucherUpdated(id: $id) { id ... on Voucher @skip(if: $st) { status } v: version }
	}`
	with, without := dialWS(t, h.ws, transportWS), dialWS(t, h.ws, legacyWS)
	with.init(payer.token)
	without.init(payer.token)
	with.subscribe("s", bySession, map[string]any{"s": ses.ID, "st": true})
	without.subscribe("s", bySession, map[string]any{"s": ses.ID, "st": false})
	waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 2 })

	fields := func(c *wsClient, id string) map[string]any {
		t.Helper()
		var ev struct{ VoucherUpdated map[string]any }
		c.result(id, 3*time.Second, &ev)
		return ev.VoucherUpdated
	}
	check := func(got map[string]any, status bool, version int) {
		t.Helper()
		if _, ok := got["status"]; ok != status {
			t.Fatalf("status present = %v, want %v: %v", ok, status, got)
		}
		if got["v"] != float64(version) {
			t.Fatalf("v = %v, want %d: %v", got["v"], version, got)
		}
	}
	v := h.reserve(payee, ses.Code, nil)
	got := fields(with, "s")
	check(got, true, 1)
	if got["__typename"] != "Voucher" || got["id"] != v.ID || got["status"] != "RESERVED" {
		t.Fatalf("got %v", got)
	}
	check(fields(without, "s"), false, 1)
	if n := renders.Load(); n != 2 {
		t.Fatalf("rendered %d times for 2 subscribers whose variables differ, want 2", n)
	}

	// By id: the current state, rendered with the subscriber's variables.
	watch := dialWS(t, h.ws, transportWS)
	watch.init(payee.token)
	watch.subscribe("v", byID, map[string]any{"id": v.ID, "st": true})
	check(fields(watch, "v"), false, 1)

	h.redeem(payee, v.ID, "10")
	check(fields(with, "s"), true, 2)
	check(fields(without, "s"), false, 2)
	check(fields(watch, "v"), false, 2)
	for _, c := range []*wsClient{with, without, watch} {
		select {
		case m := <-c.msgs:
			if m.Type != "ka" && m.Type != "ping" && m.Type != "pong" {
				b, _ := json.Marshal(m)
				t.Fatalf("unexpected message %s", b)
			}
		default:
		}
	}
}

// Subscriptions of one selection on different vouchers share renderers
// (gqlgen's generated code run once per renderer, fed one voucher per
// rendering): under concurrent changes each subscriber still gets its own
// voucher, in its own state, never a neighbour's.
func TestSharedRenderersKeepVouchersApart(t *testing.T) {
	h := newHarness(t, "sqlite3", harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	const byID = `subscription($id: ID) { voucherUpdated(id: $id) { id status version } }`
	const n = 12
	ids := make([]string, n)
	clients := make([]*wsClient, n)
	for i := range ids {
		ids[i] = h.reserve(payee, ses.Code, nil).ID
		c := dialWS(t, h.ws, protocols[i%2])
		c.init(payer.token)
		c.subscribe("v", byID, map[string]any{"id": ids[i]})
		clients[i] = c
	}
	type state struct {
		ID, Status string
		Version    int
	}
	next := func(i int) state {
		t.Helper()
		var ev struct{ VoucherUpdated state }
		clients[i].result("v", 5*time.Second, &ev)
		return ev.VoucherUpdated
	}
	for i := range ids {
		if got := next(i); got != (state{ids[i], "RESERVED", 1}) {
			t.Fatalf("subscriber %d: current state %+v, want %s RESERVED 1", i, got, ids[i])
		}
	}
	errs := make(chan error, n)
	for i := range ids {
		go func() {
			_, err := h.vouchers.Redeem(payee.ctx(), ids[i], simpleRedeem("10"))
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range ids {
		if got := next(i); got != (state{ids[i], "REDEEMED", 2}) {
			t.Fatalf("subscriber %d: after redeem %+v, want %s REDEEMED 2", i, got, ids[i])
		}
	}
}
