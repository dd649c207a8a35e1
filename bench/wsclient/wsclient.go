// Package wsclient is the bench's websocket client: graphql-transport-ws
// for the service's subscriptions and plain frames for the bare floor
// server. Buffers are small (1 KiB, as on the server) so twenty thousand
// idle clients fit in one process without distorting the machine.
package wsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// RunFrames is Run without decoding: each frame is read into one buffer
// the connection reuses and handed to h as it is (valid during the call
// only) with the time it was read; graphql-transport-ws pings are answered
// and pongs and keep-alives dropped, found by their type without decoding.
// Beyond gorilla's reader (one small object per message) it allocates
// nothing per frame, so a thousand readers at a thousand frames a second do
// not make the bench's own garbage collector part of what it measures.
func (c *Conn) RunFrames(h func(frame []byte, at time.Time)) error {
	buf := make([]byte, 0, 1024)
	for {
		_, r, err := c.ws.NextReader()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		if buf, err = readAll(r, buf[:0]); err != nil {
			return err
		}
		at := time.Now()
		switch string(MessageType(buf)) { // the conversion does not allocate
		case "ping":
			_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := c.ws.WriteMessage(websocket.TextMessage, pong); err != nil {
				return err
			}
		case "pong", "ka":
		default:
			h(buf, at)
		}
	}
}

var pong = []byte(`{"type":"pong"}`)

// readAll reads r to its end into b, growing it only when a frame is
// larger than any before.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// MessageType is the value of a graphql-transport-ws frame's top-level
// "type" (a slice of frame, nil when it has none), found without decoding:
// the service writes it first ({"type":"next",...}), and a frame that
// carries the key elsewhere is found by a scan.
func MessageType(frame []byte) []byte {
	return StringField(frame, "type")
}

// StringField is the value of the first `"key":"value"` pair in frame (a
// slice of frame, without the quotes; nil when there is none or the value
// has an escape). It does not decode JSON: callers use it on frames whose
// shape they know, and fall back to a decoder when it finds nothing.
func StringField(frame []byte, key string) []byte {
	i := fieldValue(frame, key)
	if i < 0 || i >= len(frame) || frame[i] != '"' {
		return nil
	}
	v := frame[i+1:]
	for j, ch := range v {
		switch ch {
		case '"':
			return v[:j]
		case '\\':
			return nil
		}
	}
	return nil
}

// IntField is the value of the first `"key":<digits>` pair in frame.
func IntField(frame []byte, key string) (int, bool) {
	i := fieldValue(frame, key)
	if i < 0 {
		return 0, false
	}
	n, digits := 0, 0
	for ; i < len(frame) && frame[i] >= '0' && frame[i] <= '9'; i++ {
		n = n*10 + int(frame[i]-'0')
		digits++
	}
	return n, digits > 0 && digits < 19
}

// fieldValue is the index of the value after the first `"key":` in frame
// (spaces after the colon skipped), or -1.
func fieldValue(frame []byte, key string) int {
	for off := 0; off < len(frame); {
		q := bytes.IndexByte(frame[off:], '"')
		if q < 0 {
			return -1
		}
		k := off + q + 1 // after the opening quote
		off = k
		if k+len(key) >= len(frame) || string(frame[k:k+len(key)]) != key || frame[k+len(key)] != '"' {
			continue
		}
		j := skipSpace(frame, k+len(key)+1)
		if j < len(frame) && frame[j] == ':' {
			return skipSpace(frame, j+1)
		}
	}
	return -1
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// RunRaw reads plain frames until the connection ends (the bare floor),
// into one reused buffer as RunFrames does (h's frame is valid during the
// call only).
func (c *Conn) RunRaw(h func(frame []byte, at time.Time)) error {
	buf := make([]byte, 0, 1024)
	for {
		_, r, err := c.ws.NextReader()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		if buf, err = readAll(r, buf[:0]); err != nil {
			return err
		}
		h(buf, time.Now())
	}
}

// Close drops the connection at once (a client that goes away).
func (c *Conn) Close() error { return c.ws.Close() }
