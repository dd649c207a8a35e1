package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/services"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// voucherUpdated's changes rendered by a read plan (graph/readplan.go,
// engine.Options.Plan) are the frames gqlgen renders: every selection
// below is subscribed over the real websocket transport on the door and
// on a door on the same services where gqlgen renders every field (a
// field hook turns the plans off), each change goes to both doors' hubs,
// and the frames must be equal byte for byte; the plan must have rendered
// exactly the changes of the selections it knows, once per change, and
// left the others to gqlgen. Changes are handed to the hubs in process and as
// another replica's notification (a reserved voucher, a redeemed one with
// its expected payment, a business's), and then committed for real, to
// subscriptions by session, by id (the current state first) and by
// business. An API key is refused voucherUpdated by the field rules on
// both doors alike, and nothing is rendered for it.
func TestSubscriptionPlanMatchesGqlgen(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			h := newHarness(t, dialect, harnessOptions{})
			// An API key's token, as the app's verifier would prove it.
			keyPrincipal := &auth.Principal{Kind: auth.KindAPIKey, ID: "key_subplan", Scopes: []auth.Scope{auth.ScopeEventsRead}}
			verifier := keyVerifier{Verifier: h.issuer, token: "vk_subplan", p: keyPrincipal}
			var planned atomic.Int64
			// Each door has its hub: subscribers of one hub share an
			// event's renderings by selection, so on one hub the door
			// could send what the other rendered. The voucher service
			// publishes each change to both, and nothing else does (not
			// the harness's listener, whose echo of a change committed
			// before a subscription could reach one hub and not the
			// other).
			doorHub := pubsub.NewHub(pubsub.EntLoader{Client: h.db.Client}, pubsub.Options{Log: quietLog()})
			t.Cleanup(doorHub.Close)
			refHub := pubsub.NewHub(pubsub.EntLoader{Client: h.db.Client}, pubsub.Options{Log: quietLog()})
			t.Cleanup(refHub.Close)
			fin, err := finance.New(finance.Default())
			if err != nil {
				t.Fatal(err)
			}
			vouchers, err := voucher.NewService(h.db, voucher.Options{Finance: fin, Sessions: h.sessions, Publisher: pubsub.Publishers{doorHub, refHub}, Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			serve := func(hub *pubsub.Hub, o graph.Options) string {
				o.Verifier, o.Log, o.TimeBudget = verifier, quietLog(), time.Minute
				resolver := &graph.Resolver{Services: services.Services{Sessions: h.sessions, Vouchers: vouchers, Businesses: h.businesses}, Hub: hub}
				srv := httptest.NewServer(auth.Middleware(verifier, graph.NewHandler(resolver, o)))
				t.Cleanup(srv.Close)
				return wsURL(srv.URL)
			}
			passthrough := func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) }
			doorURL := serve(doorHub, graph.WithReadPlanned(graph.Options{}, func() { planned.Add(1) }))
			refURL := serve(refHub, graph.WithFieldHook(graph.Options{}, passthrough))

			payer, owner := h.device(), h.user()
			ses, payee := h.session(payer)
			biz, err := h.businesses.Create(owner.ctx(), business.CreateInput{Name: ptr("Kiosk")})
			if err != nil {
				t.Fatal(err)
			}
			keyPrincipal.BusinessID = biz.ID
			reserved := h.reserve(payee, ses.Code, nil)
			redeemed := h.redeem(payee, h.reserve(payee, ses.Code, nil).ID, "12.5")
			bizVoucher := h.reserve(owner, ses.Code, &biz.ID)
			if redeemed.ExpectedPayment == nil || bizVoucher.BusinessID == nil || reserved.ExpectedPayment != nil {
				t.Fatalf("the vouchers do not cover the fields: %+v %+v %+v", reserved, redeemed, bizVoucher)
			}

			door, ref := dialFrames(t, doorURL, payer.token), dialFrames(t, refURL, payer.token)
			// Changes handed to the hub: a version higher than any before,
			// in process (as the committing replica) or as a notification.
			version := 100
			publish := func(v *ent.Voucher, notified bool) {
				t.Helper()
				version++
				next := *v
				next.Version = version
				c := pubsub.VoucherChange{ID: v.ID, Version: version, SessionID: v.SessionID, PayerID: v.PayerID, PayeeID: v.PayeeID}
				if v.BusinessID != nil {
					c.BusinessID = *v.BusinessID
				}
				if !notified {
					doorHub.Publish(c.WithState(&next))
					refHub.Publish(c.WithState(&next))
					return
				}
				row, err := json.Marshal(&next)
				if err != nil {
					t.Fatal(err)
				}
				p, err := pubsub.EncodeNotification(c, row)
				if err != nil {
					t.Fatal(err)
				}
				for _, hub := range []*pubsub.Hub{doorHub, refHub} {
					if err := hub.PublishNotification(string(p)); err != nil {
						t.Fatal(err)
					}
				}
			}
			subs := func() int64 { return doorHub.Stats().Subscriptions + refHub.Stats().Subscriptions }
			// check subscribes doc by session on both doors, hands the hub
			// each voucher in process and notified, compares the frames,
			// and counts the plan's renderings (one per change, or none).
			check := func(doc string, byPlan bool) {
				t.Helper()
				before := subs()
				vars := map[string]any{"s": ses.ID}
				door.subscribe("s", doc, vars)
				ref.subscribe("s", doc, vars)
				waitFor(t, 10*time.Second, func() bool { return subs() == before+2 })
				for _, v := range []*ent.Voucher{reserved, redeemed, bizVoucher} {
					for _, notified := range []bool{false, true} {
						n := planned.Load()
						publish(v, notified)
						got, want := door.next(t), ref.next(t)
						if !bytes.Equal(got, want) {
							t.Fatalf("%s, %s (notified %v):\n got %s\nwant %s", doc, v.ID, notified, got, want)
						}
						if !bytes.HasPrefix(got, []byte(`{"type":"next","id":"s","payload":{"data":{`)) || bytes.Contains(got, []byte(`"errors"`)) {
							t.Fatalf("%s: %s", doc, got)
						}
						wantPlanned := int64(0)
						if byPlan {
							wantPlanned = 1
						}
						if d := planned.Load() - n; d != wantPlanned {
							t.Fatalf("%s, %s (notified %v): %d renderings by the plan, want %d", doc, v.ID, notified, d, wantPlanned)
						}
					}
				}
				door.complete("s")
				ref.complete("s")
				for _, c := range []*frames{door, ref} {
					if m := c.next(t); string(m) != `{"type":"complete","id":"s"}` {
						t.Fatalf("%s: after complete: %s", doc, m)
					}
				}
				waitFor(t, 10*time.Second, func() bool { return subs() == before })
			}

			voucherScalars := []string{"id", "code", "status", "type", "version", "sessionId", "businessId", "expiresAt", "createdAt", "updatedAt", "__typename"}
			paymentScalars := []string{"id", "network", "currency", "currencyAddress", "amount", "__typename"}
			all := strings.Join(voucherScalars, " ") + " expectedPayment { " + strings.Join(paymentScalars, " ") + " wallet { address __typename } }"
			sub := func(sel string) string {
				return `subscription($s: ID) { voucherUpdated(sessionId: $s) { ` + sel + ` } }`
			}
			plannedDocs := []string{
				sub(all),
				sub(`id status version updatedAt`),
				`subscription Named($s: ID) { u: voucherUpdated(sessionId: $s) { updatedAt p: expectedPayment { w: wallet { a: address t: __typename } amt: amount } c: code i: id } }`,
				sub(`expectedPayment { wallet { address } }`),
			}
			for _, f := range voucherScalars {
				plannedDocs = append(plannedDocs, sub(f))
			}
			for _, f := range paymentScalars {
				plannedDocs = append(plannedDocs, sub(`expectedPayment { `+f+` }`))
			}
			for _, doc := range plannedDocs {
				check(doc, true)
			}
			// Left to gqlgen: fragments (a selection the plan has not
			// seen without them), directives, a response key twice, a
			// field the plan does not know.
			spread := `subscription($s: ID) { voucherUpdated(sessionId: $s) { ...F } } fragment F on Voucher { code version }`
			gqlgenDocs := []string{
				spread,
				sub(`... on Voucher { status } sessionId`),
				sub(`id code @include(if: true)`),
				sub(`id id`),
				sub(`id expectedPayment { id id }`),
				sub(`id suppliedPayment { id }`),
				sub(`id settlement { status }`),
			}
			for _, doc := range gqlgenDocs {
				check(doc, false)
			}
			// Once a subscription without fragments has the selection
			// planned, the same selection spelt with fragments renders
			// the same bytes by the plan.
			check(sub(`code version`), true)
			check(spread, true)

			// Real commits, to subscriptions by session, by id and by
			// business at once.
			changes := `subscription($id: ID, $s: ID, $b: ID) { voucherUpdated(id: $id, sessionId: $s, businessId: $b) { ` + all + ` } }`
			ownerDoor, ownerRef := dialFrames(t, doorURL, owner.token), dialFrames(t, refURL, owner.token)
			before := subs()
			door.subscribe("s", changes, map[string]any{"s": ses.ID})
			ref.subscribe("s", changes, map[string]any{"s": ses.ID})
			ownerDoor.subscribe("b", changes, map[string]any{"b": biz.ID})
			ownerRef.subscribe("b", changes, map[string]any{"b": biz.ID})
			waitFor(t, 10*time.Second, func() bool { return subs() == before+4 })
			n := planned.Load()
			v, err := vouchers.Reserve(payee.ctx(), voucher.ReserveInput{Code: ses.Code})
			if err != nil {
				t.Fatal(err)
			}
			byID, byIDRef := dialFrames(t, doorURL, payee.token), dialFrames(t, refURL, payee.token)
			byID.subscribe("v", changes, map[string]any{"id": v.ID})
			byIDRef.subscribe("v", changes, map[string]any{"id": v.ID})
			same := func(what string, a, b *frames) {
				t.Helper()
				got, want := a.next(t), b.next(t)
				if !bytes.Equal(got, want) || bytes.Contains(got, []byte(`"errors"`)) || bytes.Contains(got, []byte(`"type":"error"`)) {
					t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
				}
			}
			same("by session, reserved", door, ref)
			same("by id, the current state", byID, byIDRef)
			if _, err := vouchers.Redeem(payee.ctx(), v.ID, simpleRedeem("7.25")); err != nil {
				t.Fatal(err)
			}
			same("by session, redeemed", door, ref)
			same("by id, redeemed", byID, byIDRef)
			if _, err := vouchers.Reserve(owner.ctx(), voucher.ReserveInput{Code: ses.Code, BusinessID: &biz.ID}); err != nil {
				t.Fatal(err)
			}
			same("by session, the business's", door, ref)
			same("by business", ownerDoor, ownerRef)
			// One rendering per change and selection, shared by the
			// subscribers of the door: reserved (by session), the current
			// state (by id, an event of its own), redeemed, the business's.
			if d := planned.Load() - n; d != 4 {
				t.Fatalf("%d renderings by the plan for 4 events, want 4", d)
			}

			// An API key may not follow vouchers: the field rules refuse it
			// voucherUpdated at subscribe, alike on both doors.
			n = planned.Load()
			key, keyRef := dialFrames(t, doorURL, "vk_subplan"), dialFrames(t, refURL, "vk_subplan")
			key.subscribe("k", changes, map[string]any{"b": biz.ID})
			keyRef.subscribe("k", changes, map[string]any{"b": biz.ID})
			got, want := key.next(t), keyRef.next(t)
			if !bytes.Equal(got, want) || !bytes.Contains(got, []byte(`"data":null`)) || !bytes.Contains(got, []byte(`"code":"forbidden"`)) {
				t.Fatalf("an API key:\n got %s\nwant %s", got, want)
			}
			same("an API key, after the refusal", key, keyRef)
			if _, err := vouchers.Reserve(owner.ctx(), voucher.ReserveInput{Code: ses.Code, BusinessID: &biz.ID}); err != nil {
				t.Fatal(err)
			}
			same("by business, after the key's refusal", ownerDoor, ownerRef)
			if d := planned.Load() - n; d != 1 {
				t.Fatalf("%d renderings by the plan for one event, want 1", d)
			}
		})
	}
}

