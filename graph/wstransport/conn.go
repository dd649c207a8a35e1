package wstransport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

type connKey struct{}

// ConnFromContext returns the websocket connection an operation (or an
// InitFunc) runs on, or nil outside this transport.
func ConnFromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// connValues is the base of a connection's context: the upgrade request's
// values plus the connection (connKey), without the request's
// cancellation. Like opValues, it takes no allocation.
type connValues struct{ c *Conn }

func (connValues) Deadline() (time.Time, bool) { return time.Time{}, false }
func (connValues) Done() <-chan struct{}       { return nil }
func (connValues) Err() error                  { return nil }
func (v connValues) Value(key any) any {
	if key == (connKey{}) {
		return v.c
	}
	return v.c.req.Value(key)
}
func (connValues) String() string { return "wstransport connection" }

// Conn is one websocket connection. Its exported methods are safe for
// concurrent use.
type Conn struct {
	t       *Transport
	ws      *websocket.Conn
	netConn net.Conn
	// raw is the socket's file descriptor access, nil when the connection
	// has none (TLS, a test pipe): drained then says no.
	raw    syscall.RawConn
	exec   graphql.GraphExecutor
	legacy bool

	req    context.Context // the upgrade request's context, for its values
	ctx    context.Context // the connection's own context (connValues, with an end of its own)
	cancel context.CancelFunc
	hooks  []func() // run when the connection ends (ReleaseOnClose, OnClose)

	prev, next *Conn // Transport's registry, under t.mu

	// Under mu.
	mu           sync.Mutex
	opCtx        context.Context // what InitFunc returned; operations take its values (opValues)
	initReceived bool
	inited       bool
	ops          []*op
	readyOps     []*op
	// spareOps is the array of readyOps before the one being worked on,
	// given back to readyOps when that is taken (work): a connection
	// signalled over and over allocates no slice per signal.
	spareOps     []*op
	recoverFn    graphql.RecoverFunc // the operations' (their executor's)
	timerDue     bool
	scheduled    bool // in the worker pool's queue, or being worked on
	torn         bool // teardown ran: nothing may be scheduled any more
	initDeadline time.Time
	nextPing     time.Time
	awaitingPong bool
	expiry       time.Time
	expiryCode   int
	expiryReason string
	closeCode    int
	closeReason  string
	closeAsked   bool

	// Under t.sched.mu.
	wake    time.Time
	heapIdx int

	// deferred is a message a publisher's goroutine left unwritten
	// (sendResponse): the worker that takes the connection next writes it
	// before anything else. Touched only by whoever works on the
	// connection (c.scheduled set by it).
	deferred []byte

	// Writes. closing stops new writes; closeSent says the close frame
	// went out (or the socket was dropped without one).
	wmu       sync.Mutex
	closing   atomic.Bool
	closeSent atomic.Bool
}

// Subprotocol returns the negotiated subprotocol (SubprotocolTransportWS or
// SubprotocolLegacy).
func (c *Conn) Subprotocol() string {
	if c.legacy {
		return SubprotocolLegacy
	}
	return SubprotocolTransportWS
}

// Close sends a close frame with code and reason (at most 123 bytes) and
// ends the connection and all its operations. It does not block: a write
// in progress finishes first, bounded by CloseGrace.
func (c *Conn) Close(code int, reason string) { c.closeWith(code, reason) }

// CloseAt closes the connection with code and reason at t (a token's
// expiry). Of several scheduled closes the earliest wins.
func (c *Conn) CloseAt(t time.Time, code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expiry.IsZero() || t.Before(c.expiry) {
		c.expiry, c.expiryCode, c.expiryReason = t, code, reason
		c.rescheduleLocked()
	}
}

// OnClose arranges for f to run once the connection has ended (at once
// when it already has). f must not block.
func (c *Conn) OnClose(f func()) {
	c.mu.Lock()
	if c.torn {
		c.mu.Unlock()
		f()
		return
	}
	c.hooks = append(c.hooks, f)
	c.mu.Unlock()
}

