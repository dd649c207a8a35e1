package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/graph/wstransport"
)

// Schema wraps the generated schema for two things gqlgen does not do:
//
//   - Rendering a change once. gqlgen resolves and serializes every
//     subscription event per subscriber. For a subscription field whose
//     resolver starts it with Subscribe, the wrapper takes the per-event
//     response loop over: each subscriber computes a fingerprint of its
//     selection set once, and for each event asks the event's Shared for
//     the bytes rendered under that fingerprint. The first subscriber to
//     get there runs the door's plan for the selection (Options.Plan), or
//     else gqlgen's generated code (see subRun.produce); every other
//     subscriber with the same selection reuses those bytes. This is
//     safe when the field's value renders the same for every subscriber
//     (what a subscriber may follow is decided per subscription, by the
//     door's Stream, not per field).
//   - Connection-aware complexity: a connection field costs its children
//     times the page size it asks for, and nodes(ids:) the number of ids.
type Schema struct {
	graphql.ExecutableSchema
	opts Options
	// exec is what rendering needs of the executor's operation contexts,
	// the same for every operation: taken from the first subscription.
	exec atomic.Pointer[execSettings]
	// shapes keeps, per shareable selection (fingerprint handle), its
	// *shapeState: a pool of *renderer (gqlgen's generated code run once
	// and fed one value per rendering) and the selection's plan, when the
	// door compiled one (Options.Plan).
	shapes         sync.Map
	rendererShapes atomic.Int64
}

// Options are what the door tells the engine's Schema.
type Options struct {
	// Present turns a subscription's failure into the error it sends (the
	// door's error presenter).
	Present graphql.ErrorPresenterFunc
	// DefaultPageSize and MaxPageSize price a connection field: its
	// children times the page it asks for (first or last, at most
	// MaxPageSize), DefaultPageSize when it asks for none.
	DefaultPageSize, MaxPageSize int
	// Plan, when set, compiles the selection of a subscription field into
	// a Plan[V] for the field's value type V, which renders its values
	// without gqlgen's generated code; nil leaves the selection to gqlgen.
	// It is given the operation's one root field, only for a shareable
	// selection (see fingerprint) without fragments, once per selection
	// shape (whatever it returns serves every subscription of the shape).
	// A plan must write exactly what the generated code writes for the
	// field's value, the door's field middleware applied, for every
	// caller: the engine does not run the middleware around the fields a
	// plan writes.
	Plan func(root *ast.Field) any
}

// Plan writes one value of a subscription field as gqlgen's generated code
// writes it, the field's selection applied (the value only: the engine
// writes the response object around it). ok false: it wrote nothing, and
// gqlgen renders this value.
type Plan[V any] func(w *bytes.Buffer, v V) (ok bool)

// NewSchema wraps es, the generated executable schema.
func NewSchema(es graphql.ExecutableSchema, opts Options) *Schema {
	return &Schema{ExecutableSchema: es, opts: opts}
}

// execSettings are the executor's parts of an OperationContext.
type execSettings struct {
	disableIntrospection bool
	recoverFunc          graphql.RecoverFunc
	// fields is the executor's field middleware, except around the root
	// field: rendering resolves the subscription field again only to hand
	// the generated code the value (see renderKey), and the middleware
	// (rate limits' subscription slot, for one) has run once, at subscribe.
	fields graphql.FieldMiddleware
	root   graphql.RootFieldMiddleware
}

func newExecSettings(oc *graphql.OperationContext) *execSettings {
	mw := oc.ResolverMiddleware
	return &execSettings{
		disableIntrospection: oc.DisableIntrospection,
		recoverFunc:          oc.RecoverFunc,
		root:                 oc.RootResolverMiddleware,
		fields: func(ctx context.Context, next graphql.Resolver) (any, error) {
			if fc := graphql.GetFieldContext(ctx); fc != nil && fc.Object == "Subscription" {
				return next(ctx)
			}
			return mw(ctx, next)
		},
	}
}

// renderKey carries the value a rendering hands to the generated code, or
// the channel a renderer feeds it through.
type renderKey struct{}

// runCtx is the context a subscribe runs the generated code under: the
// resolver's Subscribe finds it (Value(runKey{})) and leaves its run
// there. It stands where context.WithValue's context would, so it costs
// no allocation of its own.
type runCtx struct {
	context.Context
	e   *Schema
	run runner
}

type runKey struct{}

