package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// logged is an event log entry as REST answers it, data kept as sent.
type logged struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt string          `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
}

// bodyData is the data member of a delivered body, as the body carried it.
func bodyData(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var p struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p.Data
}

// TestE2EEventLogAndReplay: the event log lists what the webhooks carried,
// byte for byte, on both doors; a replay sends the logged events again to
// the endpoint, same webhook-id and body, signed with the endpoint's
// current secret (checked with the Standard Webhooks library), and the
// deliveries are logged like any other.
func TestE2EEventLogAndReplay(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			w := startWorld(t, dialect, nil)
			before := time.Now().Add(-time.Second).UnixMilli()
			a, pa := w.deposit(t, "12.5")
			w.resolve(t, a, pa, "12.5")
			first := w.waitTypes(t, a, webhook.DepositCreated, settlement.EventPending, settlement.EventConfirmed)
			b, _ := w.deposit(t, "3")
			w.waitTypes(t, b, webhook.DepositCreated)
			delivered := map[string][]byte{}
			for _, d := range w.rcv.all() {
				delivered[d.event.ID] = d.body
			}

			events := "/api/v1/businesses/" + w.biz + "/events"
			var log []logged
			r := w.srv.Do(t, "GET", events, w.owner.Token, nil)
			if r.Status != 200 {
				t.Fatalf("events: %d %s", r.Status, r.Body)
			}
			r.JSON(t, &log)
			if len(log) != 4 {
				t.Fatalf("%d events logged, want 4: %s", len(log), r.Body)
			}
			for i, e := range log {
				body, ok := delivered[e.ID]
				if !ok {
					t.Fatalf("logged event %s was never delivered", e.ID)
				}
				if !bytes.Equal(e.Data, bodyData(t, body)) {
					t.Fatalf("event %s: logged data\n%s\nis not the delivered\n%s", e.ID, e.Data, bodyData(t, body))
				}
				if i > 0 && e.CreatedAt < log[i-1].CreatedAt {
					t.Fatalf("not oldest first: %v", log)
				}
			}
			if log[0].Type != webhook.DepositCreated {
				t.Fatalf("first logged event is %s", log[0].Type)
			}

			// Filters.
			for q, want := range map[string]int{
				"?type=deposit.created":                               2,
				"?type=deposit.confirmed":                             1,
				"?limit=1&offset=3":                                   1,
				"?offset=4":                                           0,
				fmt.Sprintf("?since=%d", before):                      4,
				fmt.Sprintf("?until=%d", before):                      0,
				fmt.Sprintf("?since=%d&type=deposit.pending", before): 1,
			} {
				var got []logged
				r := w.srv.Do(t, "GET", events+q, w.owner.Token, nil)
				r.JSON(t, &got)
				if r.Status != 200 || len(got) != want {
					t.Errorf("events%s: %d, %d entries; want %d", q, r.Status, len(got), want)
				}
			}
			for _, q := range []string{"?type=deposit.nope", "?limit=0", "?limit=101", "?since=x", "?offset=-1"} {
				if r := w.srv.Do(t, "GET", events+q, w.owner.Token, nil); r.Status != 400 || !strings.Contains(string(r.Body), "validation_failed") {
					t.Errorf("events%s: %d %s", q, r.Status, r.Body)
				}
			}
			stranger := w.srv.User(t)
			if r := w.srv.Do(t, "GET", events, stranger.Token, nil); r.Status != 404 {
				t.Errorf("a stranger's events: %d", r.Status)
			}

			// GraphQL: the same entries, the same bytes.
			g := w.srv.GraphQL(t, w.owner.Token, `query($id: ID!) { business(id: $id) { events(type: "deposit.created") { id type createdAt data } } }`, map[string]any{"id": w.biz})
			if err := g.Err(); err != nil {
				t.Fatal(err)
			}
			var gd struct {
				Business struct{ Events []logged } `json:"business"`
			}
			if err := json.Unmarshal(g.Data, &gd); err != nil {
				t.Fatal(err)
			}
			if len(gd.Business.Events) != 2 {
				t.Fatalf("GraphQL events: %s", g.Data)
			}
			for _, e := range gd.Business.Events {
				if !bytes.Equal(e.Data, bodyData(t, delivered[e.ID])) {
					t.Fatalf("GraphQL data of %s is not the delivered data:\n%s", e.ID, e.Data)
				}
			}

			// Replay after a rotation: the same ids and bodies, signed with
			// the new secret.
			endpoint := "/api/v1/businesses/" + w.biz + "/webhook-endpoints/" + w.endpoint["id"].(string)
			r = w.srv.Do(t, "POST", endpoint+"/rotate-secret", w.owner.Token, map[string]any{})
			if r.Status != 200 {
				t.Fatalf("rotate-secret: %d %s", r.Status, r.Body)
			}
			secret := r.Map(t)["signingSecret"].(string)
			r = w.srv.Do(t, "POST", endpoint+"/replay", w.owner.Token, map[string]any{"since": before, "types": []string{settlement.EventConfirmed, settlement.EventPending}})
			if r.Status != 200 || r.Map(t)["queued"].(float64) != 2 {
				t.Fatalf("replay: %d %s", r.Status, r.Body)
			}
			for _, d := range first {
				if d.event.Type == webhook.DepositCreated {
					continue
				}
				id := d.header.Get("webhook-id")
				var again []delivery
				testserver.Eventually(t, 15*time.Second, "replayed "+id, func() bool { again = w.rcv.byID(id); return len(again) == 2 })
				if !bytes.Equal(again[1].body, d.body) {
					t.Fatalf("replayed body differs:\n%s\n%s", again[1].body, d.body)
				}
				verify(t, secret, again[1])
			}
			time.Sleep(200 * time.Millisecond)
			if n := len(w.rcv.all()); n != 4+2 {
				t.Fatalf("the receiver got %d requests, want 6", n)
			}

			// The replayed deliveries are in the delivery log.
			var dl []map[string]any
			r = w.srv.Do(t, "GET", "/api/v1/businesses/"+w.biz+"/webhook-deliveries", w.owner.Token, nil)
			r.JSON(t, &dl)
			if len(dl) != 6 {
				t.Fatalf("%d deliveries logged, want 6", len(dl))
			}

			// GraphQL's replay: every subscribed event since then.
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $e: ID!, $since: Time!) { replay(businessId: $b, id: $e, input: {since: $since}) { queued } }`,
				map[string]any{"b": w.biz, "e": w.endpoint["id"], "since": time.UnixMilli(before).UTC().Format(time.RFC3339Nano)})
			if err := g.Err(); err != nil || !strings.Contains(string(g.Data), `"queued":4`) {
				t.Fatalf("GraphQL replay: %s %v", g.Data, err)
			}
			testserver.Eventually(t, 15*time.Second, "10 requests", func() bool { return len(w.rcv.all()) == 10 })
			for _, d := range w.rcv.all()[6:] {
				verify(t, secret, d)
			}

			// Bad bodies change nothing.
			for _, body := range []map[string]any{{}, {"since": -1}, {"since": before, "until": before - 1}, {"since": before, "types": []string{"x"}}, {"since": before, "extra": 1}} {
				if r := w.srv.Do(t, "POST", endpoint+"/replay", w.owner.Token, body); r.Status != 400 {
					t.Errorf("replay %v: %d %s", body, r.Status, r.Body)
				}
			}
			member := w.srv.User(t)
			if r := w.srv.Do(t, "POST", "/api/v1/businesses/"+w.biz+"/users/add-user", w.owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"}); r.Status != 200 {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "POST", endpoint+"/replay", member.Token, map[string]any{"since": before}); r.Status != 403 {
				t.Errorf("a MEMBER's replay: %d %s", r.Status, r.Body)
			}
			time.Sleep(200 * time.Millisecond)
			if n := len(w.rcv.all()); n != 10 {
				t.Fatalf("refused replays delivered: %d requests", n)
			}
		})
	}
}
