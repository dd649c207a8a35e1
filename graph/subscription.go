package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// execSchema wraps the generated schema for two things gqlgen does not do:
//
//   - Rendering a change once. gqlgen resolves and serializes every
//     subscription event per subscriber. For voucherUpdated the wrapper
//     takes the per-event response loop over: each subscriber computes a
//     fingerprint of its selection set once, and for each event asks the
//     shared pubsub.Event for the bytes rendered under that fingerprint.
//     The first subscriber to get there runs gqlgen's generated code (by
//     feeding the voucher into the channel its resolver returned); every
//     other subscriber with the same selection reuses those bytes. Voucher
//     fields do not depend on who is asking (visibility is decided per
//     subscription, not per field), which is what makes sharing safe.
//   - Connection-aware complexity: a connection field costs its children
//     times the page size it asks for, and nodes(ids:) the number of ids.
type execSchema struct {
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
}

type runKey struct{}

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
func (e *execSchema) Exec(ctx context.Context) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Subscription {
		return e.ExecutableSchema.Exec(ctx)
	}
	run := &subRun{present: e.present, recheck: e.recheck, recent: e.recent}
	inner := e.ExecutableSchema.Exec(context.WithValue(ctx, runKey{}, run))
	if run.sub == nil {
		// The resolver failed (its error is already recorded) or this is
		// not voucherUpdated.
		return inner
	}
	run.inner = inner
	run.key = fingerprint(oc, e.Schema())
	// On the websocket transport the subscription holds no goroutine while
	// it waits: the hub says when an event is queued, and the transport
	// then calls next, which takes it without waiting.
	if ready := wstransport.ReadyFromContext(ctx); ready != nil {
		run.idle = wstransport.IdleResponse(ctx)
		run.sub.Notify(ready)
	}
	return run.next
}

// Complexity implements graphql.ExecutableSchema.
func (e *execSchema) Complexity(ctx context.Context, typeName, field string, child int, args map[string]any) (int, bool) {
	if def := e.Schema().Types[typeName]; def != nil {
		if fd := def.Fields.ForName(field); fd != nil && strings.HasSuffix(fd.Type.Name(), "Connection") {
			n := paging.DefaultPageSize
			for _, k := range []string{"first", "last"} {
				if v, ok := asInt(args[k]); ok && v > 0 {
					n = min(v, paging.MaxPageSize)
				}
			}
			return 1 + child*n, true
		}
	}
	if ids, ok := args["ids"].([]any); ok {
		return 1 + child*max(1, len(ids)), true
	}
	return e.ExecutableSchema.Complexity(ctx, typeName, field, child, args)
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

// subRun is one voucherUpdated subscription: its hub mailbox and what it
// has sent. After Exec only the caller of next touches it, one call at a
// time (a goroutine waiting in next, or the websocket transport's worker).
type subRun struct {
	present graphql.ErrorPresenterFunc
	recheck time.Duration
	inner   graphql.ResponseHandler
	out     chan *ent.Voucher
	key     string

	sub       *pubsub.Subscription
	kind      pubsub.Kind
	initial   *pubsub.Event
	last      int
	authorize func(context.Context) error
	checked   time.Time
	// checkKey names (kind, key, caller) in recent.
	checkKey string
	recent   *recentChecks

	// idle is what next returns when the transport woke it but nothing is
	// worth sending; nil when next may wait instead.
	idle *graphql.Response
}

// next is the subscription's response handler: it waits for the next
// event worth sending and returns it rendered. Driven by the websocket
// transport (idle set) it never waits: it is called when the hub has
// queued something, and returns idle when that was not worth sending.
func (run *subRun) next(ctx context.Context) *graphql.Response {
	for {
		ev := run.initial
		if ev != nil {
			run.initial = nil
		} else {
			var err error
			if run.idle != nil {
				ev, err = run.sub.TryNext()
			} else {
				ev, err = run.sub.Next(ctx)
			}
			if err != nil {
				run.fail(ctx, err)
				return nil
			}
			if ev == nil {
				return run.idle // nothing now; the hub calls back
			}
		}
		v := ev.Voucher
		if run.kind == pubsub.ByVoucher {
			// Never an older version after a newer one; the same one only
			// when re-sent after a possible loss.
			if v.Version < run.last || (v.Version == run.last && !ev.Resync) {
				continue
			}
			run.last = v.Version
		}
		if time.Since(run.checked) > run.recheck {
			if run.recent == nil || !run.recent.fresh(run.checkKey, run.recheck/2) {
				if err := run.authorize(ctx); err != nil {
					run.fail(ctx, err)
					return nil
				}
				if run.recent != nil {
					run.recent.mark(run.checkKey, run.recheck/2)
				}
			}
			run.checked = time.Now()
		}
		return run.render(ctx, ev)
	}
}

func (run *subRun) render(ctx context.Context, ev *pubsub.Event) *graphql.Response {
	var own *graphql.Response
	produce := func() *graphql.Response {
		select { // the generated reader took the last one, unless ctx ended
		case <-run.out:
		default:
		}
		run.out <- ev.Voucher
		return run.inner(ctx)
	}
	if run.key == "" {
		return produce()
	}
	data, ok := ev.Render(run.key, func() ([]byte, bool) {
		own = produce()
		if own == nil || len(own.Errors) > 0 || len(graphql.GetErrors(ctx)) > 0 {
			return nil, false
		}
		// gqlgen reuses its buffer for the next event: keep a copy.
		return bytes.Clone(own.Data), true
	})
	switch {
	case own != nil:
		return own
	case ok:
		return &graphql.Response{Data: data}
	default:
		return produce()
	}
}

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
	wstransport.AddSubscriptionError(ctx, run.present(ctx, err))
}

