// Package wsclient is the bench's websocket client: graphql-transport-ws
// for the service's subscriptions and plain frames for the bare floor
// server. Buffers are small (1 KiB, as on the server) so twenty thousand
// idle clients fit in one process without distorting the machine.
package wsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// Subprotocol is the GraphQL over websocket protocol the service speaks.
const Subprotocol = "graphql-transport-ws"

// Conn is one client connection.
type Conn struct {
	ws *websocket.Conn
}

// Dial connects to url (ws://...) from localIP (empty for the default), so
// that tens of thousands of connections can spread over several loopback
// source addresses instead of exhausting one address's ephemeral ports.
func Dial(ctx context.Context, url, subprotocol, localIP string) (*Conn, error) {
	nd := &net.Dialer{Timeout: 10 * time.Second}
	if localIP != "" {
		nd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	d := websocket.Dialer{
		NetDialContext:   nd.DialContext,
		HandshakeTimeout: 20 * time.Second,
		ReadBufferSize:   1024,
		WriteBufferSize:  1024,
	}
	if subprotocol != "" {
		d.Subprotocols = []string{subprotocol}
	}
	ws, resp, err := d.DialContext(ctx, url, http.Header{})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("wsclient: dial %s: %w (HTTP %s)", url, err, resp.Status)
		}
		return nil, fmt.Errorf("wsclient: dial %s: %w", url, err)
	}
	return &Conn{ws: ws}, nil
}

// Message is a graphql-transport-ws message.
type Message struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Raw is the frame as received (set by Run).
	Raw []byte `json:"-"`
}

func (c *Conn) send(m any) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteJSON(m)
}

// Init sends connection_init with the bearer token and waits for the ack.
func (c *Conn) Init(token string, timeout time.Duration) error {
	payload := map[string]string{}
	if token != "" {
		payload["Authorization"] = "Bearer " + token
	}
	if err := c.send(map[string]any{"type": "connection_init", "payload": payload}); err != nil {
		return err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(timeout))
	defer c.ws.SetReadDeadline(time.Time{})
	for {
		var m Message
		if err := c.ws.ReadJSON(&m); err != nil {
			return fmt.Errorf("wsclient: waiting for connection_ack: %w", err)
		}
		switch m.Type {
		case "connection_ack":
			return nil
		case "ping":
			if err := c.send(Message{Type: "pong"}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("wsclient: got %s before connection_ack: %s", m.Type, m.Payload)
		}
	}
}

// Subscribe starts operation id.
func (c *Conn) Subscribe(id, query string, vars map[string]any) error {
	return c.send(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}})
}

// Handler receives each data message with the time it was read.
type Handler func(m Message, at time.Time)

// Run reads until the connection ends, answering pings and handing every
// other message (next, error, complete) to h. Run is the only writer once
// it starts. It returns nil when the connection was closed by Close.
func (c *Conn) Run(h Handler) error {
	for {
		_, data, err := c.ws.ReadMessage()
		at := time.Now()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		var m Message
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("wsclient: bad message %q: %w", data, err)
		}
		m.Raw = data
		switch m.Type {
		case "ping":
			if err := c.send(Message{Type: "pong"}); err != nil {
				return err
			}
		case "pong", "ka":
		default:
			h(m, at)
		}
	}
}

// RunRaw reads plain frames until the connection ends (the bare floor).
func (c *Conn) RunRaw(h func(data []byte, at time.Time)) error {
	for {
		_, data, err := c.ws.ReadMessage()
		at := time.Now()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		h(data, at)
	}
}

// Close drops the connection at once (a client that goes away).
func (c *Conn) Close() error { return c.ws.Close() }
