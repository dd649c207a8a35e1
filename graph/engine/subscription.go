package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/voucher"
)

// Schema wraps the generated schema for two things gqlgen does not do:
//
//   - Rendering a change once. gqlgen resolves and serializes every
//     subscription event per subscriber. For voucherUpdated the wrapper
//     takes the per-event response loop over: each subscriber computes a
//     fingerprint of its selection set once, and for each event asks the
//     shared pubsub.Event for the bytes rendered under that fingerprint.
//     The first subscriber to get there runs gqlgen's generated code (see
//     subRun.produce); every other subscriber with the same selection
//     reuses those bytes. Voucher fields do not depend on who is asking
//     (visibility is decided per subscription, not per field), which is
//     what makes sharing safe.
//   - Connection-aware complexity: a connection field costs its children
//     times the page size it asks for, and nodes(ids:) the number of ids.
type Schema struct {
	graphql.ExecutableSchema
	present graphql.ErrorPresenterFunc
	// recheck bounds how long a subscriber keeps receiving after it lost
	// the right to see what it follows (a membership deactivated):
	// visibility is checked again before sending when the last check is
	// older.
	recheck time.Duration
	// recent shares re-checks between subscriptions of one caller to one
	// key: 5,000 dashboards of one user on one business need one query
	// per interval, not 5,000 on the same event.
	recent *recentChecks
	// exec is what rendering needs of the executor's operation contexts,
	// the same for every operation: taken from the first subscription.
	exec atomic.Pointer[execSettings]
	// renderers keeps, per shareable selection (fingerprint handle), a
	// *sync.Pool of *renderer: gqlgen's generated code run once and fed
	// one event per rendering.
	renderers      sync.Map
	rendererShapes atomic.Int64
}

// NewSchema wraps es, the generated executable schema. present turns a
// subscription's failure into the error it sends (the door's error
// presenter); recheck is how often a subscription checks again, before
// sending, that its caller may still follow what it follows.
func NewSchema(es graphql.ExecutableSchema, present graphql.ErrorPresenterFunc, recheck time.Duration) *Schema {
	return &Schema{ExecutableSchema: es, present: present, recheck: recheck, recent: &recentChecks{}}
}

