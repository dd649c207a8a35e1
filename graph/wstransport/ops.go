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
type op struct {
	c      *Conn
	id     string
	idJSON []byte
	ctx    context.Context
	cancel context.CancelFunc

	// Set once by runOp under c.mu, before the first readiness signal is
	// acted on; read-only afterwards.
	h    graphql.ResponseHandler
	rctx context.Context
	rc   *graphql.OperationContext

	// Under c.mu.
	lean     bool // the handler signals readiness (ReadyFromContext)
	queued   bool // in c.readyOps
	finished bool
	silent   bool // ended by a new start with its id (legacy): no complete

	ready func()
	idle  graphql.Response
	// errs are AddSubscriptionError's, touched only by the goroutine
	// running the handler.
	errs []*gqlerror.Error
}

func opFrom(ctx context.Context) *op {
	o, _ := ctx.Value(opKey{}).(*op)
	return o
}

// ReadyFromContext is how a subscription gives up its goroutine. gqlgen's
// model is a graphql.ResponseHandler that blocks until the next event; on
// this transport a subscription may instead promise that its handler never
// blocks, and signal with the returned func each time an event has been
// queued for it. The transport then calls the handler on its worker pool:
// it returns the next response, IdleResponse(ctx) when it has nothing to
// send after all (an event it skips), or nil when the stream is over.
//
// ctx is the context the subscription's resolver (or its
// ExecutableSchema.Exec) sees. Calling ReadyFromContext is the promise:
// afterwards the handler is called once at the start and then once per
// signal (signals coalesce), never concurrently. It returns nil outside
// this transport, where the handler must block as usual. The func may be
// called from any goroutine and never blocks.
func ReadyFromContext(ctx context.Context) func() {
	o := opFrom(ctx)
	if o == nil {
		return nil
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.ready == nil {
		o.lean = true
		o.ready = func() { o.c.ready(o) }
	}
	return o.ready
}

// IdleResponse is what a handler that signals readiness returns when it
// was called but has nothing to send (it skipped a stale event). Nil
// outside this transport.
func IdleResponse(ctx context.Context) *graphql.Response {
	if o := opFrom(ctx); o != nil {
		return &o.idle
	}
	return nil
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

// ready queues a lean operation for a worker.
func (c *Conn) ready(o *op) {
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
	if schedule {
		c.t.pool.push(c)
	}
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
			c.ready(replaced)
		}
		err := c.t.opts.OperationLimitError(limit)
		resp := c.exec.DispatchError(ctx, gqlerror.List{{Message: err.Error(), Err: err}})
		id := quoteID(m.ID)
		c.sendErrors(id, resp.Errors)
		c.write(appendMsg(nil, "complete", id, nil))
		return
	}
	o := &op{c: c, id: m.ID, idJSON: quoteID(m.ID)}
	o.ctx, o.cancel = context.WithCancel(context.WithValue(c.opCtx, opKey{}, o))
	c.ops = append(c.ops, o)
	c.mu.Unlock()
	if replaced != nil {
		replaced.cancel()
		c.ready(replaced)
	}
	c.t.ops.Add(1)
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
	c.ready(o)
}

func (c *Conn) findLocked(id string) *op {
	for _, o := range c.ops {
		if o.id == id && !o.silent {
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
			c.recovered(o, rc, ctx, r)
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
	o.h, o.rctx, o.rc = h, rctx, rc
	lean := o.lean
	c.mu.Unlock()
	if lean {
		c.t.lean.Add(1)
		c.ready(o) // the first call: a current state, or an early event
		return
	}
	for {
		resp := h(rctx)
		if resp == nil {
			break
		}
		c.sendResponse(o.idJSON, resp)
	}
	c.finish(o)
}

// drain calls a lean operation's handler until it has nothing more to send.
func (c *Conn) drain(o *op) {
	defer func() {
		if r := recover(); r != nil {
			c.recovered(o, o.rc, o.rctx, r)
		}
	}()
	for {
		if o.ctx.Err() != nil || c.closing.Load() {
			c.finish(o)
			return
		}
		resp := o.h(o.rctx)
		switch resp {
		case nil:
			c.finish(o)
			return
		case &o.idle:
			return
		}
		c.sendResponse(o.idJSON, resp)
	}
}

// recovered reports a panic in an operation as gqlgen does: an error
// message, then the operation ends.
func (c *Conn) recovered(o *op, rc *graphql.OperationContext, ctx context.Context, r any) {
	var err error
	if rc != nil {
		err = rc.Recover(ctx, r)
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
	c.sendErrors(o.idJSON, gqlerror.List{gerr})
	c.finish(o)
}

// endEarly ends an operation that failed before it ran: resp's errors go
// out as an "error" message or a data message, then complete.
func (c *Conn) endEarly(o *op, kind string, resp *graphql.Response) {
	if ok, silent := c.detach(o); !ok || silent {
		return
	}
	if kind == "error" {
		c.sendErrors(o.idJSON, resp.Errors)
	} else {
		c.sendResponse(o.idJSON, &graphql.Response{Errors: resp.Errors})
	}
	c.write(appendMsg(nil, "complete", o.idJSON, nil))
}

// finish ends an operation whose stream is over: an "error" message when
// it recorded subscription errors, else complete.
func (c *Conn) finish(o *op) {
	if ok, silent := c.detach(o); !ok || silent || c.closing.Load() {
		return
	}
	if len(o.errs) > 0 {
		c.sendErrors(o.idJSON, o.errs)
		return
	}
	c.write(appendMsg(nil, "complete", o.idJSON, nil))
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
	c.removeLocked(o)
	c.mu.Unlock()
	c.t.endOp(o)
	o.cancel()
	return true, silent
}

func (t *Transport) endOp(o *op) {
	t.ops.Add(-1)
	if o.lean && o.h != nil {
		t.lean.Add(-1)
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

func (c *Conn) sendResponse(id []byte, resp *graphql.Response) {
	bp := bufPool.Get().(*[]byte)
	b := appendMsgHead((*bp)[:0], c.dataType(), id)
	b, err := appendResponse(b, resp)
	if err != nil {
		c.t.opts.Log.Error("graphql websocket: cannot encode a response", "err", err.Error())
	} else {
		c.write(append(b, '}'))
	}
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		bufPool.Put(bp)
	}
}

func (c *Conn) sendErrors(id []byte, errs gqlerror.List) {
	p, err := json.Marshal(errs)
	if err != nil {
		c.t.opts.Log.Error("graphql websocket: cannot encode errors", "err", err.Error())
		return
	}
	c.write(appendMsg(nil, "error", id, p))
}

// appendMsgHead starts {"type":typ,"id":id,"payload": — the caller appends
// the payload and the closing brace.
func appendMsgHead(b []byte, typ string, id []byte) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, '"')
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	return append(b, `,"payload":`...)
}

// appendMsg encodes a whole message; payload and id may be nil.
func appendMsg(b []byte, typ string, id []byte, payload []byte) []byte {
	if payload == nil {
		b = append(b, `{"type":"`...)
		b = append(b, typ...)
		b = append(b, '"')
		if id != nil {
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

func quoteID(id string) []byte {
	b, _ := json.Marshal(id) // a string always encodes
	return b
}
