package wstransport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

type opKey struct{}

// op is one running operation (subscribe / start) on a connection.
//
// A lean operation (ReadyFromContext) lives for as long as its client
// follows it, mostly idle, so it keeps as little as it can: not the
// OperationContext nor the context DispatchOperation returned (its handler
// is called with ctx), no idle response between calls.
type op struct {
	c *Conn
	// id is the client's operation id as a JSON string (quoted), the form
	// every message carries it in.
	id     string
	ctx    context.Context
	cancel context.CancelFunc

	// Set once by runOp under c.mu, before the first readiness signal is
	// acted on; read-only afterwards.
	h graphql.ResponseHandler

	// Under c.mu.
	lean     bool // the handler signals readiness (ReadyFromContext)
	counted  bool // in Stats.LeanOperations
	queued   bool // in c.readyOps
	finished bool
	silent   bool // ended by a new start with its id (legacy): no complete

	ready func(now bool)
	onEnd func() // OnEnd's, run once when the operation ends
	// direct is HandleDirectly's handler, called instead of the one
	// DispatchOperation returns. Set while the operation is dispatched
	// (by the goroutine dispatching it), read by runOp after that.
	direct graphql.ResponseHandler
	// idle is the response IdleResponse gave the handler call in
	// progress. It and errs (AddSubscriptionError's) are touched only by
	// the goroutine running the handler, or by the resolver before the
	// handler first runs.
	idle *graphql.Response
	errs []*gqlerror.Error
}

// opValues is an operation's context under its cancellation: the values
// of the connection's InitFunc context plus the operation itself (opKey),
// and none of that context's cancellation (operations end through their
// own cancel; teardown cancels each). Being a pointer in a struct it
// becomes a context.Context without an allocation, sparing each operation
// the context.WithValue and WithoutCancel layers it would otherwise take.
type opValues struct{ o *op }

func (opValues) Deadline() (time.Time, bool) { return time.Time{}, false }
func (opValues) Done() <-chan struct{}       { return nil }
func (opValues) Err() error                  { return nil }
func (v opValues) Value(key any) any {
	if key == (opKey{}) {
		return v.o
	}
	return v.o.c.opCtx.Value(key)
}
func (v opValues) String() string { return "wstransport operation " + v.o.id }

func opFrom(ctx context.Context) *op {
	o, _ := ctx.Value(opKey{}).(*op)
	return o
}