// Protocol messages the server sends without an operation.
var (
	msgAck  = []byte(`{"type":"connection_ack"}`)
	msgKA   = []byte(`{"type":"ka"}`)
	msgPing = []byte(`{"type":"ping"}`)
	msgPong = []byte(`{"type":"pong"}`)
)

// inMsg is a client message on either protocol.
type inMsg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
	// refused is why CheckMessage refused it: the operation fails with it.
	refused error
}

// readLoop is the connection's one goroutine. It waits for messages until
// the socket fails or closes, then tears the connection down.
//
// It is kept shallow on purpose: a new goroutine has a 2 KiB stack of
// which about 1.1 KiB may hold frames, and gorilla's read path down to the
// netpoller uses most of that. One more large frame, or one deep call
// (JSON decoding, token checks, GraphQL validation) made here even once,
// and the stack doubles to 4 KiB for the connection's whole life — a
// quarter of an idle subscriber's budget. So each message is handled on a
// short-lived goroutine while the reader waits for it (which keeps
// messages in order).
func (c *Conn) readLoop() {
	for {
		_, r, err := c.ws.NextReader()
		if err == nil {
			err = c.dispatch(r)
		}
		if err != nil {
			c.teardown(err)
			return
		}
	}
}

// dispatch handles one message off the reader's stack and waits for it.
//
//go:noinline
func (c *Conn) dispatch(r io.Reader) error {
	errc := make(chan error, 1)
	go func() { errc <- c.readMessage(r) }()
	return <-errc
}

// readMessage reads one message and acts on it; an error ends the
// connection (the socket failed mid-message, or it was too big).
func (c *Conn) readMessage(r io.Reader) error {
	start := graphql.Now()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if c.closing.Load() {
		return nil // waiting for the client's close frame
	}
	if !c.legacy {
		// A client that talks is alive, whether or not its pong is among
		// what it said.
		c.mu.Lock()
		c.awaitingPong = false
		c.mu.Unlock()
	}
	var refused error
	if check := c.t.opts.CheckMessage; check != nil {
		// After connection_init, in the caller's context (its principal
		// keys its budgets), as the operations run.
		c.mu.Lock()
		ctx := c.opCtx
		c.mu.Unlock()
		if ctx == nil {
			ctx = c.ctx
		}
		refused = check(ctx, b)
	}
	var m inMsg
	if json.Unmarshal(b, &m) != nil {
		c.protocolError("invalid message")
		return nil
	}
	if refused != nil {
		if m.ID == "" || !(m.Type == "subscribe" && !c.legacy || m.Type == "start" && c.legacy) {
			c.protocolError("invalid message")
			return nil
		}
		m.refused = refused
	}
	c.handle(&m, start)
	return nil
}

func (c *Conn) handle(m *inMsg, start time.Time) {
	defer func() {
		if r := recover(); r != nil {
			c.t.opts.Log.Error("graphql websocket: panic handling a message", "type", m.Type, "panic", r)
			c.closeWith(CloseInternalError, "internal error")
		}
	}()
	switch {
	case m.Type == "connection_init":
		c.handleInit(m.Payload)
	case m.Type == "ping" && !c.legacy:
		if len(m.Payload) > 0 && string(m.Payload) != "null" {
			c.write(appendMsg(nil, "pong", "", m.Payload))
		} else {
			c.write(msgPong)
		}
	case m.Type == "pong" && !c.legacy:
		// Liveness is noted for every message (readLoop).
	case m.Type == "subscribe" && !c.legacy, m.Type == "start" && c.legacy:
		c.startOp(m, start)
	case m.Type == "complete" && !c.legacy, m.Type == "stop" && c.legacy:
		c.stopOp(m.ID)
	case m.Type == "connection_terminate" && c.legacy:
		c.closeWith(CloseNormal, "terminated")
	default:
		c.protocolError("unexpected message " + m.Type)
	}
}

