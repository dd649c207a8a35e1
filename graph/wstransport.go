package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Close codes of graphql-transport-ws the transport sends itself.
const (
	closeBadRequest       = 4400
	closeUnauthorized     = 4401
	closeSubscriberExists = 4409
	closeTooManyInits     = 4429
)

// wsTransport serves GraphQL over websockets, speaking graphql-transport-ws
// (the graphql-ws library) and the legacy graphql-ws protocol
// (subscriptions-transport-ws). It replaces gqlgen's websocket transport
// for one reason: cost per idle subscriber. gqlgen holds three goroutines
// per connection and one per subscription; here a connection holds one
// (its reader) and an idle voucherUpdated subscription none: the hub calls
// the subscription back when a change arrives, a short-lived goroutine
// writes it, and goes away. Operations still run through gqlgen's
// executor, so extensions, limits, rate limits and the error presenter
// apply exactly as over HTTP.
type wsTransport struct {
	upgrader    websocket.Upgrader
	init        transport.WebsocketInitFunc
	initTimeout time.Duration
	readLimit   int64
	log         *slog.Logger
}

var _ graphql.Transport = (*wsTransport)(nil)

func newWSTransport(init transport.WebsocketInitFunc, initTimeout time.Duration, readLimit int64, log *slog.Logger) *wsTransport {
	return &wsTransport{
		upgrader: websocket.Upgrader{
			Subprotocols: []string{subprotocolTransportWS, subprotocolLegacy},
			// A small read buffer: client messages are small. Writes
			// borrow a buffer from the pool only while writing.
			ReadBufferSize:  512,
			WriteBufferSize: 1024,
			WriteBufferPool: &sync.Pool{},
			// Browsers send Origin; tokens, not cookies, authenticate here,
			// so a cross-site page gains nothing from connecting.
			CheckOrigin:      func(*http.Request) bool { return true },
			HandshakeTimeout: 10 * time.Second,
		},
		init: init, initTimeout: initTimeout, readLimit: readLimit, log: log,
	}
}

// Supports implements graphql.Transport.
func (t *wsTransport) Supports(r *http.Request) bool {
	return r.Method == http.MethodGet && websocket.IsWebSocketUpgrade(r)
}

// Do implements graphql.Transport: it serves the connection until it ends.
func (t *wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ws, err := t.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // gorilla answered the failed handshake
	}
	ws.SetReadLimit(t.readLimit)
	// The frames serving the connection keep r for its whole life; its
	// headers are of no more use.
	r.Header = nil
	c := &wsConn{t: t, ws: ws, g: guardFrom(r.Context()), legacy: ws.Subprotocol() != subprotocolTransportWS,
		exec: exec, ops: map[string]*wsOp{}}
	c.serve(r.Context())
}

// wsConn is one connection.
type wsConn struct {
	t      *wsTransport
	ws     *websocket.Conn
	g      *wsGuard
	legacy bool
	exec   graphql.GraphExecutor

	wmu sync.Mutex // one writer at a time

	mu  sync.Mutex
	ops map[string]*wsOp
}

// wsMessage is a message of either protocol.
type wsMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (c *wsConn) serve(ctx context.Context) {
	handedOff := false
	defer func() {
		if !handedOff {
			_ = c.ws.Close()
		}
	}()
	// A backstop: the guard closes with 4408 at the init timeout.
	_ = c.ws.SetReadDeadline(time.Now().Add(c.t.initTimeout + 2*time.Second))
	m, ok := c.read()
	if !ok {
		return
	}
	if m.Type != "connection_init" {
		c.close(closeUnauthorized, "Unauthorized: connection_init first")
		return
	}
	_ = c.ws.SetReadDeadline(time.Time{})
	var payload transport.InitPayload
	if len(m.Payload) > 0 && string(m.Payload) != "null" {
		if err := json.Unmarshal(m.Payload, &payload); err != nil {
			c.close(closeBadRequest, "connection_init payload must be an object")
			return
		}
	}
	ctx, err := c.authenticate(ctx, payload)
	if err != nil {
		// initFunc has closed the socket with its code (4403, 4429);
		// this only covers a connection without a guard.
		c.close(CloseForbidden, "Forbidden")
		return
	}
	c.send(wsMessage{Type: "connection_ack"})

	handedOff = true
	if c.g == nil {
		c.loop(ctx)
		return
	}
	// The goroutine running this has been through the upgrade, the
	// middleware and connection_init, and its stack grew for them; an
	// idle connection keeps its reader's stack for hours. A fresh
	// goroutine with a shallow stack reads from now on, and this one
	// returns. What the request held for the connection's life (the rate
	// limiter's connection slots) moves to the guard, released when the
	// connection really ends.
	if q := requestFrom(ctx); q != nil {
		q.mu.Lock()
		held := q.held
		q.held = nil
		q.mu.Unlock()
		c.g.atEnd = append(c.g.atEnd, func() {
			for _, release := range held {
				release()
			}
		})
	}
	c.g.detached = true
	go func() {
		defer c.g.end()
		c.loop(ctx)
	}()
}

