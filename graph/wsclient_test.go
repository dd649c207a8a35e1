package graph_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Subprotocols under test: graphql-transport-ws (the graphql-ws library)
// and the legacy graphql-ws (subscriptions-transport-ws).
const (
	transportWS = "graphql-transport-ws"
	legacyWS    = "graphql-ws"
)

var protocols = []string{transportWS, legacyWS}

// wsMsg is one protocol message.
type wsMsg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// wsClient is a small client for both subprotocols, written from their
// specs: it answers pings (unless told not to) and hands every other
// message to the test.
type wsClient struct {
	t     testing.TB
	proto string
	conn  *websocket.Conn
	wmu   sync.Mutex
	msgs  chan wsMsg
	done  chan struct{}
	// closeCode and closeText are the server's close frame (1006 when the
	// connection ended without one), valid once done is closed.
	closeCode int
	closeText string
	noPong    bool
}

func dialWS(t testing.TB, url, proto string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(url, http.Header{})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	if resp.Header.Get("Sec-WebSocket-Protocol") != proto {
		t.Fatalf("negotiated %q, want %q", resp.Header.Get("Sec-WebSocket-Protocol"), proto)
	}
	c := &wsClient{t: t, proto: proto, conn: conn, msgs: make(chan wsMsg, 256), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { _ = conn.Close() })
	return c
}

func (c *wsClient) read() {
	defer close(c.done)
	for {
		_, b, err := c.conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.closeCode, c.closeText = ce.Code, ce.Text
			} else {
				c.closeCode = websocket.CloseAbnormalClosure
			}
			return
		}
		var m wsMsg
		if err := json.Unmarshal(b, &m); err != nil {
			c.t.Errorf("server sent non-JSON %q", b)
			return
		}
		if m.Type == "ping" && !c.noPong {
			c.send(wsMsg{Type: "pong"})
		}
		c.msgs <- m
	}
}

func (c *wsClient) send(m wsMsg) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.conn.WriteJSON(m); err != nil {
		c.t.Logf("ws write %s: %v", m.Type, err)
	}
}

// sendRaw sends msg as one text message, as is.
func (c *wsClient) sendRaw(msg string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		c.t.Logf("ws write: %v", err)
	}
}

func payload(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// init sends connection_init (with the token, when given) without waiting.
func (c *wsClient) sendInit(token string) {
	p := map[string]any{}
	if token != "" {
		p["Authorization"] = "Bearer " + token
	}
	c.send(wsMsg{Type: "connection_init", Payload: payload(p)})
}

// init authenticates and waits for connection_ack.
func (c *wsClient) init(token string) {
	c.t.Helper()
	c.sendInit(token)
	if m := c.next(5 * time.Second); m.Type != "connection_ack" {
		c.t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
	}
}

// subscribe starts an operation (subscribe, or start on the legacy protocol).
func (c *wsClient) subscribe(id, query string, vars map[string]any) {
	typ := "subscribe"
	if c.proto == legacyWS {
		typ = "start"
	}
	c.send(wsMsg{Type: typ, ID: id, Payload: payload(map[string]any{"query": query, "variables": vars})})
}

// stop ends an operation (complete, or stop on the legacy protocol).
func (c *wsClient) stop(id string) {
	typ := "complete"
	if c.proto == legacyWS {
		typ = "stop"
	}
	c.send(wsMsg{Type: typ, ID: id})
}

// next returns the next message other than keep-alives.
func (c *wsClient) next(timeout time.Duration) wsMsg {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-c.msgs:
			if m.Type == "ka" || m.Type == "ping" || m.Type == "pong" {
				continue
			}
			return m
		case <-c.done:
			// Drain what arrived before the close.
			select {
			case m := <-c.msgs:
				if m.Type != "ka" && m.Type != "ping" && m.Type != "pong" {
					return m
				}
				continue
			default:
			}
			c.t.Fatalf("connection closed (%d %q) while waiting for a message", c.closeCode, c.closeText)
		case <-deadline:
			c.t.Fatalf("no message within %v", timeout)
		}
	}
}

// quiet asserts that no message (keep-alives aside) arrives for d.
func (c *wsClient) quiet(d time.Duration) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m := <-c.msgs:
			if m.Type == "ka" || m.Type == "ping" || m.Type == "pong" {
				continue
			}
			c.t.Fatalf("unexpected %s %s", m.Type, m.Payload)
		case <-deadline:
			return
		}
	}
}

// closed waits for the server to close and returns its close code.
func (c *wsClient) closed(timeout time.Duration) (int, string) {
	c.t.Helper()
	select {
	case <-c.done:
		return c.closeCode, c.closeText
	case <-time.After(timeout):
		c.t.Fatalf("connection still open after %v", timeout)
		return 0, ""
	}
}

// dataType is the message carrying a result on c's protocol.
func (c *wsClient) dataType() string {
	if c.proto == legacyWS {
		return "data"
	}
	return "next"
}

// result waits for the next result of operation id and decodes its data
// into out; it fails on an error or completion instead.
func (c *wsClient) result(id string, timeout time.Duration, out any) {
	c.t.Helper()
	m := c.next(timeout)
	if m.Type != c.dataType() || m.ID != id {
		c.t.Fatalf("want %s for %s, got %s %s %s", c.dataType(), id, m.Type, m.ID, m.Payload)
	}
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string         `json:"message"`
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(m.Payload, &r); err != nil {
		c.t.Fatal(err)
	}
	if len(r.Errors) > 0 {
		c.t.Fatalf("result with errors: %s", m.Payload)
	}
	if err := json.Unmarshal(r.Data, out); err != nil {
		c.t.Fatalf("decode %s: %v", r.Data, err)
	}
}

// failure waits for operation id to fail and returns the error's
// extensions.code: an "error" message on both protocols, or (legacy, for
// errors found before execution) a data message with errors.
func (c *wsClient) failure(id string, timeout time.Duration) string {
	c.t.Helper()
	m := c.next(timeout)
	if m.ID != id {
		c.t.Fatalf("message for %q, want %q: %s %s", m.ID, id, m.Type, m.Payload)
	}
	var errs []struct {
		Extensions map[string]any `json:"extensions"`
	}
	switch m.Type {
	case "error":
		if err := json.Unmarshal(m.Payload, &errs); err != nil {
			// The legacy protocol's error payload is a single object.
			var one struct {
				Extensions map[string]any `json:"extensions"`
			}
			if json.Unmarshal(m.Payload, &one) == nil {
				errs = append(errs, one)
			}
		}
	case c.dataType():
		var r struct {
			Errors []struct {
				Extensions map[string]any `json:"extensions"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(m.Payload, &r)
		for _, e := range r.Errors {
			errs = append(errs, struct {
				Extensions map[string]any `json:"extensions"`
			}{e.Extensions})
		}
	default:
		c.t.Fatalf("want an error for %s, got %s %s", id, m.Type, m.Payload)
	}
	if len(errs) == 0 {
		c.t.Fatalf("error without errors: %s", m.Payload)
	}
	code, _ := errs[0].Extensions["code"].(string)
	return code
}

// wsURL turns an http:// base URL into the /graphql websocket URL.
func wsURL(base string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/graphql"
}