// protocolError ends a connection whose client broke the protocol:
// graphql-transport-ws says 4400; legacy clients get gqlgen's
// connection_error and 1002.
func (c *Conn) protocolError(msg string) {
	if !c.legacy {
		c.closeWith(CloseInvalidMessage, "Invalid message received")
		return
	}
	c.connectionError(msg)
	c.closeWith(CloseProtocolError, msg)
}

// connectionError sends the legacy protocol's connection_error.
func (c *Conn) connectionError(msg string) {
	if !c.legacy {
		return
	}
	p, _ := json.Marshal(map[string]string{"message": msg})
	c.write(appendMsg(nil, "connection_error", "", p))
}

func (c *Conn) handleInit(payload json.RawMessage) {
	c.mu.Lock()
	again := c.initReceived
	c.initReceived = true
	c.mu.Unlock()
	if again {
		if !c.legacy {
			c.closeWith(CloseTooManyInitiation, "Too many initialisation requests")
		} else {
			c.protocolError("unexpected message connection_init")
		}
		return
	}
	var p transport.InitPayload
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &p); err != nil {
			c.protocolError("invalid connection_init payload")
			return
		}
	}
	ctx := c.ctx
	var ack *transport.InitPayload
	if f := c.t.opts.InitFunc; f != nil {
		var err error
		ctx, ack, err = f(c.ctx, p)
		if err != nil {
			c.refuse(err)
			return
		}
	}
	c.mu.Lock()
	// Operations take its values, not its cancellation (opValues).
	c.opCtx = ctx
	c.inited = true
	c.initDeadline = time.Time{}
	if c.t.opts.KeepAlive > 0 {
		c.nextPing = time.Now().Add(c.t.opts.KeepAlive)
	}
	c.rescheduleLocked()
	c.mu.Unlock()
	if ack != nil {
		b, err := json.Marshal(*ack)
		if err != nil {
			c.closeWith(CloseInternalError, "internal error")
			return
		}
		c.write(appendMsg(nil, "connection_ack", "", b))
	} else {
		c.write(msgAck)
	}
	if c.legacy && c.t.opts.KeepAlive > 0 {
		c.write(msgKA)
	}
}

// refuse ends a connection whose connection_init InitFunc refused.
func (c *Conn) refuse(err error) {
	code, reason, msg := CloseForbidden, "Forbidden", err.Error()
	var ce *CloseError
	if errors.As(err, &ce) {
		code, reason, msg = ce.Code, ce.Reason, ce.Reason
	}
	c.connectionError(msg)
	c.closeWith(code, reason)
}

// write sends one text message. It reports false when the message did not
// go out: the connection is closing, or the write failed or timed out (which
// drops the connection).
func (c *Conn) write(msg []byte) bool {
	c.wmu.Lock()
	ok := !c.closing.Load()
	if ok {
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.t.opts.WriteTimeout))
		if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
			ok = false
			c.dropLocked(err)
		}
	}
	c.unlockWrites()
	return ok
}

// unlockWrites releases the write lock and sends a close frame asked for
// while it was held. A closeWith that found the lock taken relies on this:
// whoever held it looks again after letting go.
func (c *Conn) unlockWrites() {
	c.wmu.Unlock()
	if c.closing.Load() && !c.closeSent.Load() && c.wmu.TryLock() {
		c.flushCloseLocked()
		c.wmu.Unlock()
	}
}

// closeWith starts closing: new writes stop, the close frame goes out as
// soon as no write is in progress, and the reader waits CloseGrace for the
// client's close frame before dropping the socket.
func (c *Conn) closeWith(code int, reason string) {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	c.mu.Lock()
	if c.closeAsked {
		c.mu.Unlock()
		return
	}
	c.closeAsked, c.closeCode, c.closeReason = true, code, reason
	c.mu.Unlock()
	c.closing.Store(true)
	if c.wmu.TryLock() {
		c.flushCloseLocked()
		c.wmu.Unlock()
		return
	}
	// A write is in progress: it sends the frame when it ends. A peer
	// that takes nothing must not hold that up for the full WriteTimeout.
	_ = c.netConn.SetWriteDeadline(time.Now().Add(c.t.opts.CloseGrace))
}