// keyVerifier proves one token as an API key and the others as Verifier
// does.
type keyVerifier struct {
	auth.Verifier
	token string
	p     *auth.Principal
}

func (v keyVerifier) Verify(ctx context.Context, token string) (*auth.Principal, error) {
	if token == v.token {
		return v.p, nil
	}
	return v.Verifier.Verify(ctx, token)
}

// frames is a graphql-transport-ws client that hands the test every frame
// as the server sent it (pings answered, pings and pongs left out).
type frames struct {
	conn *websocket.Conn
	wmu  sync.Mutex
	in   chan []byte
}

func dialFrames(t *testing.T, url, token string) *frames {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{transportWS}, HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial(url, http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &frames{conn: conn, in: make(chan []byte, 64)}
	go func() {
		defer close(c.in)
		for {
			_, m, err := conn.ReadMessage()
			if err != nil {
				return
			}
			switch {
			case bytes.Equal(m, []byte(`{"type":"ping"}`)):
				c.send(wsMsg{Type: "pong"})
			case bytes.HasPrefix(m, []byte(`{"type":"pong"`)):
			default:
				c.in <- m
			}
		}
	}()
	c.send(wsMsg{Type: "connection_init", Payload: payload(map[string]any{"Authorization": "Bearer " + token})})
	if m := c.next(t); !bytes.Contains(m, []byte(`"connection_ack"`)) {
		t.Fatalf("connection_init: %s", m)
	}
	return c
}

// send writes m; a write that fails shows as the frames that then do not
// come.
func (c *frames) send(m wsMsg) {
	b, _ := json.Marshal(m)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.WriteMessage(websocket.TextMessage, b)
}

func (c *frames) subscribe(id, query string, vars map[string]any) {
	c.send(wsMsg{Type: "subscribe", ID: id, Payload: payload(map[string]any{"query": query, "variables": vars})})
}

func (c *frames) complete(id string) { c.send(wsMsg{Type: "complete", ID: id}) }

func (c *frames) next(t *testing.T) []byte {
	t.Helper()
	select {
	case m, ok := <-c.in:
		if !ok {
			t.Fatal("the connection closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10 s")
	}
	return nil
}
