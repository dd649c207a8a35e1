package wstransport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/wstransport"
)

// The test schema: real gqlgen execution (parsing, validation, the
// executor, the error presenter) over a hand-written ExecutableSchema, so
// the transport is tested the way the GraphQL door uses it.
const sdl = `
type Query { hello: String! fail: String! }
type Subscription {
	events(topic: String!): String!
	directEvents(topic: String!): String!
	blockingEvents(topic: String!): String!
	denied: String!
	failing(topic: String!): String!
	panicking: String!
}`

// codedError is an error with a code for the presenter to put in
// extensions.code, as apperr is for the real server.
type codedError struct{ code, msg string }

func (e *codedError) Error() string { return e.msg }

func present(ctx context.Context, err error) *gqlerror.Error {
	gerr := graphql.DefaultErrorPresenter(ctx, err)
	var ce *codedError
	if errors.As(err, &ce) {
		gerr.Message = ce.msg
		gerr.Extensions = map[string]any{"code": ce.code}
		return gerr
	}
	gerr.Extensions = map[string]any{"code": "validation_failed"}
	return gerr
}

type schema struct {
	s      *ast.Schema
	broker *broker
}

func (s *schema) Schema() *ast.Schema { return s.s }
func (s *schema) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

func (s *schema) Exec(ctx context.Context) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	fields := graphql.CollectFields(oc, oc.Operation.SelectionSet, nil)
	if oc.Operation.Operation == ast.Query {
		data := map[string]string{}
		for _, f := range fields {
			if f.Name == "fail" {
				graphql.AddError(ctx, &codedError{"not_found", "nothing here"})
				continue
			}
			data[f.Alias] = "world"
		}
		b, _ := json.Marshal(data)
		return graphql.OneShot(&graphql.Response{Data: b})
	}
	f := fields[0]
	args := f.ArgumentMap(oc.Variables)
	topic, _ := args["topic"].(string)
	render := func(v string) *graphql.Response {
		b, _ := json.Marshal(map[string]string{f.Alias: v})
		return &graphql.Response{Data: b}
	}
	switch f.Name {
	case "denied":
		graphql.AddError(ctx, &codedError{"forbidden", "not yours"})
		return func(context.Context) *graphql.Response { return nil }
	case "panicking":
		return func(context.Context) *graphql.Response { panic("boom") }
	case "failing":
		m := s.broker.subscribe(topic)
		context.AfterFunc(ctx, m.close)
		m.setNotify(wstransport.ReadyFromContext(ctx))
		return func(ctx context.Context) *graphql.Response {
			if _, ok, _ := m.try(); !ok {
				return wstransport.IdleResponse(ctx)
			}
			wstransport.AddSubscriptionError(ctx, present(ctx, &codedError{"limit_exceeded", "fell behind"}))
			return nil
		}
	}
	m := s.broker.subscribe(topic)
	var ready func(bool)
	if f.Name == "events" || f.Name == "directEvents" {
		// Lean: the mailbox closes through the transport's hook (failing's
		// through context.AfterFunc, which works for lean ones too).
		ready = wstransport.ReadyFromContext(ctx)
		m.setNotify(ready)
		if !wstransport.OnEnd(ctx, m.close) {
			panic("OnEnd outside the transport")
		}
	} else {
		context.AfterFunc(ctx, m.close)
	}
	h := func(ctx context.Context) *graphql.Response {
		s.broker.handled(goid())
		for {
			v, ok, closed := m.try()
			switch {
			case closed:
				return nil
			case ok && v == "skip":
				continue // a stale event, as a version check would drop
			case ok:
				return render(v)
			case ready != nil:
				return wstransport.IdleResponse(ctx)
			}
			select {
			case <-m.wake:
			case <-ctx.Done():
				return nil
			}
		}
	}
	if f.Name == "directEvents" && !wstransport.HandleDirectly(ctx, h) {
		panic("HandleDirectly refused a lean operation")
	}
	return h
}

// broker is a tiny pubsub: mailboxes that queue values and signal.
type broker struct {
	mu    sync.Mutex
	boxes map[string][]*mailbox
	// handlers lists the goroutines that ran subscription handlers, in
	// order (goid), for the tests of who writes.
	handlers []int64
}

func (b *broker) handled(g int64) {
	b.mu.Lock()
	b.handlers = append(b.handlers, g)
	b.mu.Unlock()
}

// handledBy returns the goroutines that ran handlers since the last call.
func (b *broker) handledBy() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.handlers
	b.handlers = nil
	return h
}