// subscribeVouchers starts a voucherUpdated subscription for the resolver.
func (r *Resolver) subscribeVouchers(ctx context.Context, id, sessionID, businessID *string) (<-chan *ent.Voucher, error) {
	run, _ := ctx.Value(runKey{}).(*subRun)
	if run == nil || wstransport.ConnFromContext(ctx) == nil {
		return nil, apperr.New(apperr.ValidationFailed, "subscriptions are served over a websocket on /graphql")
	}
	p, err := auth.RequireAny(ctx)
	if err != nil {
		return nil, err
	}
	if !p.ExpiresAt.IsZero() && !time.Now().Before(p.ExpiresAt) {
		return nil, apperr.New(apperr.Unauthorized, "the token has expired")
	}
	given := 0
	for _, a := range []*string{id, sessionID, businessID} {
		if a != nil {
			given++
		}
	}
	if given != 1 {
		return nil, apperr.Invalid("id", "give exactly one of id, sessionId and businessId")
	}
	var (
		kind      pubsub.Kind
		key       string
		authorize func(context.Context) error
	)
	switch {
	case id != nil:
		kind, key = pubsub.ByVoucher, *id
		authorize = func(ctx context.Context) error { _, err := r.Vouchers.Get(ctx, key); return err }
	case sessionID != nil:
		// Only the session's payer: Get admits its owner alone.
		kind, key = pubsub.BySession, *sessionID
		authorize = func(ctx context.Context) error { _, err := r.Sessions.Get(ctx, key); return err }
	default:
		kind, key = pubsub.ByBusiness, *businessID
		authorize = func(ctx context.Context) error {
			p, err := auth.RequireUser(ctx)
			if err != nil {
				return err
			}
			_, _, err = business.Membership(ctx, r.Client, key, p.ID)
			return err
		}
	}
	// Follow first, then read the current state: a change committed in
	// between arrives too, and the version check drops what is not newer.
	sub := r.Hub.Subscribe(kind, key)
	var once sync.Once
	cleanup := func() { once.Do(sub.Close) }
	stop := context.AfterFunc(ctx, cleanup)
	fail := func(err error) (<-chan *ent.Voucher, error) {
		stop()
		cleanup()
		return nil, err
	}
	if kind == pubsub.ByVoucher {
		v, err := r.Vouchers.Get(ctx, key)
		if err != nil {
			return fail(err)
		}
		run.initial = &pubsub.Event{Voucher: v}
	} else if err := authorize(ctx); err != nil {
		return fail(err)
	}
	run.sub, run.kind, run.authorize, run.checked = sub, kind, authorize, time.Now()
	run.checkKey = strconv.Itoa(int(kind)) + "|" + key + "|" + p.ID
	run.out = make(chan *ent.Voucher, 1)
	return run.out, nil
}

// fingerprint names what a subscription's selection renders to: the
// operation's fields, aliases and nested selections in document order,
// fragments inlined. Equal fingerprints render an event to equal bytes
// (different spellings of one selection may miss sharing; that only costs
// a rendering). "" means not shareable: a directive (whose effect can
// depend on variables) or a nested field taking arguments. It walks the
// AST itself rather than gqlgen's CollectFields, whose per-operation cache
// an idle subscription would carry around.
func fingerprint(oc *graphql.OperationContext, schema *ast.Schema) string {
	var b strings.Builder
	if schema.Subscription == nil || !writeSelection(&b, oc.Doc, oc.Operation.SelectionSet, schema.Subscription, schema, true) {
		return ""
	}
	return b.String()
}

func writeSelection(b *strings.Builder, doc *ast.QueryDocument, set ast.SelectionSet, def *ast.Definition, schema *ast.Schema, root bool) bool {
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
				if !writeSelection(b, doc, s.SelectionSet, child, schema, false) {
					return false
				}
				b.WriteByte('}')
			}
			b.WriteByte(',')
		case *ast.InlineFragment:
			if len(s.Directives) > 0 {
				return false
			}
			if applies(def, s.TypeCondition) && !writeSelection(b, doc, s.SelectionSet, def, schema, root) {
				return false
			}
		case *ast.FragmentSpread:
			f := doc.Fragments.ForName(s.Name)
			if len(s.Directives) > 0 || f == nil {
				return false
			}
			if applies(def, f.TypeCondition) && !writeSelection(b, doc, f.SelectionSet, def, schema, root) {
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
