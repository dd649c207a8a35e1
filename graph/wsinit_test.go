package graph_test

import (
	"testing"
	"time"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/storage"
)

// connection_init's credentials in the shapes clients send are read (the
// connection is the token's holder, not anonymous); a bad token is 4403,
// credentials in a shape the server does not read are 4400.
func TestWebsocketInitCredentialShapes(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	good := []struct {
		name    string
		payload map[string]any
	}{
		{"Authorization", map[string]any{"Authorization": "Bearer " + payer.token}},
		{"lower-case authorization", map[string]any{"authorization": "Bearer " + payer.token}},
		{"headers.Authorization", map[string]any{"headers": map[string]any{"Authorization": "Bearer " + payer.token}}},
		{"headers.authorization", map[string]any{"headers": map[string]any{"authorization": "Bearer " + payer.token, "x-other": "1"}}},
		{"authToken", map[string]any{"authToken": payer.token}},
		{"authToken with Bearer", map[string]any{"authToken": "Bearer " + payer.token}},
		{"token and Authorization agreeing", map[string]any{"token": payer.token, "Authorization": "Bearer " + payer.token}},
	}
	bad := []struct {
		name    string
		payload map[string]any
		code    int
	}{
		{"authToken not a token", map[string]any{"authToken": "nope"}, graph.CloseForbidden},
		{"headers.Authorization not a token", map[string]any{"headers": map[string]any{"Authorization": "Bearer nope"}}, graph.CloseForbidden},
		{"unknown key", map[string]any{"jwt": payer.token}, graph.CloseBadRequest},
		{"unknown header", map[string]any{"headers": map[string]any{"X-Auth-Token": payer.token}}, graph.CloseBadRequest},
		{"not a string", map[string]any{"Authorization": 42}, graph.CloseBadRequest},
		{"headers not an object", map[string]any{"headers": "Authorization: Bearer " + payer.token}, graph.CloseBadRequest},
		{"two different tokens", map[string]any{"authToken": payer.token, "Authorization": "Bearer other"}, graph.CloseBadRequest},
	}
	for _, proto := range protocols {
		for _, tc := range good {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				c := dialWS(t, h.ws, proto)
				c.send(wsMsg{Type: "connection_init", Payload: payload(tc.payload)})
				if m := c.next(5 * time.Second); m.Type != "connection_ack" {
					t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
				}
				c.subscribe("1", `{ viewer { id } }`, nil)
				var got struct{ Viewer struct{ ID string } }
				c.result("1", 5*time.Second, &got)
				if got.Viewer.ID != payer.p.ID {
					t.Fatalf("viewer %q, want %q (the connection went on as someone else or anonymous)", got.Viewer.ID, payer.p.ID)
				}
			})
		}
		for _, tc := range bad {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				c := dialWS(t, h.ws, proto)
				c.send(wsMsg{Type: "connection_init", Payload: payload(tc.payload)})
				if proto == legacyWS {
					// subscriptions-transport-ws clients expect the reason first.
					if m := c.next(2 * time.Second); m.Type != "connection_error" {
						t.Fatalf("want connection_error, got %s %s", m.Type, m.Payload)
					}
				}
				if code, _ := c.closed(2 * time.Second); code != tc.code {
					t.Fatalf("close code %d, want %d", code, tc.code)
				}
			})
		}
	}
}