// loop reads the connection's messages until it ends.
func (c *wsConn) loop(ctx context.Context) {
	defer c.ws.Close() // frees the socket whoever ended the connection
	defer c.endAll()
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		// Each message is handled on a goroutine of its own, in order:
		// decoding and dispatching would grow this one's stack, which an
		// idle connection then keeps for hours (a stack only shrinks to
		// four times what its goroutine uses when parked).
		done := make(chan bool, 1)
		go func() { done <- c.handle(ctx, b) }()
		if !<-done {
			return
		}
	}
}

// handle acts on one message; false ends the connection.
func (c *wsConn) handle(ctx context.Context, b []byte) bool {
	m, ok := c.decode(b)
	if !ok {
		return false
	}
	switch m.Type {
	case "subscribe", "start":
		return c.start(ctx, m)
	case "complete", "stop":
		c.stop(m.ID)
	case "ping":
		c.send(wsMessage{Type: "pong", Payload: m.Payload})
	case "pong":
		// An answer to the keep-alive; the guard noted the traffic.
	case "connection_terminate":
		c.close(websocket.CloseNormalClosure, "terminated")
		return false
	case "connection_init":
		c.close(closeTooManyInits, "Too many initialisation requests")
		return false
	default:
		c.close(closeBadRequest, "unknown message type")
		return false
	}
	return true
}

// authenticate runs the init function on a goroutine of its own: token
// verification goes deep, and a stack grown here would stay with the
// connection's reader for its whole life.
func (c *wsConn) authenticate(ctx context.Context, payload transport.InitPayload) (context.Context, error) {
	type result struct {
		ctx context.Context
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, _, err := c.t.init(ctx, payload)
		done <- result{ctx, err}
	}()
	r := <-done
	return r.ctx, r.err
}

// read returns the next message; false when the connection is over (or
// broke the protocol, in which case it has been closed).
func (c *wsConn) read() (wsMessage, bool) {
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return wsMessage{}, false
	}
	return c.decode(b)
}

// decode parses a message; a malformed one closes the connection (4400).
func (c *wsConn) decode(b []byte) (wsMessage, bool) {
	var m wsMessage
	if err := json.Unmarshal(b, &m); err != nil || m.Type == "" {
		c.close(closeBadRequest, "invalid message")
		return wsMessage{}, false
	}
	return m, true
}

// close ends the connection with code, between frames.
func (c *wsConn) close(code int, reason string) {
	if c.g != nil {
		c.g.closeWith(code, reason)
		return
	}
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	_ = c.ws.Close()
}

// writeTimeout cuts a client that stopped reading.
const writeTimeout = 10 * time.Second

func (c *wsConn) send(m wsMessage) {
	b, err := json.Marshal(m)
	if err != nil {
		c.t.log.Error("graphql websocket: encode message", "err", err.Error())
		return
	}
	c.write(b)
}

func (c *wsConn) write(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		_ = c.ws.Close() // the reader sees it and ends the connection
	}
}

// sendResult writes a result: "next" (graphql-transport-ws) or "data".
// A plain result's payload is assembled around the (shared) rendered data
// rather than marshalled again per subscriber.
func (c *wsConn) sendResult(id string, resp *graphql.Response) {
	typ := "next"
	if c.legacy {
		typ = "data"
	}
	var buf bytes.Buffer
	buf.WriteString(`{"id":`)
	buf.WriteString(strconv.Quote(id))
	buf.WriteString(`,"type":"`)
	buf.WriteString(typ)
	buf.WriteString(`","payload":`)
	if len(resp.Errors) == 0 && resp.Extensions == nil && resp.HasNext == nil && resp.Path == nil && resp.Label == "" {
		// The data is gqlgen's own output (or its shared copy): valid
		// JSON, no need to check it per subscriber.
		buf.WriteString(`{"data":`)
		if len(resp.Data) == 0 {
			buf.WriteString("null")
		}
		buf.Write(resp.Data)
		buf.WriteByte('}')
	} else {
		b, err := json.Marshal(resp)
		if err != nil {
			c.t.log.Error("graphql websocket: encode result", "err", err.Error())
			return
		}
		buf.Write(b)
	}
	buf.WriteByte('}')
	c.write(buf.Bytes())
}

// sendError ends operation id with errors (an "error" message).
func (c *wsConn) sendError(id string, errs gqlerror.List) {
	b, _ := json.Marshal(errs)
	c.send(wsMessage{Type: "error", ID: id, Payload: b})
}

func (c *wsConn) sendComplete(id string) { c.send(wsMessage{Type: "complete", ID: id}) }