func (c *runCtx) Value(key any) any {
	if _, ok := key.(runKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// runner is what Exec needs of a subscription Subscribe started.
type runner interface {
	common() *subCommon
	notify(ready func(now bool))
	next(ctx context.Context) *graphql.Response
}

// Exec implements graphql.ExecutableSchema.
//
// A subscription started with Subscribe runs the generated code once, to
// resolve (subscribe) with gqlgen's argument handling, middleware and
// errors, and then drops what gqlgen built for the operation: the
// executor's field contexts and CollectFields cache, the OperationContext
// with its variables and statistics. An idle subscription keeps the door's
// Stream, the parsed operation (shared with every subscriber of the same
// query text through the query cache), its selection's fingerprint
// (interned) and, only when its selection is not shareable, its variables.
// A rendering borrows gqlgen's state from a pool shared by every
// subscription of the same selection (see renderer), or, for a selection
// that is not shareable, builds it afresh (produce).
func (e *Schema) Exec(ctx context.Context) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Subscription {
		return e.ExecutableSchema.Exec(ctx)
	}
	rc := &runCtx{Context: ctx, e: e}
	inner := e.ExecutableSchema.Exec(rc)
	if rc.run == nil {
		// The resolver failed (its error is already recorded) or did not
		// start with Subscribe.
		return inner
	}
	if e.exec.Load() == nil {
		e.exec.CompareAndSwap(nil, newExecSettings(oc))
	}
	run := rc.run.common()
	run.doc, run.op = oc.Doc, oc.Operation
	if key := fingerprint(oc, e.Schema()); key != "" {
		run.shape = unique.Make(key)
	} else {
		// Directives or nested arguments may read them.
		run.vars = oc.Variables
	}
	// On the websocket transport the subscription holds no goroutine while
	// it waits: the stream says when an event is queued, and the transport
	// then calls next, which takes it without waiting.
	if ready := wstransport.ReadyFromContext(ctx); ready != nil {
		run.lean = true
		rc.run.notify(ready)
		// The transport calls next itself, without the executor's wrapper
		// per call (a response context, the response middleware, the
		// extensions): most calls return bytes another subscriber rendered,
		// and a rendering makes its own response context (produceOwn).
		// Not when the executor is about to answer with errors instead.
		if len(graphql.GetErrors(ctx)) == 0 {
			run.direct = wstransport.HandleDirectly(ctx, rc.run.next)
		}
	}
	return rc.run.next
}

// Complexity implements graphql.ExecutableSchema. A cost read from the
// arguments is reported to ComplexityLimit (argsRead), which then does not
// keep it for the next request.
func (e *Schema) Complexity(ctx context.Context, typeName, field string, child int, args map[string]any) (int, bool) {
	var fd *ast.FieldDefinition
	if def := e.Schema().Types[typeName]; def != nil {
		fd = def.Fields.ForName(field)
	}
	if fd != nil && strings.HasSuffix(fd.Type.Name(), "Connection") {
		argsRead(ctx)
		n := e.opts.DefaultPageSize
		for _, k := range []string{"first", "last"} {
			if v, ok := asInt(args[k]); ok && v > 0 {
				n = min(v, e.opts.MaxPageSize)
			}
		}
		return 1 + child*n, true
	}
	if fd != nil && fd.Arguments.ForName("ids") != nil {
		argsRead(ctx)
		if ids, ok := args["ids"].([]any); ok {
			return 1 + child*max(1, len(ids)), true
		}
	}
	n, ok := e.ExecutableSchema.Complexity(ctx, typeName, field, child, args)
	if ok {
		argsRead(ctx) // a generated cost function takes the arguments
	}
	return n, ok
}

// asInt reads an integer argument in any of the forms gqlgen passes raw
// arguments (literal or variable).
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil
	}
	return 0, false
}

// Shared is one event as every subscriber receiving it sees it, holding
// its renderings by key (a selection's fingerprint): of the subscribers
// asking for key, Claim answers one first (it renders, and hands the
// result to Publish exactly once, ok false when not to share) and the
// others, after waiting for Publish, what it published. (pubsub.Event is
// one.) What is published is the engine's (a *graphql.Response, shared
// read-only); the event only hands it on. No function crosses the
// interface: a closure passed through it would be allocated per
// subscriber and event.
type Shared interface {
	Claim(key string) (data any, ok, first bool)
	Publish(key string, data any, ok bool)
}