// flushCloseLocked sends the requested close frame; wmu is held.
func (c *Conn) flushCloseLocked() {
	if c.closeSent.Swap(true) {
		return
	}
	c.mu.Lock()
	code, reason := c.closeCode, c.closeReason
	c.mu.Unlock()
	grace := time.Now().Add(c.t.opts.CloseGrace)
	if err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), grace); err != nil {
		_ = c.netConn.Close()
		return
	}
	// The reader keeps going until the client answers with its own close
	// frame (the clean end) or the grace period passes.
	_ = c.netConn.SetReadDeadline(grace)
}

// dropLocked ends a connection whose write failed: a client that does not
// read is not waited for, and gets no close frame.
func (c *Conn) dropLocked(err error) {
	c.closing.Store(true)
	if !c.closeSent.Swap(true) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.opts.Log.Info("graphql websocket dropped: client too slow to take a write", "timeout", c.t.opts.WriteTimeout.String())
		}
	}
	_ = c.netConn.Close()
}

// teardownUnstarted releases a connection refused before its reader ran.
func (c *Conn) teardownUnstarted() {
	_ = c.netConn.Close()
	c.cancel()
	runHooks(c.hooks)
}

// teardown runs once, when the reader stops: every operation ends, the
// scheduler and registry forget the connection, and the ReleaseOnClose
// hooks run.
func (c *Conn) teardown(err error) {
	c.closing.Store(true)
	if errors.Is(err, websocket.ErrReadLimit) {
		// gorilla sent 1009 and stopped reading in the middle of the big
		// message. Closing with unread data would reset the connection
		// and could destroy that close frame before the client reads it,
		// so take (and discard) what the client still sends, briefly.
		_ = c.netConn.SetReadDeadline(time.Now().Add(c.t.opts.CloseGrace))
		_, _ = io.Copy(io.Discard, io.LimitReader(c.netConn, 4*c.t.opts.ReadLimit))
	}
	c.closeSent.Store(true)
	_ = c.netConn.Close()

	c.mu.Lock()
	c.torn = true
	ops := c.ops
	c.ops, c.readyOps = nil, nil
	type ending struct {
		end     func()
		counted bool
	}
	ends := make([]ending, len(ops))
	for i, o := range ops {
		o.finished = true
		ends[i] = ending{o.onEnd, o.counted}
		o.onEnd = nil
	}
	c.rescheduleLocked()
	hooks := c.hooks
	c.mu.Unlock()
	for i, o := range ops {
		c.t.endOp(o, ends[i].end, ends[i].counted)
	}
	c.cancel()
	c.t.unregister(c)
	runHooks(hooks)
}

// rescheduleLocked puts the connection's next timer event in the shared
// scheduler; mu is held.
func (c *Conn) rescheduleLocked() {
	var next time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !c.torn {
		if !c.initReceived {
			earliest(c.initDeadline)
		}
		earliest(c.expiry)
		if c.inited {
			earliest(c.nextPing)
		}
	}
	c.t.sched.set(c, next)
}

// timerFired is the scheduler's call: the connection's next event is due.
func (c *Conn) timerFired() {
	c.mu.Lock()
	if c.torn {
		c.mu.Unlock()
		return
	}
	c.timerDue = true
	schedule := !c.scheduled
	c.scheduled = true
	c.mu.Unlock()
	if schedule {
		c.t.pool.push(c)
	}
}