// execSettings are the executor's parts of an OperationContext.
type execSettings struct {
	disableIntrospection bool
	recoverFunc          graphql.RecoverFunc
	// fields is the executor's field middleware, except around the root
	// field: rendering resolves voucherUpdated again only to hand the
	// generated code the event (see renderKey), and the middleware (rate
	// limits' subscription slot, for one) has run once, at subscribe.
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

// runKey carries the *subRun a subscribe fills in; renderKey carries the
// *ent.Voucher a rendering hands to the generated code, or the channel a
// renderer feeds it through.
type (
	runKey    struct{}
	renderKey struct{}
)

// recentChecks remembers when a caller was last found allowed to follow a
// key. A check younger than half the re-check interval stands in for a new
// one, so a subscriber keeps receiving at most 1.5 intervals after it lost
// the right (instead of 1).
type recentChecks struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

func (c *recentChecks) fresh(key string, within time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[key]
	return ok && time.Since(t) < within
}

func (c *recentChecks) mark(key string, within time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	c.at[key] = now
	if now.Sub(c.pruned) > within {
		for k, t := range c.at {
			if now.Sub(t) >= within {
				delete(c.at, k)
			}
		}
		c.pruned = now
	}
}

// Exec implements graphql.ExecutableSchema.
//
// A voucherUpdated subscription runs the generated code once, to resolve
// (subscribe) with gqlgen's argument handling, middleware and errors, and
// then drops what gqlgen built for the operation: the executor's field
// contexts and CollectFields cache, the OperationContext with its
// variables and statistics. An idle subscription keeps its hub mailbox,
// the parsed operation (shared with every subscriber of the same query
// text through the query cache), its selection's fingerprint (interned)
// and, only when its selection is not shareable, its variables. A
// rendering borrows gqlgen's state from a pool shared by every subscription
// of the same selection (see renderer), or, for a selection that is not
// shareable, builds it afresh (produce).
func (e *Schema) Exec(ctx context.Context) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Subscription {
		return e.ExecutableSchema.Exec(ctx)
	}
	run := &subRun{e: e}
	inner := e.ExecutableSchema.Exec(context.WithValue(ctx, runKey{}, run))
	if run.sub == nil {
		// The resolver failed (its error is already recorded) or this is
		// not voucherUpdated.
		return inner
	}
	if e.exec.Load() == nil {
		e.exec.CompareAndSwap(nil, newExecSettings(oc))
	}
	run.doc, run.op = oc.Doc, oc.Operation
	if key := fingerprint(oc, e.Schema()); key != "" {
		run.shape = unique.Make(key)
	} else {
		// Directives or nested arguments may read them.
		run.vars = oc.Variables
	}
	// On the websocket transport the subscription holds no goroutine while
	// it waits: the hub says when an event is queued, and the transport
	// then calls next, which takes it without waiting.
	if ready := wstransport.ReadyFromContext(ctx); ready != nil {
		run.lean = true
		run.sub.Notify(ready)
	}
	return run.next
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
		n := paging.DefaultPageSize
		for _, k := range []string{"first", "last"} {
			if v, ok := asInt(args[k]); ok && v > 0 {
				n = min(v, paging.MaxPageSize)
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

// subRun is one voucherUpdated subscription: its hub mailbox, what it has
// sent, and what rendering needs. After Exec only the caller of next
// touches it, one call at a time (the websocket transport's worker, or a
// goroutine waiting in next).
type subRun struct {
	e *Schema
	// vouchers answers whether the caller may still follow what it follows.
	vouchers Vouchers
	sub      *pubsub.Subscription
	// watch is what the subscription follows.
	watch voucher.Watch
	// lean: the transport calls next when the hub has queued something;
	// next never waits.
	lean bool
	last int
	// checked is when visibility was last checked (monoNow).
	checked int64
	initial *pubsub.Event

	// The operation, to render with: shared, read-only.
	doc *ast.QueryDocument
	op  *ast.OperationDefinition
	// shape is the selection's fingerprint; zero when not shareable, and
	// then vars holds the operation's variables.
	shape unique.Handle[string]
	vars  map[string]any
}

// next is the subscription's response handler: it waits for the next
// event worth sending and returns it rendered. Driven by the websocket
// transport (lean) it never waits: it is called when the hub has queued
// something, and returns the transport's idle response when that was not
// worth sending.
func (run *subRun) next(ctx context.Context) *graphql.Response {
	for {
		ev := run.initial
		if ev != nil {
			run.initial = nil
		} else {
			var err error
			if run.lean {
				ev, err = run.sub.TryNext()
			} else {
				ev, err = run.sub.Next(ctx)
			}
			if err != nil {
				run.fail(ctx, err)
				return nil
			}
			if ev == nil {
				return wstransport.IdleResponse(ctx) // nothing now; the hub calls back
			}
		}
		v := ev.Voucher
		if run.watch.Kind == pubsub.ByVoucher {
			// Never an older version after a newer one; the same one only
			// when re-sent after a possible loss.
			if v.Version < run.last || (v.Version == run.last && !ev.Resync) {
				continue
			}
			run.last = v.Version
		}
		if now := monoNow(); time.Duration(now-run.checked) > run.e.recheck {
			if err := run.recheck(ctx); err != nil {
				run.fail(ctx, err)
				return nil
			}
			run.checked = monoNow()
		}
		return run.render(ctx, ev)
	}
}

// recheck checks again that the caller may follow what it follows, unless
// another subscription of the same caller to the same key just did.
func (run *subRun) recheck(ctx context.Context) error {
	recent, within := run.e.recent, run.e.recheck/2
	var checkKey string
	if recent != nil {
		var caller string
		if p := auth.FromContext(ctx); p != nil {
			caller = p.ID
		}
		checkKey = strconv.Itoa(int(run.watch.Kind)) + "|" + run.watch.Key + "|" + caller
		if recent.fresh(checkKey, within) {
			return nil
		}
	}
	// The query runs to its end even if the operation ends meanwhile (it
	// is short): a query under the operation's context would give that
	// context a Done channel and a children map, which an idle
	// subscription would then carry for the rest of its life.
	if err := run.vouchers.MayFollow(context.WithoutCancel(ctx), run.watch); err != nil {
		return err
	}
	if recent != nil {
		recent.mark(checkKey, within)
	}
	return nil
}

func (run *subRun) render(ctx context.Context, ev *pubsub.Event) *graphql.Response {
	if run.shape == (unique.Handle[string]{}) {
		return run.produce(ctx, ev.Voucher)
	}
	var own *graphql.Response
	data, ok := ev.Render(run.shape.Value(), func() ([]byte, bool) {
		own = run.produce(ctx, ev.Voucher)
		if own == nil || len(own.Errors) > 0 || len(graphql.GetErrors(ctx)) > 0 {
			return nil, false
		}
		// produce's buffer is its own: nothing writes to it again.
		return own.Data, true
	})
	switch {
	case own != nil:
		return own
	case ok:
		return &graphql.Response{Data: data}
	default:
		return run.produce(ctx, ev.Voucher)
	}
}

// produce renders v for this subscription with gqlgen's generated code.
// A shareable selection borrows a renderer of its shape (see renderer);
// otherwise the generated executor runs from a fresh OperationContext with
// the subscription's variables. Either way the generated code resolves
// voucherUpdated again, this time handing it v (renderKey), and marshals
// the selection; errors go to ctx's response context, as for any field.
// Cancellation is left out: rendering does no I/O, and it would give
// every rendered subscription's context a Done channel to keep.
func (run *subRun) produce(ctx context.Context, v *ent.Voucher) *graphql.Response {
	ctx = context.WithoutCancel(ctx)
	if run.shape != (unique.Handle[string]{}) {
		pool := run.e.rendererPool(run.shape)
		var r *renderer
		if pool != nil {
			r, _ = pool.Get().(*renderer)
		}
		if r == nil {
			r = run.newRenderer(ctx)
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
func (run *subRun) operation(vars map[string]any) *graphql.OperationContext {
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

// maxRendererShapes bounds the selections that keep a renderer pool: a
// pool is never removed, and clients choose their selections (aliases
// included), so past the bound a selection's renderings build their
// renderer each time instead (what every rendering cost before pools).
const maxRendererShapes = 1024

// rendererPool is shape's pool of renderers; nil past maxRendererShapes.
func (e *Schema) rendererPool(shape unique.Handle[string]) *sync.Pool {
	if p, ok := e.renderers.Load(shape); ok {
		return p.(*sync.Pool)
	}
	if e.rendererShapes.Load() >= maxRendererShapes {
		return nil
	}
	p, loaded := e.renderers.LoadOrStore(shape, &sync.Pool{})
	if !loaded {
		e.rendererShapes.Add(1)
	}
	return p.(*sync.Pool)
}

// renderer is gqlgen's generated code for one shareable selection, run
// once: Exec resolves voucherUpdated (which, seeing renderKey, returns the
// renderer's feed) and returns the response handler that, per call, takes
// the next voucher from the feed and marshals the selection. Exec's own
// cost (an input-unmarshaler map of every input type, the root field's
// collection and context, the resolver) was about half of a rendering
// when every rendering ran it (profiled); now it is paid once per renderer,
// and the operation's collected-fields cache serves every rendering. A
// renderer serves one rendering at a time (the per-shape sync.Pool hands
// out another to a concurrent one) and holds no subscription's state: the
// selection renders the same bytes for every subscription of its shape,
// which is what sharing rendered events already relies on.
type renderer struct {
	oc   *graphql.OperationContext
	feed chan *ent.Voucher
	next graphql.ResponseHandler
}

func (run *subRun) newRenderer(ctx context.Context) *renderer {
	r := &renderer{oc: run.operation(nil), feed: make(chan *ent.Voucher, 1)}
	ctx = graphql.WithOperationContext(context.WithValue(ctx, renderKey{}, r.feed), r.oc)
	r.next = run.e.ExecutableSchema.Exec(ctx)
	return r
}

// render marshals v; ok says the renderer is fit to serve again (the
// handler took v from the feed and answered).
func (r *renderer) render(ctx context.Context, v *ent.Voucher) (*graphql.Response, bool) {
	r.feed <- v
	resp := r.next(graphql.WithOperationContext(ctx, r.oc))
	if len(r.feed) > 0 || resp == nil {
		return resp, false
	}
	// The generated handler reuses one buffer for every call.
	resp.Data = bytes.Clone(resp.Data)
	return resp, true
}

// monoNow is a monotonic clock reading in nanoseconds: a subscription's
// last check in 8 bytes instead of a time.Time's 24.
func monoNow() int64 { return int64(time.Since(monoOrigin)) }

var monoOrigin = time.Now()

// fail ends the subscription with err, which the transport sends as an
// "error" message (extensions.code as everywhere else). An ended context
// is the client leaving or the connection closing: nothing to say then.
func (run *subRun) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	switch {
	case errors.Is(err, pubsub.ErrSlow):
		err = apperr.New(apperr.LimitExceeded, "the subscription fell behind (too many unread changes); subscribe again")
	case errors.Is(err, pubsub.ErrClosed):
		err = apperr.New(apperr.Unavailable, "the server is shutting down; subscribe again")
	}
	wstransport.AddSubscriptionError(ctx, run.e.present(ctx, err))
}

// noVouchers is the stream the resolver returns to the generated code
// when subscribing: the subscription sends through subRun, and renders
// through a stream of its own (produce), so nothing reads this one.
var noVouchers = make(chan *ent.Voucher)

// Vouchers is what a voucherUpdated subscription asks of the voucher
// domain (voucher.Service): may the caller start following, and the
// current state (Watch); may it still follow (MayFollow).
type Vouchers interface {
	Watch(ctx context.Context, w voucher.Watch) (*ent.Voucher, error)
	MayFollow(ctx context.Context, w voucher.Watch) error
}

// SubscribeVouchers is the voucherUpdated resolver: it starts a
// subscription following what in names (validated by the domain), fed by
// hub, or hands a rendering its voucher (the generated code resolves the
// root field again for every rendering; see Schema.Exec).
func SubscribeVouchers(ctx context.Context, hub *pubsub.Hub, vouchers Vouchers, in voucher.WatchInput) (<-chan *ent.Voucher, error) {
	if feed, ok := ctx.Value(renderKey{}).(chan *ent.Voucher); ok {
		return feed, nil
	}
	if v, ok := ctx.Value(renderKey{}).(*ent.Voucher); ok {
		ch := make(chan *ent.Voucher, 1)
		ch <- v
		return ch, nil
	}
	run, _ := ctx.Value(runKey{}).(*subRun)
	if run == nil || wstransport.ConnFromContext(ctx) == nil {
		return nil, apperr.New(apperr.ValidationFailed, "subscriptions are served over a websocket on /graphql")
	}
	w, err := in.Validate()
	if err != nil {
		return nil, err
	}
	// Follow first, then read the current state: a change committed in
	// between arrives too, and the version check drops what is not newer.
	// The load runs to its end even if the operation ends meanwhile (see
	// subRun.recheck).
	sub := hub.Subscribe(w.Kind, w.Key)
	v, err := vouchers.Watch(context.WithoutCancel(ctx), w)
	if err != nil {
		sub.Close()
		return nil, err
	}
	if v != nil {
		run.initial = &pubsub.Event{Voucher: v}
	}
	// The mailbox closes when the operation ends. The transport's hook,
	// unlike context.AfterFunc, keeps nothing of ctx (the field and
	// operation contexts under it) alive meanwhile.
	if !wstransport.OnEnd(ctx, sub.Close) {
		context.AfterFunc(ctx, sub.Close)
	}
	run.vouchers, run.sub, run.watch, run.checked = vouchers, sub, w, monoNow()
	return noVouchers, nil
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
// object type, as every type under Voucher is).
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