// ReadyFromContext is how a subscription gives up its goroutine. gqlgen's
// model is a graphql.ResponseHandler that blocks until the next event; on
// this transport a subscription may instead promise that its handler never
// blocks, and signal with the returned func each time an event has been
// queued for it. The transport then calls the handler on its worker pool,
// or, when the signal says now (the signalling goroutine may do the work:
// a publisher handing over its own change, holding no lock the handler
// needs) and the socket can take a message without waiting, right there:
// it returns the next response, IdleResponse(ctx) when it has nothing to
// send after all (an event it skips), or nil when the stream is over.
//
// ctx is the context the subscription's resolver (or its
// ExecutableSchema.Exec) sees. Calling ReadyFromContext is the promise:
// afterwards the handler is called once at the start and then once per
// signal (signals coalesce), never concurrently. It returns nil outside
// this transport, where the handler must block as usual. The func may be
// called from any goroutine and never blocks.
//
// So that an idle subscription keeps none of gqlgen's per-operation state,
// the transport does not keep the OperationContext or the context
// DispatchOperation returned: the handler is called with the operation's
// own context (ended when the operation ends; it carries the connection's
// values, the InitFunc's, and this package's), under gqlgen's response
// context. A handler that needs an OperationContext (to run the generated
// executor) builds one when it renders, from what it kept.
func ReadyFromContext(ctx context.Context) func(now bool) {
	o := opFrom(ctx)
	if o == nil {
		return nil
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.ready == nil {
		o.lean = true
		o.ready = func(now bool) { o.c.ready(o, now) }
	}
	return o.ready
}

// IdleResponse is what a handler that signals readiness returns when it
// was called but has nothing to send (it skipped a stale event). Call it
// from the handler each time, as it returns: the response is good for that
// one call (the executor's wrapper writes into it, and an idle operation
// keeps none; a handler given to HandleDirectly, which no wrapper writes
// into, gets one shared response). Nil outside this transport.
func IdleResponse(ctx context.Context) *graphql.Response {
	o := opFrom(ctx)
	if o == nil {
		return nil
	}
	if o.direct != nil {
		o.idle = &idleDirect
	} else {
		o.idle = &graphql.Response{}
	}
	return o.idle
}

// idleDirect is IdleResponse's answer to a direct handler: nothing writes
// into it, and the transport only compares it.
var idleDirect graphql.Response

// HandleDirectly replaces, for the lean operation ctx belongs to (see
// ReadyFromContext, which must have been called first), the response
// handler gqlgen's executor returns by h. The executor wraps every call of
// an operation's handler in a response context of its own, its response
// middleware and its extensions (about ten allocations a call, profiled,
// for a subscription event that is sent as rendered bytes); h is called
// without them, with the operation's context, so it must run what it
// renders under a response context (graphql.WithResponseContext) and put
// that context's errors into the response itself. The transport only
// reads the responses h returns, so h may return one response to several
// operations (subscribers of one rendering). Call it from the
// operation's ExecutableSchema.Exec (or its resolver), before Exec
// returns. It reports false, doing nothing, outside this transport or
// for an operation that is not lean.
func HandleDirectly(ctx context.Context, h graphql.ResponseHandler) bool {
	o := opFrom(ctx)
	if o == nil || h == nil {
		return false
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if !o.lean || o.h != nil {
		return false
	}
	o.direct = h
	return true
}

// OnEnd arranges for f to run once, when the operation ctx belongs to ends:
// it completes, fails, is stopped by its client, or its connection closes
// (at once, on the caller's goroutine, if it has already ended). Functions
// registered several times run last first. It is the transport's
// context.AfterFunc for what an operation holds (a hub subscription), but
// keeps neither ctx (with the resolver's field and operation contexts
// under it) nor a goroutine or cancel registration alive while the
// operation idles. f must not block. It reports false, registering
// nothing, outside this transport.
func OnEnd(ctx context.Context, f func()) bool {
	o := opFrom(ctx)
	if o == nil {
		return false
	}
	o.c.mu.Lock()
	if o.finished {
		o.c.mu.Unlock()
		f()
		return true
	}
	if prev := o.onEnd; prev != nil {
		o.onEnd = func() { f(); prev() }
	} else {
		o.onEnd = f
	}
	o.c.mu.Unlock()
	return true
}

// AddSubscriptionError records an error to end the subscription with: once
// its handler returns nil, the client gets an "error" message with these
// errors instead of "complete" (transport.AddSubscriptionError of gqlgen's
// transport, which only works there). Outside this transport it does
// nothing.
func AddSubscriptionError(ctx context.Context, err *gqlerror.Error) {
	if o := opFrom(ctx); o != nil && err != nil {
		o.errs = append(o.errs, err)
	}
}

// ready queues a lean operation for a worker, or, with now, works on the
// connection in the calling goroutine (workNow) when no worker has it and
// its socket has nothing unsent. That saves the hand-off to a worker (a
// wake-up, and on a busy machine a wait in the run queue, between a
// commit and its subscriber) for the common case: a change with a few
// subscribers, each reading what it is sent.
func (c *Conn) ready(o *op, now bool) {
	c.mu.Lock()
	if c.torn || o.finished {
		c.mu.Unlock()
		return
	}
	if !o.queued {
		o.queued = true
		c.readyOps = append(c.readyOps, o)
	}
	schedule := !c.scheduled
	c.scheduled = true
	c.mu.Unlock()
	if !schedule {
		return
	}
	if now && !c.t.opts.NoInlineWrites && c.drained() {
		c.workNow()
		return
	}
	c.t.pool.push(c)
}

// startOp registers a subscribe (start) and dispatches it on a goroutine of
// its own; for a lean subscription that goroutine ends after dispatch.
func (c *Conn) startOp(m *inMsg, start time.Time) {
	if m.ID == "" {
		c.protocolError("message without id")
		return
	}
	c.mu.Lock()
	if !c.inited {
		c.mu.Unlock()
		if !c.legacy {
			c.closeWith(CloseUnauthorized, "Unauthorized")
		} else {
			c.protocolError("unexpected message " + m.Type)
		}
		return
	}
	var replaced *op
	if old := c.findLocked(m.ID); old != nil {
		if !c.legacy {
			c.mu.Unlock()
			c.closeWith(CloseSubscriberExists, "Subscriber for "+m.ID+" already exists")
			return
		}
		// subscriptions-transport-ws servers end the old operation
		// silently and start the new one. It stays listed (for teardown)
		// until it has finished, but no longer answers to its id.
		old.silent = true
		replaced = old
	}
	if limit := c.t.opts.MaxOperations; limit > 0 && c.activeLocked() >= limit {
		ctx := c.opCtx
		c.mu.Unlock()
		if replaced != nil {
			replaced.cancel()
			c.ready(replaced, false)
		}
		err := c.t.opts.OperationLimitError(limit)
		resp := c.exec.DispatchError(ctx, gqlerror.List{{Message: err.Error(), Err: err}})
		id := quoteID(m.ID)
		c.sendErrors(id, resp.Errors)
		c.write(appendMsg(nil, "complete", id, nil))
		return
	}
	o := &op{c: c, id: quoteID(m.ID)}
	o.ctx, o.cancel = context.WithCancel(opValues{o})
	c.ops = append(c.ops, o)
	c.mu.Unlock()
	if replaced != nil {
		replaced.cancel()
		c.ready(replaced, false)
	}
	c.t.ops.Add(1)
	if m.refused != nil {
		go c.refuseOp(o, m.refused)
		return
	}
	go c.runOp(o, m.Payload, start)
}

// stopOp is the client's complete (stop): the operation's context ends,
// and whoever runs its handler finishes it (sending complete, as gqlgen
// does).
func (c *Conn) stopOp(id string) {
	c.mu.Lock()
	o := c.findLocked(id)
	c.mu.Unlock()
	if o == nil {
		return
	}
	o.cancel()
	c.ready(o, false)
}

func (c *Conn) findLocked(id string) *op {
	if len(c.ops) == 0 {
		return nil
	}
	q := quoteID(id)
	for _, o := range c.ops {
		if o.id == q && !o.silent {
			return o
		}
	}
	return nil
}

// activeLocked counts the operations that hold a place (not one a legacy
// start replaced, which is only finishing).
func (c *Conn) activeLocked() int {
	n := 0
	for _, o := range c.ops {
		if !o.silent {
			n++
		}
	}
	return n
}

func (c *Conn) removeLocked(o *op) {
	for i, x := range c.ops {
		if x == o {
			last := len(c.ops) - 1
			c.ops[i] = c.ops[last]
			c.ops[last] = nil
			c.ops = c.ops[:last]
			if len(c.ops) == 0 {
				c.ops = nil
			}
			return
		}
	}
}

// runOp parses, validates and dispatches an operation, like gqlgen's
// wsConnection.subscribe. A lean subscription is handed to the worker pool;
// anything else keeps this goroutine and loops on its handler.
func (c *Conn) runOp(o *op, payload json.RawMessage, start time.Time) {
	ctx := graphql.StartOperationTrace(o.ctx)
	var rc *graphql.OperationContext
	defer func() {
		if r := recover(); r != nil {
			var rf graphql.RecoverFunc
			if rc != nil {
				rf = rc.RecoverFunc
			}
			c.recovered(o, rf, ctx, r)
		}
	}()
	params := &graphql.RawParams{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(params); err != nil {
		resp := c.exec.DispatchError(ctx, gqlerror.List{{Message: "invalid json"}})
		c.endEarly(o, "error", resp)
		return
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		// Classify before presenting: the presenter may rewrite the
		// extensions.code the classification reads.
		kind := errcode.GetErrorKind(errs)
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		if kind == errcode.KindProtocol {
			c.endEarly(o, "error", resp)
		} else {
			c.endEarly(o, "data", resp)
		}
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	h, rctx := c.exec.DispatchOperation(ctx, rc)
	c.mu.Lock()
	if o.direct != nil && o.lean {
		h = o.direct
	}
	o.h = h
	if c.recoverFn == nil {
		c.recoverFn = rc.RecoverFunc
	}
	lean := o.lean
	o.counted = lean && !o.finished // not when teardown came first
	counted := o.counted
	c.mu.Unlock()
	if lean {
		// From here on the handler runs with o.ctx: rc, rctx and what
		// hangs off them are garbage once this returns.
		if counted {
			c.t.lean.Add(1)
			c.ready(o, false) // the first call: a current state, or an early event
		}
		return
	}
	for {
		resp := h(rctx)
		if resp == nil {
			break
		}
		c.sendResponse(o.id, resp, false)
	}
	c.finish(o)
}

// refuseOp ends an operation whose message CheckMessage refused, with
// an error message carrying err.
func (c *Conn) refuseOp(o *op, err error) {
	ctx := graphql.StartOperationTrace(o.ctx)
	defer func() {
		if r := recover(); r != nil {
			c.recovered(o, nil, ctx, r)
		}
	}()
	var ge *gqlerror.Error
	if !errors.As(err, &ge) {
		ge = &gqlerror.Error{Message: err.Error(), Err: err}
	}
	resp := c.exec.DispatchError(ctx, gqlerror.List{ge})
	c.endEarly(o, "error", resp)
}

// drain calls a lean operation's handler until it has nothing more to send.
// With inline (a publisher's goroutine, workNow) it stops at a message too
// large to write there, which it leaves in c.deferred, and reports true.
func (c *Conn) drain(o *op, inline bool) (deferred bool) {
	defer func() {
		if r := recover(); r != nil {
			c.mu.Lock()
			rf := c.recoverFn
			c.mu.Unlock()
			c.recovered(o, rf, o.ctx, r)
		}
	}()
	for {
		if o.ctx.Err() != nil || c.closing.Load() {
			c.finish(o)
			return
		}
		resp := o.h(o.ctx)
		idle := o.idle
		o.idle = nil
		switch {
		case resp == nil:
			c.finish(o)
			return
		case resp == idle:
			return
		}
		if !c.sendResponse(o.id, resp, inline) {
			return true
		}
	}
}

// recovered reports a panic in an operation as gqlgen does: an error
// message, then the operation ends.
func (c *Conn) recovered(o *op, rf graphql.RecoverFunc, ctx context.Context, r any) {
	var err error
	if rf != nil {
		err = graphql.ErrorOnPath(ctx, rf(ctx, r)) // OperationContext.Recover
	} else {
		err = graphql.DefaultRecover(ctx, r)
	}
	var gerr *gqlerror.Error
	if !errors.As(err, &gerr) {
		gerr = &gqlerror.Error{}
		if err != nil {
			gerr.Message = err.Error()
		}
	}
	c.sendErrors(o.id, gqlerror.List{gerr})
	c.finish(o)
}

// endEarly ends an operation that failed before it ran: resp's errors go
// out as an "error" message or a data message, then complete.
func (c *Conn) endEarly(o *op, kind string, resp *graphql.Response) {
	if ok, silent := c.detach(o); !ok || silent {
		return
	}
	if kind == "error" {
		c.sendErrors(o.id, resp.Errors)
	} else {
		c.sendResponse(o.id, &graphql.Response{Errors: resp.Errors}, false)
	}
	c.write(appendMsg(nil, "complete", o.id, nil))
}

// finish ends an operation whose stream is over: an "error" message when
// it recorded subscription errors, else complete.
func (c *Conn) finish(o *op) {
	if ok, silent := c.detach(o); !ok || silent || c.closing.Load() {
		return
	}
	if len(o.errs) > 0 {
		c.sendErrors(o.id, o.errs)
		return
	}
	c.write(appendMsg(nil, "complete", o.id, nil))
}

// detach marks o finished and forgets it; ok is false when it already
// was. silent says no message may end it (a legacy start replaced it).
func (c *Conn) detach(o *op) (ok, silent bool) {
	c.mu.Lock()
	if o.finished {
		c.mu.Unlock()
		return false, false
	}
	o.finished = true
	silent = o.silent
	end, counted := o.onEnd, o.counted
	o.onEnd = nil
	c.removeLocked(o)
	c.mu.Unlock()
	c.t.endOp(o, end, counted)
	return true, silent
}

// endOp ends a finished operation: its context, its counters and its
// OnEnd functions. end and counted are read under c.mu together with
// finished being set.
func (t *Transport) endOp(o *op, end func(), counted bool) {
	t.ops.Add(-1)
	if counted {
		t.lean.Add(-1)
	}
	o.cancel()
	if end != nil {
		end()
	}
}

// dataType is the message carrying a result.
func (c *Conn) dataType() string {
	if c.legacy {
		return "data"
	}
	return "next"
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// inlineWriteMax is the largest message a publisher's goroutine writes
// itself (workNow). The socket it writes to has nothing unsent (drained),
// so its send buffer, at least this large even under memory pressure,
// takes the message without waiting for the client; a larger one is left
// to the worker pool.
const inlineWriteMax = 4 << 10

// sendResponse writes resp as the operation's next (data) message. With
// inline, a message over inlineWriteMax is not written but kept in
// c.deferred for the worker pool, and sendResponse reports false.
func (c *Conn) sendResponse(id string, resp *graphql.Response, inline bool) (sent bool) {
	bp := bufPool.Get().(*[]byte)
	b := appendMsgHead((*bp)[:0], c.dataType(), id)
	b, err := appendResponse(b, resp)
	sent = true
	switch {
	case err != nil:
		c.t.opts.Log.Error("graphql websocket: cannot encode a response", "err", err.Error())
	case inline && len(b)+1 > inlineWriteMax:
		c.deferred = append(bytes.Clone(b), '}')
		sent = false
	default:
		c.write(append(b, '}'))
	}
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		bufPool.Put(bp)
	}
	return sent
}

func (c *Conn) sendErrors(id string, errs gqlerror.List) {
	p, err := json.Marshal(errs)
	if err != nil {
		c.t.opts.Log.Error("graphql websocket: cannot encode errors", "err", err.Error())
		return
	}
	c.write(appendMsg(nil, "error", id, p))
}

// appendMsgHead starts {"type":typ,"id":id,"payload": — the caller appends
// the payload and the closing brace.
func appendMsgHead(b []byte, typ string, id string) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, '"')
	if id != "" {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	return append(b, `,"payload":`...)
}

// appendMsg encodes a whole message; payload may be nil and id empty.
func appendMsg(b []byte, typ string, id string, payload []byte) []byte {
	if payload == nil {
		b = append(b, `{"type":"`...)
		b = append(b, typ...)
		b = append(b, '"')
		if id != "" {
			b = append(b, `,"id":`...)
			b = append(b, id...)
		}
		return append(b, '}')
	}
	b = appendMsgHead(b, typ, id)
	b = append(b, payload...)
	return append(b, '}')
}

// appendResponse encodes resp as gqlgen's transport would (json.Marshal of
// graphql.Response), without re-encoding the data in the common case of a
// plain result: the executor's output is already valid JSON.
func appendResponse(b []byte, resp *graphql.Response) ([]byte, error) {
	if len(resp.Errors) == 0 && len(resp.Extensions) == 0 && resp.Label == "" && resp.Path == nil && resp.HasNext == nil {
		b = append(b, `{"data":`...)
		if len(resp.Data) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, resp.Data...)
		}
		return append(b, '}'), nil
	}
	p, err := json.Marshal(resp)
	if err != nil {
		return b, err
	}
	return append(b, p...), nil
}

func quoteID(id string) string {
	b, _ := json.Marshal(id) // a string always encodes
	return string(b)
}