// Stream is one subscription's source of values, kept by the door: what
// it follows, who may follow it and in which order its values go out are
// the door's. After Subscribe only the engine calls it, one call at a
// time.
type Stream[V any] interface {
	// Next returns the next value to send and the event it came in (whose
	// renderings subscribers with the same selection share; nil renders
	// it for this subscription alone). With wait false it never waits:
	// ok is false when nothing is worth sending now. An error ends the
	// subscription and is sent through Options.Present, unless ctx has
	// ended (the client left).
	Next(ctx context.Context, wait bool) (v V, ev Shared, ok bool, err error)
	// Notify makes the stream call ready, without blocking, whenever Next
	// has something to return (or the stream ended). now passes on the
	// publisher's word that its goroutine may do the subscriber's work
	// itself (pubsub.Subscription.Notify).
	Notify(ready func(now bool))
	// Close ends the stream; called once the operation ends.
	Close()
}

// StreamOf is *S where *S is a Stream of V: the door's stream state S is
// kept inside the engine's subscription, one allocation for both.
type StreamOf[V, S any] interface {
	*S
	Stream[V]
}

// ErrNotWebsocket is what Subscribe answers a subscription that is not on
// the websocket transport (or not run through Schema).
var ErrNotWebsocket = errors.New("engine: subscriptions are served over the websocket transport")

// Subscribe is the resolver of a subscription field whose values render
// once per selection shape (see Schema). When a client subscribes, start
// fills in the door's stream state (validating, checking the caller,
// subscribing) and Subscribe returns a channel nothing reads: the engine
// sends through the stream. When the engine renders a value, the
// generated code resolves the field again and Subscribe hands it that
// value. The stream is closed when the operation ends.
func Subscribe[V, S any, P StreamOf[V, S]](ctx context.Context, start func(P) error) (<-chan V, error) {
	switch x := ctx.Value(renderKey{}).(type) {
	case chan V:
		return x, nil
	case V:
		ch := make(chan V, 1)
		ch <- x
		return ch, nil
	}
	rc, _ := ctx.Value(runKey{}).(*runCtx)
	if rc == nil || wstransport.ConnFromContext(ctx) == nil {
		return nil, ErrNotWebsocket
	}
	run := &subRun[V, S, P]{subCommon: subCommon{e: rc.e}}
	stream := P(&run.stream)
	if err := start(stream); err != nil {
		return nil, err
	}
	// The transport's hook, unlike context.AfterFunc, keeps nothing of ctx
	// (the field and operation contexts under it) alive meanwhile.
	if !wstransport.OnEnd(ctx, stream.Close) {
		context.AfterFunc(ctx, stream.Close)
	}
	rc.run = run
	var none chan V // the engine sends through the stream instead
	return none, nil
}

// subCommon is what the engine keeps of one subscription besides the
// door's stream: what rendering needs. After Exec only the caller of next
// touches it, one call at a time (the websocket transport's worker, or a
// goroutine waiting in next).
type subCommon struct {
	e *Schema
	// lean: the transport calls next when the stream has something; next
	// never waits.
	lean bool
	// direct: the transport calls next without the executor's wrapper
	// (wstransport.HandleDirectly): a rendering runs under a response
	// context of its own and puts its errors in the response.
	direct bool
	// The operation, to render with: shared, read-only.
	doc *ast.QueryDocument
	op  *ast.OperationDefinition
	// shape is the selection's fingerprint; zero when not shareable, and
	// then vars holds the operation's variables.
	shape unique.Handle[string]
	vars  map[string]any
}

func (c *subCommon) common() *subCommon { return c }

// subRun is one subscription: the engine's part and the door's stream.
type subRun[V, S any, P StreamOf[V, S]] struct {
	subCommon
	stream S
}

func (run *subRun[V, S, P]) notify(ready func(now bool)) { P(&run.stream).Notify(ready) }

// next is the subscription's response handler: it waits for the next
// value worth sending and returns it rendered. Driven by the websocket
// transport (lean) it never waits: it is called when the stream has
// something, and returns the transport's idle response when that was not
// worth sending.
func (run *subRun[V, S, P]) next(ctx context.Context) *graphql.Response {
	for {
		v, ev, ok, err := P(&run.stream).Next(ctx, !run.lean)
		if err != nil {
			run.fail(ctx, err)
			return nil
		}
		if ok {
			return run.render(ctx, v, ev)
		}
		if run.lean {
			return wstransport.IdleResponse(ctx) // nothing now; the stream calls back
		}
	}
}

