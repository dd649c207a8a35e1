package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/services"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// The voucher read's renderer (graph/readplan.go) answers exactly what
// gqlgen's generated code answers: every document below is sent to the
// door and to a door on the same services where gqlgen renders every
// field (a field hook turns the renderer off), and the bodies must be
// equal byte for byte; the renderer must have rendered the documents it
// knows, and left the others to gqlgen.
func TestReadPlanMatchesGqlgen(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			var planned atomic.Int64
			h := newHarness(t, dialect, harnessOptions{graph: graph.WithReadPlanned(graph.Options{}, func() { planned.Add(1) })})
			passthrough := func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) }
			reference := auth.Middleware(h.issuer, graph.NewHandler(&graph.Resolver{
				Services: services.Services{Sessions: h.sessions, Vouchers: h.vouchers, Businesses: h.businesses}, Hub: h.hub,
			}, graph.WithFieldHook(graph.Options{Log: quietLog(), TimeBudget: time.Minute}, passthrough)))
			door := h.srv.Config.Handler

			payer, owner := h.device(), h.user()
			ses, payee := h.session(payer)
			reserved := h.reserve(payee, ses.Code, nil)
			redeemed := h.reserve(payee, ses.Code, nil)
			h.redeem(payee, redeemed.ID, "12.5")
			biz, err := h.businesses.Create(owner.ctx(), business.CreateInput{Name: ptr("Kiosk")})
			if err != nil {
				t.Fatal(err)
			}
			bizVoucher := h.reserve(owner, ses.Code, &biz.ID)
			reads := []struct {
				who caller
				id  string
			}{{payee, reserved.ID}, {payee, redeemed.ID}, {owner, bizVoucher.ID}, {payee, "vch_doesnotexist"}}

			voucherScalars := []string{"id", "code", "status", "type", "version", "sessionId", "businessId", "expiresAt", "createdAt", "updatedAt", "__typename"}
			paymentScalars := []string{"id", "network", "currency", "currencyAddress", "amount", "__typename"}
			all := strings.Join(voucherScalars, " ") + " expectedPayment { " + strings.Join(paymentScalars, " ") + " wallet { address __typename } }"
			// Rendered by the plan: one voucher(id:) root field each
			// unless said.
			plannedDocs := []string{
				`query($id: ID!) { voucher(id: $id) { id code status type expectedPayment { id network currency currencyAddress amount wallet { address } } expiresAt createdAt updatedAt } }`,
				`query($id: ID!) { voucher(id: $id) { ` + all + ` } }`,
				`query($id: ID!) { v: voucher(id: $id) { updatedAt p: expectedPayment { w: wallet { a: address t: __typename } amt: amount } c: code i: id } }`,
				`query Named($id: ID!) { voucher(id: $id) { expectedPayment { wallet { address } } } }`,
				// The second occurrence is left out ($no is false), so
				// nothing is merged into the first.
				`query($id: ID!, $no: Boolean!) { voucher(id: $id) { id } voucher(id: $id) @include(if: $no) { code } }`,
			}
			for _, f := range voucherScalars {
				plannedDocs = append(plannedDocs, `query($id: ID!) { voucher(id: $id) { `+f+` } }`)
			}
			for _, f := range paymentScalars {
				plannedDocs = append(plannedDocs, `query($id: ID!) { voucher(id: $id) { expectedPayment { `+f+` } } }`)
			}
			twoRoots := `query($id: ID!) { a: voucher(id: $id) { id } b: voucher(id: $id) { code expectedPayment { amount } } }`
			// Left to gqlgen.
			gqlgenDocs := []string{
				`query($id: ID!) { voucher(id: $id) { ...F } } fragment F on Voucher { id code }`,
				`query($id: ID!) { voucher(id: $id) { ... on Voucher { id } } }`,
				`query($id: ID!) { voucher(id: $id) { id code @include(if: true) } }`,
				`query($id: ID!, $no: Boolean!) { voucher(id: $id) { id code @skip(if: $no) } }`,
				`query($id: ID!) { voucher(id: $id) { id id } }`,
				`query($id: ID!) { voucher(id: $id) { id } voucher(id: $id) { code } }`,
				`query($id: ID!, $no: Boolean!) { voucher(id: $id) { id } voucher(id: $id) @skip(if: $no) { code } }`,
				`query($id: ID!) { voucher(id: $id) { id expectedPayment { id id } } }`,
				`query($id: ID!) { voucher(id: $id) { id suppliedPayment { id } } }`,
				`query($id: ID!) { voucher(id: $id) { id expectedPayment { id ... on Payment { amount } } } }`,
			}

			send := func(handler http.Handler, who caller, doc, id string) (int, []byte) {
				body, _ := json.Marshal(map[string]any{"query": doc, "variables": map[string]any{"id": id, "no": false}})
				req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+who.token)
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, req)
				return w.Code, w.Body.Bytes()
			}
			check := func(doc string, rendered int64) {
				t.Helper()
				for _, r := range reads {
					before := planned.Load()
					code, got := send(door, r.who, doc, r.id)
					after := planned.Load()
					refCode, want := send(reference, r.who, doc, r.id)
					if code != refCode || !bytes.Equal(got, want) {
						t.Fatalf("%s for %s:\n got %d %s\nwant %d %s", doc, r.id, code, got, refCode, want)
					}
					if bytes.Contains(got, []byte(`"errors"`)) {
						t.Fatalf("%s for %s: %s", doc, r.id, got)
					}
					wantRendered := rendered
					if r.id == "vch_doesnotexist" {
						wantRendered = 0 // null: nothing to render
						if !bytes.Contains(got, []byte(`null`)) {
							t.Fatalf("%s for a missing voucher: %s", doc, got)
						}
					} else if !bytes.Contains(got, []byte(r.id)) && strings.Contains(doc, " id") && !strings.Contains(doc, "expectedPayment { id") {
						t.Fatalf("%s for %s: the answer does not name it: %s", doc, r.id, got)
					}
					if after-before != wantRendered {
						t.Fatalf("%s for %s: %d answers rendered by the plan, want %d", doc, r.id, after-before, wantRendered)
					}
				}
			}
			for _, doc := range plannedDocs {
				check(doc, 1)
			}
			check(twoRoots, 2)
			for _, doc := range gqlgenDocs {
				check(doc, 0)
			}
			// The same documents again: the plans come from the cache now.
			check(plannedDocs[0], 1)
			check(gqlgenDocs[0], 0)
			// Whoever may not see a voucher gets gqlgen's answer for it.
			_, stranger := h.session(h.device())
			for _, doc := range []string{plannedDocs[0], gqlgenDocs[0]} {
				before := planned.Load()
				code, got := send(door, stranger, doc, redeemed.ID)
				refCode, want := send(reference, stranger, doc, redeemed.ID)
				if code != refCode || !bytes.Equal(got, want) || planned.Load() != before {
					t.Fatalf("stranger, %s:\n got %d %s\nwant %d %s", doc, code, got, refCode, want)
				}
			}
		})
	}
}
