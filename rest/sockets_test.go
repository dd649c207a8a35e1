package rest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testnats"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// A websocket ends with the grounds of its token (docs/hardening.md,
// "Hardening"), against the binary on both databases and, on PostgreSQL,
// across two replicas (the end is committed on one, the socket is open on
// the other):
//
//   - closing a voucher session closes the payee's sockets opened with its
//     resource token (connection_init or the upgrade's Authorization
//     header) with 4403, and a new one is refused;
//   - a membership made INACTIVE closes the member's sockets with 4403;
//     reconnected, the member may not follow the business any more;
//   - an INACTIVE business keeps its members' sockets (its vouchers' reads
//     go on), but a redeem sent over an open socket is business_inactive.
//
// Other callers' sockets stay open and answer throughout. Every wait is
// for an event (a message, a close frame), never a sleep.
func TestSocketsEndWithTheirGrounds(t *testing.T) {
	for _, c := range replicaSetups() {
		dialect := c.dialect
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := c.env(t)
			env["VOUCHER_JWT_SECRET"] = testSecret
			a := testserver.Start(t, testserver.Options{Dialect: dialect, Env: env})
			b := a
			if dialect == storage.Postgres {
				b = testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL, Env: env})
			}

			// A session closed.
			payer := a.Device(t)
			sesID, code := a.Session(t, payer)
			payee := a.Resource(t, code)
			vid := b.Reserve(t, payee.Token, map[string]any{"code": code})
			byInit := openSocket(t, b, payee.Token, false)
			byHeader := openSocket(t, b, payee.Token, true)
			watcher := openSocket(t, b, payer.Token, false)
			for _, s := range []*socket{byInit, byHeader, watcher} {
				s.subscribe("v", `subscription($id: ID!) { voucherUpdated(id: $id) { id status } }`, map[string]any{"id": vid})
				if m := s.next(); m.Type != "next" || !strings.Contains(string(m.Payload), vid) {
					t.Fatalf("first state: %s %s", m.Type, m.Payload)
				}
			}
			if r := a.Do(t, "POST", "/api/v1/vouchers/sessions/"+sesID+"/close-session", payer.Token, "{}"); r.Status != 200 {
				t.Fatalf("close: %d %s", r.Status, r.Body)
			}
			for name, s := range map[string]*socket{"connection_init": byInit, "header": byHeader} {
				if code, text := s.closed(); code != 4403 || !strings.Contains(text, "session closed") {
					t.Fatalf("payee's socket (%s) after the close: %d %q, want 4403", name, code, text)
				}
			}
			if _, err := wsInit(b, payee.Token); !isClose(err, 4403) {
				t.Fatalf("a new payee socket after the close: %v, want 4403", err)
			}
			watcher.query("q", `{ viewer { id } }`)
			if m := watcher.answer("q"); m.Type != "next" || !strings.Contains(string(m.Payload), payer.ID) {
				t.Fatalf("the payer's socket: %s %s", m.Type, m.Payload)
			}

			// A membership made INACTIVE, then the business.
			owner, member := a.User(t), a.User(t)
			r := a.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Sockets Ltd"})
			if r.Status != 200 {
				t.Fatalf("create-business: %d %s", r.Status, r.Body)
			}
			bid, _ := r.Map(t)["id"].(string)
			r = a.Do(t, "POST", "/api/v1/businesses/"+bid+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"})
			if r.Status != 200 {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			membership, _ := r.Map(t)["id"].(string)
			setMembership := func(status string) {
				t.Helper()
				r := a.Do(t, "POST", "/api/v1/businesses/"+bid+"/users/"+membership+"/update-status", owner.Token, map[string]any{"status": status})
				if r.Status != 200 {
					t.Fatalf("membership %s: %d %s", status, r.Status, r.Body)
				}
			}
			const followBusiness = `subscription($b: ID!) { voucherUpdated(businessId: $b) { id status } }`
			payer2 := a.Device(t)
			_, code2 := a.Session(t, payer2)
			bvid := b.Reserve(t, member.Token, map[string]any{"code": code2, "businessId": bid})

			memberSock := openSocket(t, b, member.Token, false)
			ownerSock := openSocket(t, b, owner.Token, false)
			for _, s := range []*socket{memberSock, ownerSock} {
				s.subscribe("b", followBusiness, map[string]any{"b": bid})
				s.query("q", `{ viewer { id } }`) // answered after the subscribe was accepted
				if m := s.answer("q"); m.Type != "next" {
					t.Fatalf("before: %s %s %s", m.Type, m.ID, m.Payload)
				}
			}
			// b remembers the member's ACTIVE membership from this read;
			// made INACTIVE on a, the member's next read on b is 404.
			if r := b.Do(t, "GET", "/api/v1/vouchers/"+bvid, member.Token, nil); r.Status != 200 {
				t.Fatalf("member's read before INACTIVE: %d %s", r.Status, r.Body)
			}
			setMembership("INACTIVE")
			if r := b.Do(t, "GET", "/api/v1/vouchers/"+bvid, member.Token, nil); r.Status != http.StatusNotFound {
				t.Fatalf("INACTIVE member's read: %d %s", r.Status, r.Body)
			}
			if code, text := memberSock.closed(); code != 4403 || !strings.Contains(text, "membership ended") {
				t.Fatalf("member's socket after INACTIVE: %d %q, want 4403", code, text)
			}
			again := openSocket(t, b, member.Token, false)
			again.subscribe("b", followBusiness, map[string]any{"b": bid})
			if m := again.answer("b"); !strings.Contains(string(m.Payload), `"not_found"`) {
				t.Fatalf("INACTIVE member following the business: %s %s", m.Type, m.Payload)
			}
			ownerSock.query("q2", `{ viewer { id } }`)
			if m := ownerSock.answer("q2"); m.Type != "next" {
				t.Fatalf("the owner's socket: %s %s", m.Type, m.Payload)
			}

			// Active again, the member follows the business; the business
			// made INACTIVE keeps the socket, and refuses the redeem.
			setMembership("ACTIVE")
			memberSock = openSocket(t, b, member.Token, false)
			memberSock.subscribe("b", followBusiness, map[string]any{"b": bid})
			memberSock.query("q", `{ viewer { id } }`)
			if m := memberSock.answer("q"); m.Type != "next" {
				t.Fatalf("member again: %s %s", m.Type, m.Payload)
			}
			if r := a.Do(t, "POST", "/api/v1/businesses/"+bid+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}); r.Status != 200 {
				t.Fatalf("business INACTIVE: %d %s", r.Status, r.Body)
			}
			memberSock.query("m", `mutation($id: ID!) { redeemVoucher(id: $id, input: {expectedPayment: {network: "ethereum", currency: "USDC",
				currencyAddress: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", amount: "1", wallet: {address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"}}}) { id } }`,
				map[string]any{"id": bvid})
			if m := memberSock.answer("m"); !strings.Contains(string(m.Payload), "business_inactive") {
				t.Fatalf("redeem over the socket of an INACTIVE business: %s %s", m.Type, m.Payload)
			}
			if r := b.Do(t, "GET", "/api/v1/vouchers/"+bvid, member.Token, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"RESERVED"`) {
				t.Fatalf("the voucher after the refused redeem: %d %s", r.Status, r.Body)
			}
		})
	}
}

// replicaSetup is a database and, on PostgreSQL (where a test runs two
// replicas), the transport between the replicas.
type replicaSetup struct {
	name, dialect, transport string
}

// replicaSetups are SQLite, and PostgreSQL on each cross-replica transport.
func replicaSetups() []replicaSetup {
	var out []replicaSetup
	for _, d := range testdb.Dialects {
		if d != storage.Postgres {
			out = append(out, replicaSetup{name: d, dialect: d})
			continue
		}
		for _, tr := range testnats.Transports {
			out = append(out, replicaSetup{name: d + "/" + tr, dialect: d, transport: tr})
		}
	}
	return out
}

// env is the replicas' configuration for the setup's transport.
func (c replicaSetup) env(t *testing.T) map[string]string {
	if c.transport == "" {
		return map[string]string{}
	}
	return testnats.Env(t, c.transport)
}

// socket is a graphql-transport-ws client that answers pings.
type socket struct {
	t    *testing.T
	c    *websocket.Conn
	msgs chan wsMessage
	done chan struct{}
	err  error // why reading stopped, once done is closed
}

type wsMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// openSocket connects to srv's /graphql and authenticates with token, in
// connection_init or (header) in the upgrade's Authorization header.
func openSocket(t *testing.T, srv *testserver.Server, token string, header bool) *socket {
	t.Helper()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	h := http.Header{}
	init := map[string]any{}
	if header {
		h.Set("Authorization", "Bearer "+token)
	} else {
		init["Authorization"] = "Bearer " + token
	}
	c, _, err := d.Dial(url, h)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := &socket{t: t, c: c, msgs: make(chan wsMessage, 64), done: make(chan struct{})}
	go s.read()
	s.send(wsMessage{Type: "connection_init", Payload: mustJSON(init)})
	if m := s.next(); m.Type != "connection_ack" {
		t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
	}
	return s
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (s *socket) read() {
	defer close(s.done)
	for {
		var m wsMessage
		if err := s.c.ReadJSON(&m); err != nil {
			s.err = err
			return
		}
		if m.Type == "ping" {
			s.send(wsMessage{Type: "pong"})
			continue
		}
		s.msgs <- m
	}
}

func (s *socket) send(m wsMessage) {
	_ = s.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = s.c.WriteJSON(m)
}

func (s *socket) subscribe(id, query string, vars map[string]any) {
	s.send(wsMessage{Type: "subscribe", ID: id, Payload: mustJSON(map[string]any{"query": query, "variables": vars})})
}

func (s *socket) query(id, query string, vars ...map[string]any) {
	var v map[string]any
	if len(vars) > 0 {
		v = vars[0]
	}
	s.subscribe(id, query, v)
}

// next is the next message, within 10 s.
func (s *socket) next() wsMessage {
	s.t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case <-s.done:
		select {
		case m := <-s.msgs:
			return m
		default:
		}
		s.t.Fatalf("socket ended while waiting for a message: %v", s.err)
	case <-time.After(10 * time.Second):
		s.t.Fatal("no message within 10s")
	}
	return wsMessage{}
}

// answer is the next message for operation id other than its complete
// (events of subscriptions on the socket are skipped).
func (s *socket) answer(id string) wsMessage {
	s.t.Helper()
	for {
		if m := s.next(); m.ID == id && m.Type != "complete" {
			return m
		}
	}
}

// closed waits (10 s at most) for the server's close frame, skipping
// messages sent before it, and returns its code and reason.
func (s *socket) closed() (int, string) {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("socket still open after 10s")
	}
	var ce *websocket.CloseError
	if errors.As(s.err, &ce) {
		return ce.Code, ce.Text
	}
	return 0, s.err.Error()
}

func isClose(err error, code int) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code == code
}