// wsOp is one operation on a connection.
type wsOp struct {
	c      *wsConn
	id     string
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	// stopped is set when the client ended the operation: it still gets
	// its complete, as gqlgen has always sent.
	stopped atomic.Bool

	// Set for an event-driven subscription.
	run       *subRun
	responses graphql.ResponseHandler
	draining  atomic.Bool
}

// start begins operation m; false when the protocol was broken (and the
// connection closed).
func (c *wsConn) start(ctx context.Context, m wsMessage) bool {
	if m.ID == "" {
		c.close(closeBadRequest, "subscribe without an id")
		return false
	}
	opCtx, cancel := context.WithCancel(ctx)
	op := &wsOp{c: c, id: m.ID, ctx: opCtx, cancel: cancel}
	c.mu.Lock()
	if old, dup := c.ops[m.ID]; dup {
		if !c.legacy {
			c.mu.Unlock()
			cancel()
			c.close(closeSubscriberExists, "Subscriber for "+m.ID+" already exists")
			return false
		}
		// subscriptions-transport-ws servers replace the operation.
		old.cancel()
		delete(c.ops, m.ID)
	}
	c.ops[m.ID] = op
	c.mu.Unlock()
	// Off the reader: parsing, validation and the resolver's first queries
	// run on a goroutine that ends once the subscription is set up, so
	// the reader's stack stays small for the connection's life.
	go op.begin(m.Payload)
	return true
}

// stop ends operation id at the client's request.
func (c *wsConn) stop(id string) {
	c.mu.Lock()
	op := c.ops[id]
	c.mu.Unlock()
	if op != nil {
		// Cancelling closes the subscription's mailbox, whose callback
		// wakes the drain that finishes the operation.
		op.stopped.Store(true)
		op.cancel()
	}
}

// endAll ends every operation when the connection ends.
func (c *wsConn) endAll() {
	c.mu.Lock()
	ops := make([]*wsOp, 0, len(c.ops))
	for _, op := range c.ops {
		ops = append(ops, op)
	}
	c.mu.Unlock()
	for _, op := range ops {
		op.cancel()
	}
}

// finish forgets op; its id may be used again.
func (op *wsOp) finish() {
	op.once.Do(func() {
		op.cancel()
		op.c.mu.Lock()
		if op.c.ops[op.id] == op {
			delete(op.c.ops, op.id)
		}
		op.c.mu.Unlock()
	})
}

type opSlotKey struct{}

// opSlot lets execSchema hand a voucherUpdated run to the transport, which
// then drives it event by event instead of parking a goroutine on it.
type opSlot struct{ run *subRun }

func (op *wsOp) begin(payload json.RawMessage) {
	c := op.c
	start := graphql.Now()
	params := &graphql.RawParams{}
	if err := json.Unmarshal(payload, params); err != nil {
		c.sendError(op.id, gqlerror.List{{Message: "invalid subscribe payload", Extensions: map[string]any{"code": "validation_failed"}}})
		op.finish()
		return
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	ctx := graphql.StartOperationTrace(op.ctx)
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		c.sendError(op.id, resp.Errors)
		op.finish()
		return
	}
	slot := &opSlot{}
	ctx = context.WithValue(graphql.WithOperationContext(ctx, rc), opSlotKey{}, slot)
	responses, ctx := c.exec.DispatchOperation(ctx, rc)
	if slot.run != nil && rc.Operation.Operation == ast.Subscription {
		op.run, op.responses, op.ctx = slot.run, responses, ctx
		slot.run.sub.Notify(op.wake)
		op.wake() // the current state may be waiting already
		return
	}
	// Queries, mutations, and a subscription that failed to start: read
	// the (finite) responses here.
	for {
		resp := responses(ctx)
		if resp == nil {
			break
		}
		c.sendResult(op.id, resp)
	}
	if op.ctx.Err() == nil || op.stopped.Load() {
		c.sendComplete(op.id)
	}
	op.finish()
}

// wake schedules a drain of op's subscription unless one is running.
func (op *wsOp) wake() {
	if op.draining.CompareAndSwap(false, true) {
		go op.drain()
	}
}

// drain writes what op's subscription has ready, then lets its goroutine
// go: between changes, the subscription holds none.
func (op *wsOp) drain() {
	for {
		for {
			resp := op.responses(op.ctx)
			if resp == nil {
				break
			}
			op.c.sendResult(op.id, resp)
		}
		if op.run.ended(op.ctx) {
			if err := op.run.failure(); err != nil {
				op.c.sendError(op.id, gqlerror.List{err})
			} else if op.ctx.Err() == nil || op.stopped.Load() {
				op.c.sendComplete(op.id)
			}
			op.finish()
			return
		}
		op.draining.Store(false)
		// A change queued after the last look, whose wake found us still
		// draining, is picked up here.
		if !op.run.pending() || !op.draining.CompareAndSwap(false, true) {
			return
		}
	}
}