// goid is the calling goroutine's id, from its stack header.
func goid() int64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.ParseInt(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

type mailbox struct {
	b      *broker
	topic  string
	wake   chan struct{}
	mu     sync.Mutex
	queue  []string
	closed bool
	notify func(bool)
}

func (b *broker) subscribe(topic string) *mailbox {
	m := &mailbox{b: b, topic: topic, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	if b.boxes == nil {
		b.boxes = map[string][]*mailbox{}
	}
	b.boxes[topic] = append(b.boxes[topic], m)
	b.mu.Unlock()
	return m
}

func (b *broker) count(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.boxes[topic])
}

// publish queues v for topic's subscribers and signals them as a hub's
// worker does; publishNow signals them as a publisher handing over its own
// change does (now: the transport may write from this goroutine).
func (b *broker) publish(topic, v string)    { b.send(topic, v, false) }
func (b *broker) publishNow(topic, v string) { b.send(topic, v, true) }

func (b *broker) send(topic, v string, now bool) {
	b.mu.Lock()
	boxes := append([]*mailbox(nil), b.boxes[topic]...)
	b.mu.Unlock()
	for _, m := range boxes {
		m.mu.Lock()
		m.queue = append(m.queue, v)
		notify := m.notify
		m.mu.Unlock()
		select {
		case m.wake <- struct{}{}:
		default:
		}
		if notify != nil {
			notify(now)
		}
	}
}

func (m *mailbox) setNotify(f func(bool)) {
	m.mu.Lock()
	m.notify = f
	m.mu.Unlock()
}

func (m *mailbox) try() (v string, ok, closed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", false, true
	}
	if len(m.queue) == 0 {
		return "", false, false
	}
	v, m.queue = m.queue[0], m.queue[1:]
	return v, true, false
}

func (m *mailbox) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.b.mu.Lock()
	boxes := m.b.boxes[m.topic]
	for i, x := range boxes {
		if x == m {
			m.b.boxes[m.topic] = append(boxes[:i:i], boxes[i+1:]...)
			break
		}
	}
	if len(m.b.boxes[m.topic]) == 0 {
		delete(m.b.boxes, m.topic)
	}
	m.b.mu.Unlock()
}

// server is the transport behind a real gqlgen handler on httptest.
type server struct {
	t        testing.TB
	tr       *wstransport.Transport
	broker   *broker
	srv      *httptest.Server
	url      string
	inflight atomic.Int64 // HTTP handlers running now
	// wrapped counts the calls of operations' handlers that went through
	// the executor's per-call wrapper (its response middleware).
	wrapped atomic.Int64

	mu    sync.Mutex
	conns []*wstransport.Conn // every connection the default InitFunc accepted, in order
}

// conn is the i-th connection the default InitFunc accepted.
func (s *server) conn(i int) *wstransport.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[i]
}

// validToken is the only token the test InitFunc accepts.
const validToken = "Bearer good"

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newServer serves the test schema; wrap, when given, wraps the handler
// (a middleware under test).
func newServer(t testing.TB, opts wstransport.Options, wrap ...func(http.Handler) http.Handler) *server {
	t.Helper()
	s := &server{t: t, broker: &broker{}}
	if opts.InitFunc == nil {
		opts.InitFunc = func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
			switch p.Authorization() {
			case "", validToken:
				s.mu.Lock()
				s.conns = append(s.conns, wstransport.ConnFromContext(ctx))
				s.mu.Unlock()
				return ctx, nil, nil
			case "Bearer busy":
				return ctx, nil, &wstransport.CloseError{Code: 4429, Reason: "Too many connections"}
			case "Bearer expiring":
				wstransport.ConnFromContext(ctx).CloseAt(time.Now().Add(300*time.Millisecond), wstransport.CloseForbidden, "Forbidden: token expired")
				return ctx, &transport.InitPayload{"expires": "soon"}, nil
			}
			return ctx, nil, errors.New("bad token")
		}
	}
	if opts.Log == nil {
		opts.Log = quietLog()
	}
	opts.CheckOrigin = func(*http.Request) bool { return true }
	s.tr = wstransport.New(opts)
	sch, err := gqlparser.LoadSchema(&ast.Source{Input: sdl})
	if err != nil {
		t.Fatal(err)
	}
	h := handler.New(&schema{s: sch, broker: s.broker})
	h.AddTransport(s.tr)
	h.AddTransport(transport.POST{})
	h.AroundResponses(func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
		s.wrapped.Add(1)
		return next(ctx)
	})
	h.SetErrorPresenter(present)
	h.SetRecoverFunc(func(_ context.Context, v any) error { return fmt.Errorf("internal error: %v", v) })
	var next http.Handler = h
	for _, w := range wrap {
		next = w(next)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.tr.Shutdown(ctx)
		s.srv.Close()
	})
	s.url = "ws" + strings.TrimPrefix(s.srv.URL, "http")
	return s
}

// Subprotocols under test.
const (
	transportWS = wstransport.SubprotocolTransportWS
	legacyWS    = wstransport.SubprotocolLegacy
)

var protocols = []string{transportWS, legacyWS}