func (run *subRun[V, S, P]) render(ctx context.Context, v V, ev Shared) *graphql.Response {
	if run.shape == (unique.Handle[string]{}) || ev == nil {
		return run.produceOwn(ctx, v)
	}
	key := run.shape.Value()
	data, ok, first := ev.Claim(key)
	shared, _ := data.(*graphql.Response)
	switch {
	case first:
		return run.renderShared(ctx, v, ev, key)
	case ok && shared != nil && run.direct:
		// The transport only reads it (HandleDirectly): one response for
		// every subscriber of the selection.
		return shared
	case ok && shared != nil:
		// The executor's wrapper writes into what it is given.
		return &graphql.Response{Data: shared.Data}
	default:
		return run.produceOwn(ctx, v)
	}
}

// produceOwn is produce for this subscriber's response: with the
// executor's wrapper skipped (direct), under a response context of its own
// whose errors go into the response, as the wrapper's would.
func (run *subRun[V, S, P]) produceOwn(ctx context.Context, v V) *graphql.Response {
	if resp := run.planned(v); resp != nil {
		return resp
	}
	if !run.direct {
		return run.produce(ctx, v)
	}
	x := run.e.exec.Load()
	ctx = graphql.WithResponseContext(ctx, run.e.opts.Present, x.recoverFunc)
	resp := run.produce(ctx, v)
	if resp != nil {
		if errs := graphql.GetErrors(ctx); len(errs) > 0 {
			resp.Errors = append(resp.Errors, errs...)
		}
	}
	return resp
}

// renderShared renders v for every subscriber of ev with this selection
// and publishes the bytes; a rendering with errors is not shared, nor one
// that panicked (the others then render for themselves).
func (run *subRun[V, S, P]) renderShared(ctx context.Context, v V, ev Shared, key string) *graphql.Response {
	published := false
	defer func() {
		if !published {
			ev.Publish(key, nil, false)
		}
	}()
	own := run.produceOwn(ctx, v)
	if own == nil || len(own.Errors) > 0 || (!run.direct && len(graphql.GetErrors(ctx)) > 0) {
		return own
	}
	// produce's buffer is its own: nothing writes to it again. Without
	// the executor's wrapper (direct) nothing writes to own either, so
	// it is shared itself; otherwise a response of its own is.
	shared := own
	if !run.direct {
		shared = &graphql.Response{Data: own.Data}
	}
	ev.Publish(key, shared, true)
	published = true
	return own
}

// produce renders v for this subscription with gqlgen's generated code.
// A shareable selection borrows a renderer of its shape (see renderer);
// otherwise the generated executor runs from a fresh OperationContext with
// the subscription's variables. Either way the generated code resolves the
// subscription field again, this time handing it v (renderKey), and
// marshals the selection; errors go to ctx's response context, as for any
// field. Cancellation is left out: rendering does no I/O, and it would
// give every rendered subscription's context a Done channel to keep.
func (run *subRun[V, S, P]) produce(ctx context.Context, v V) *graphql.Response {
	ctx = context.WithoutCancel(ctx)
	if run.shape != (unique.Handle[string]{}) {
		pool := run.e.rendererPool(run.shape)
		var r *renderer[V]
		if pool != nil {
			r, _ = pool.Get().(*renderer[V])
		}
		if r == nil {
			r = newRenderer[V](ctx, &run.subCommon)
		}
		resp, ok := r.render(ctx, v)
		if ok && pool != nil {
			pool.Put(r)
		}
		return resp
	}
	ctx = graphql.WithOperationContext(context.WithValue(ctx, renderKey{}, v), run.operation(run.vars))
	return run.e.ExecutableSchema.Exec(ctx)(ctx)
}

// operation is the OperationContext rendering runs this subscription's
// operation in.
func (run *subCommon) operation(vars map[string]any) *graphql.OperationContext {
	x := run.e.exec.Load()
	return &graphql.OperationContext{
		RawQuery:               "-", // not kept; nothing reads it
		Variables:              vars,
		OperationName:          run.op.Name,
		Doc:                    run.doc,
		Operation:              run.op,
		DisableIntrospection:   x.disableIntrospection,
		RecoverFunc:            x.recoverFunc,
		ResolverMiddleware:     x.fields,
		RootResolverMiddleware: x.root,
	}
}

// maxRendererShapes bounds the selections that keep a renderer pool and a
// plan: a shape's state is never removed, and clients choose their
// selections (aliases included), so past the bound a selection's
// renderings build their renderer each time instead (what every rendering
// cost before pools), with gqlgen.
const maxRendererShapes = 1024