// onTimer runs on a worker: the init timeout, a scheduled close, or a
// keep-alive ping (and the pong check) is due.
func (c *Conn) onTimer() {
	now := time.Now()
	var (
		closeCode   int
		closeReason string
		send        []byte
		logClose    bool
	)
	c.mu.Lock()
	switch {
	case c.torn:
	case !c.initReceived && !c.initDeadline.IsZero() && !now.Before(c.initDeadline):
		closeCode, closeReason = CloseInitTimeout, "Connection initialisation timeout"
	case !c.expiry.IsZero() && !now.Before(c.expiry):
		closeCode, closeReason, logClose = c.expiryCode, c.expiryReason, true
	case c.inited && !c.nextPing.IsZero() && !now.Before(c.nextPing):
		c.nextPing = now.Add(c.t.opts.KeepAlive)
		switch {
		case c.legacy:
			send = msgKA
		case c.awaitingPong:
			closeCode, closeReason, logClose = ClosePolicyViolation, "no pong to the keep-alive ping", true
		default:
			send = msgPing
			c.awaitingPong = true
		}
	}
	c.rescheduleLocked()
	c.mu.Unlock()
	if closeCode != 0 {
		if logClose {
			c.t.opts.Log.InfoContext(c.ctx, "graphql websocket closed", "code", closeCode, "reason", closeReason)
		}
		c.closeWith(closeCode, closeReason)
		return
	}
	if send != nil {
		c.write(send)
	}
}

// work runs on a worker of the pool: the connection's due timer and its
// ready subscriptions, until nothing is left. At most one worker works on a
// connection at a time, so a slow client holds up one worker at most.
func (c *Conn) work() { c.workPasses(-1, false) }

// workNow is work in a goroutine that signalled the connection (ready with
// now; c.scheduled set by it): one pass over what is ready, and whatever
// is ready after it goes to the pool, so a publisher does its own change's
// work and no more.
func (c *Conn) workNow() {
	if c.workPasses(1, true) {
		c.t.pool.push(c)
	}
}

// workPasses works on the connection for at most passes passes (no bound
// when negative). It reports whether work was left when it stopped (the
// connection still scheduled); otherwise it cleared c.scheduled. inline
// is workNow's: a message too large to write there stops the pass, and
// what it did not get to is queued again for the pool.
func (c *Conn) workPasses(passes int, inline bool) (left bool) {
	var done []*op // the array of the ops worked on last, cleared
	if !inline && c.deferred != nil {
		msg := c.deferred
		c.deferred = nil
		c.write(msg)
	}
	for pass := 0; ; pass++ {
		c.mu.Lock()
		if done != nil && c.spareOps == nil && cap(done) <= 8 {
			c.spareOps = done[:0]
		}
		if c.torn {
			c.readyOps, c.spareOps, c.timerDue, c.scheduled = nil, nil, false, false
			c.deferred = nil
			c.mu.Unlock()
			return false
		}
		if len(c.readyOps) == 0 && !c.timerDue && c.deferred == nil {
			c.scheduled = false
			c.mu.Unlock()
			return false
		}
		if passes >= 0 && pass == passes {
			c.mu.Unlock()
			return true
		}
		ops := c.readyOps
		c.readyOps, c.spareOps = c.spareOps[:0], nil
		timer := c.timerDue
		c.timerDue = false
		n := 0
		for _, o := range ops {
			o.queued = false
			// An operation still being dispatched is signalled again by
			// runOp once its handler exists.
			if o.lean && o.h != nil && !o.finished {
				ops[n] = o
				n++
			}
		}
		ops = ops[:n]
		c.mu.Unlock()
		if timer {
			c.onTimer()
		}
		for i, o := range ops {
			if c.deferred == nil && !c.drain(o, inline) {
				continue
			}
			// A message was left for the pool: this operation and the
			// ones after it go back in the queue, in order.
			c.mu.Lock()
			for _, o := range ops[i:] {
				if !o.queued && !o.finished {
					o.queued = true
					c.readyOps = append(c.readyOps, o)
				}
			}
			c.mu.Unlock()
			break
		}
		clear(ops)
		done = ops
	}
}

func runHooks(hooks []func()) {
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
}