type msg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// client is a websocket client for both subprotocols. It answers pings
// unless told not to and queues every message for the test.
type client struct {
	t         testing.TB
	proto     string
	conn      *websocket.Conn
	wmu       sync.Mutex
	msgs      chan msg
	done      chan struct{}
	closeCode int
	closeText string
	noPong    atomic.Bool
}

func dial(t testing.TB, url, proto string) *client {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != proto {
		t.Fatalf("negotiated %q, want %q", got, proto)
	}
	c := &client{t: t, proto: proto, conn: conn, msgs: make(chan msg, 1024), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { _ = conn.Close() })
	return c
}

func (c *client) read() {
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
		var m msg
		if err := json.Unmarshal(b, &m); err != nil {
			c.t.Errorf("server sent non-JSON %q", b)
			return
		}
		if m.Type == "ping" && !c.noPong.Load() {
			c.send(msg{Type: "pong"})
		}
		c.msgs <- m
	}
}

func (c *client) send(m msg) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = c.conn.WriteJSON(m)
}

func (c *client) sendRaw(s string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.WriteMessage(websocket.TextMessage, []byte(s))
}

func payload(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (c *client) init(auth string) {
	c.t.Helper()
	p := map[string]string{}
	if auth != "" {
		p["Authorization"] = auth
	}
	c.send(msg{Type: "connection_init", Payload: payload(p)})
	if m := c.next(); m.Type != "connection_ack" {
		c.t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
	}
}

func (c *client) subscribe(id, query string) {
	typ := "subscribe"
	if c.proto == legacyWS {
		typ = "start"
	}
	c.send(msg{Type: typ, ID: id, Payload: payload(map[string]any{"query": query})})
}

func (c *client) stop(id string) {
	typ := "complete"
	if c.proto == legacyWS {
		typ = "stop"
	}
	c.send(msg{Type: typ, ID: id})
}

func (c *client) dataType() string {
	if c.proto == legacyWS {
		return "data"
	}
	return "next"
}

func keepAliveMsg(t string) bool { return t == "ka" || t == "ping" || t == "pong" }

// next returns the next message other than keep-alives.
func (c *client) next() msg {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-c.msgs:
			if !keepAliveMsg(m.Type) {
				return m
			}
		case <-c.done:
			select {
			case m := <-c.msgs:
				if !keepAliveMsg(m.Type) {
					return m
				}
				continue
			default:
			}
			c.t.Fatalf("connection closed (%d %q) while waiting for a message", c.closeCode, c.closeText)
		case <-deadline:
			c.t.Fatal("no message within 5s")
		}
	}
}

// expect reads the next message and checks its type and id.
func (c *client) expect(typ, id string) msg {
	c.t.Helper()
	m := c.next()
	if m.Type != typ || m.ID != id {
		c.t.Fatalf("want %s %q, got %s %q %s", typ, id, m.Type, m.ID, m.Payload)
	}
	return m
}

// value reads the next result of id and returns its one field.
func (c *client) value(id string) string {
	c.t.Helper()
	m := c.expect(c.dataType(), id)
	var r struct {
		Data   map[string]string `json:"data"`
		Errors []any             `json:"errors"`
	}
	if err := json.Unmarshal(m.Payload, &r); err != nil || len(r.Errors) > 0 || len(r.Data) != 1 {
		c.t.Fatalf("result %s (%v)", m.Payload, err)
	}
	for _, v := range r.Data {
		return v
	}
	return ""
}

// code returns extensions.code of the first error in an error message's
// payload (a list) or a result's errors.
func code(t testing.TB, m msg) string {
	t.Helper()
	var errs []struct {
		Extensions map[string]any `json:"extensions"`
	}
	if m.Type == "error" {
		if err := json.Unmarshal(m.Payload, &errs); err != nil {
			t.Fatalf("error payload %s: %v", m.Payload, err)
		}
	} else {
		var r struct {
			Errors []struct {
				Extensions map[string]any `json:"extensions"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(m.Payload, &r)
		errs = r.Errors
	}
	if len(errs) == 0 {
		t.Fatalf("no errors in %s %s", m.Type, m.Payload)
	}
	s, _ := errs[0].Extensions["code"].(string)
	return s
}

// closed waits for the server to close the connection.
func (c *client) closed(d time.Duration) (int, string) {
	c.t.Helper()
	select {
	case <-c.done:
		return c.closeCode, c.closeText
	case <-time.After(d):
		c.t.Fatalf("still open after %v", d)
		return 0, ""
	}
}

// quiet asserts nothing but keep-alives arrives for d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m := <-c.msgs:
			if !keepAliveMsg(m.Type) {
				c.t.Fatalf("unexpected %s %s %s", m.Type, m.ID, m.Payload)
			}
		case <-deadline:
			return
		}
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func events(topic string) string {
	return fmt.Sprintf(`subscription { e: events(topic: %q) }`, topic)
}