// shapeState is what the engine keeps for one shareable selection.
type shapeState struct {
	renderers sync.Pool
	// plan renders the selection without gqlgen (nil: gqlgen renders it);
	// planned: the door was asked (Options.Plan), nothing to ask again.
	plan    atomic.Pointer[shapePlan]
	planned atomic.Bool
}

// shapePlan is a selection's plan: the door's Plan[V] (as any: a Schema
// serves every V) and the response's opening, {"alias":, which gqlgen's
// ResolveFieldStream writes around the field's value.
type shapePlan struct {
	open  []byte
	write any
}

// shapeOf is shape's state; nil past maxRendererShapes.
func (e *Schema) shapeOf(shape unique.Handle[string]) *shapeState {
	if st, ok := e.shapes.Load(shape); ok {
		return st.(*shapeState)
	}
	if e.rendererShapes.Load() >= maxRendererShapes {
		return nil
	}
	st, loaded := e.shapes.LoadOrStore(shape, &shapeState{})
	if !loaded {
		e.rendererShapes.Add(1)
	}
	return st.(*shapeState)
}

// rendererPool is shape's pool of renderers; nil past maxRendererShapes.
func (e *Schema) rendererPool(shape unique.Handle[string]) *sync.Pool {
	if st := e.shapeOf(shape); st != nil {
		return &st.renderers
	}
	return nil
}

// planOf is the plan of st's selection, asking the door for it the first
// time a subscription without fragments renders it (op is that
// subscription's operation). A selection with fragments is not given to
// the door (gqlgen merges what they spread); it takes the plan another
// subscription of its shape got, equal fingerprints rendering to equal
// bytes.
func (e *Schema) planOf(st *shapeState, op *ast.OperationDefinition) *shapePlan {
	if p := st.plan.Load(); p != nil || st.planned.Load() || e.opts.Plan == nil {
		return p
	}
	if len(op.SelectionSet) != 1 || hasFragments(op.SelectionSet) {
		return nil
	}
	root, ok := op.SelectionSet[0].(*ast.Field)
	if !ok {
		return nil
	}
	if write := e.opts.Plan(root); write != nil {
		var open bytes.Buffer
		open.WriteByte('{')
		graphql.MarshalString(root.Alias).MarshalGQL(&open)
		open.WriteByte(':')
		st.plan.CompareAndSwap(nil, &shapePlan{open: open.Bytes(), write: write})
	}
	st.planned.Store(true)
	return st.plan.Load()
}

// hasFragments: sel holds a fragment spread or an inline fragment, at any
// depth.
func hasFragments(sel ast.SelectionSet) bool {
	for _, s := range sel {
		f, ok := s.(*ast.Field)
		if !ok || hasFragments(f.SelectionSet) {
			return true
		}
	}
	return false
}

// planned renders v with its selection's plan, as gqlgen's generated code
// renders a subscription's value ({"alias":value}); nil when the selection
// has none (or the plan declines v), and gqlgen renders it. A plan writes
// no error: the response is the data alone, as the generated code's.
func (run *subRun[V, S, P]) planned(v V) *graphql.Response {
	if run.shape == (unique.Handle[string]{}) {
		return nil
	}
	st := run.e.shapeOf(run.shape)
	if st == nil {
		return nil
	}
	p := run.e.planOf(st, run.op)
	if p == nil {
		return nil
	}
	write, ok := p.write.(Plan[V])
	if !ok {
		return nil
	}
	buf := planBuffers.Get().(*bytes.Buffer)
	defer putPlanBuffer(buf)
	buf.Reset()
	buf.Write(p.open)
	if !write(buf, v) {
		return nil
	}
	buf.WriteByte('}')
	// The bytes go to every subscriber of the selection and outlive the
	// buffer.
	return &graphql.Response{Data: bytes.Clone(buf.Bytes())}
}

// planBuffers are the buffers plans write into; a rendering's bytes are
// copied out of them.
var planBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putPlanBuffer(b *bytes.Buffer) {
	if b.Cap() <= 64<<10 {
		planBuffers.Put(b)
	}
}

// renderer is gqlgen's generated code for one shareable selection, run
// once: Exec resolves the subscription field (whose Subscribe, seeing
// renderKey, returns the renderer's feed) and returns the response handler
// that, per call, takes the next value from the feed and marshals the
// selection. Exec's own cost (an input-unmarshaler map of every input
// type, the root field's collection and context, the resolver) was about
// half of a rendering when every rendering ran it (profiled); now it is
// paid once per renderer, and the operation's collected-fields cache
// serves every rendering. A renderer serves one rendering at a time (the
// per-shape sync.Pool hands out another to a concurrent one) and holds no
// subscription's state: the selection renders the same bytes for every
// subscription of its shape, which is what sharing rendered events
// already relies on. A shape is one selection of one field, so the
// renderers in its pool all carry the same V.
type renderer[V any] struct {
	oc   *graphql.OperationContext
	feed chan V
	next graphql.ResponseHandler
}

func newRenderer[V any](ctx context.Context, run *subCommon) *renderer[V] {
	r := &renderer[V]{oc: run.operation(nil), feed: make(chan V, 1)}
	ctx = graphql.WithOperationContext(context.WithValue(ctx, renderKey{}, r.feed), r.oc)
	r.next = run.e.ExecutableSchema.Exec(ctx)
	return r
}

// render marshals v; ok says the renderer is fit to serve again (the
// handler took v from the feed and answered).
func (r *renderer[V]) render(ctx context.Context, v V) (*graphql.Response, bool) {
	r.feed <- v
	resp := r.next(graphql.WithOperationContext(ctx, r.oc))
	if len(r.feed) > 0 || resp == nil {
		return resp, false
	}
	// The generated handler reuses one buffer for every call.
	resp.Data = bytes.Clone(resp.Data)
	return resp, true
}

// fail ends the subscription with err, which the transport sends as an
// "error" message (presented by the door). An ended context is the client
// leaving or the connection closing: nothing to say then.
func (run *subCommon) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	wstransport.AddSubscriptionError(ctx, run.e.opts.Present(ctx, err))
}

// fingerprint names what a subscription's selection renders to: the
// operation's fields, aliases and nested selections in document order,
// fragments inlined. Equal fingerprints render an event to equal bytes
// (different spellings of one selection may miss sharing; that only costs
// a rendering). "" means not shareable: a directive (whose effect can
// depend on variables) or a nested field taking arguments. It walks the
// AST itself rather than gqlgen's CollectFields, whose per-operation cache
// an idle subscription would carry around. A fragment spread a second time
// also makes it "": inlining every spread again would make the walk grow
// with the expansion, not with the document (fragments spreading each
// other twice per level double it each level).
func fingerprint(oc *graphql.OperationContext, schema *ast.Schema) string {
	var b strings.Builder
	w := selectionWriter{b: &b, doc: oc.Doc, schema: schema, spread: map[string]bool{}}
	if schema.Subscription == nil || !w.write(oc.Operation.SelectionSet, schema.Subscription, true) {
		return ""
	}
	return b.String()
}

type selectionWriter struct {
	b      *strings.Builder
	doc    *ast.QueryDocument
	schema *ast.Schema
	spread map[string]bool
}

func (w selectionWriter) write(set ast.SelectionSet, def *ast.Definition, root bool) bool {
	b, doc, schema := w.b, w.doc, w.schema
	if def.Kind != ast.Object {
		// Under an interface or a union, which fragments apply depends on
		// the value: not shareable.
		return false
	}
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if len(s.Directives) > 0 || (!root && len(s.Arguments) > 0) || s.Definition == nil {
				return false
			}
			alias := s.Alias
			if alias == "" {
				alias = s.Name
			}
			b.WriteString(alias)
			b.WriteByte(':')
			b.WriteString(s.Name)
			if len(s.SelectionSet) > 0 {
				child := schema.Types[s.Definition.Type.Name()]
				if child == nil {
					return false
				}
				b.WriteByte('{')
				if !w.write(s.SelectionSet, child, false) {
					return false
				}
				b.WriteByte('}')
			}
			b.WriteByte(',')
		case *ast.InlineFragment:
			if len(s.Directives) > 0 {
				return false
			}
			if applies(def, s.TypeCondition) && !w.write(s.SelectionSet, def, root) {
				return false
			}
		case *ast.FragmentSpread:
			f := doc.Fragments.ForName(s.Name)
			if len(s.Directives) > 0 || f == nil || w.spread[s.Name] {
				return false
			}
			w.spread[s.Name] = true
			if applies(def, f.TypeCondition) && !w.write(f.SelectionSet, def, root) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// applies reports whether a fragment on typeCondition applies to def (an
// object type: write gives up on any other).
func applies(def *ast.Definition, typeCondition string) bool {
	if typeCondition == "" || typeCondition == def.Name {
		return true
	}
	for _, i := range def.Interfaces {
		if i == typeCondition {
			return true
		}
	}
	return false
}
