package graph

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/ratelimit"
)

// Rate limits on the GraphQL door. Every root field of a query or mutation,
// each alias counted on its own, spends one unit of the budget of the REST
// route it mirrors, so a document cannot do more than the same calls over
// REST would: twenty aliased signIn fields cost twenty sign-ins. Nested
// fields ride on their root field's charge (the complexity and depth limits
// bound them). Subscriptions spend no budget; instead the websocket
// connections and subscriptions one caller holds are capped.

// Concurrency caps before VOUCHER_RATE_LIMITS scales them. A payer watches
// its session, a payee its voucher, a dashboard a few businesses: a handful
// of each is plenty, and an address gets more than a subject because
// several people can sit behind one NAT.
const (
	wsConnsPerAddress      = 32
	wsConnsPerCaller       = 8
	subscriptionsPerCaller = 32
)

// CloseTooManyRequests is the websocket close code for a connection refused
// by the per-caller cap (4429, as graphql-transport-ws uses for "too many").
const CloseTooManyRequests = 4429

// FieldLimit is the budget a root field spends, as internal/operation
// declares it (for checks and docs).
type FieldLimit struct {
	// Field is "Query.name" or "Mutation.name" (for NodeLimits, the id prefix).
	Field string
	Group ratelimit.Group
	// Operation is the budget: the REST route pattern of the field's twin,
	// whose budget the field shares; for a field without a REST twin its
	// own budget's name, and Twin is false.
	Operation string
	Twin      bool
	// ByID charges node/nodes per id, each to the read of its type
	// (NodeLimits), instead of to Operation.
	ByID string
}

func fieldLimit(field string, op *operation.Op) FieldLimit {
	l := FieldLimit{Field: field, Group: op.Group, Operation: op.Budget(), Twin: op.REST != "", ByID: byID[op]}
	if l.Twin {
		l.Operation = op.REST
	}
	return l
}

// byID names the argument whose ids node and nodes are charged per.
var byID = map[*operation.Op]string{operation.Node: "id", operation.Nodes: "ids"}

// nodeReads maps a global id's prefix to the read of that type: node(id:)
// costs what reading the object over REST costs. An id of any other type
// (malformed, or a type node(id:) does not load) costs a unit of node's own
// budget: it loads nothing, but every field occurrence is paid for.
var nodeReads = map[string]*operation.Op{
	ids.Session:         operation.GetSession,
	ids.Voucher:         operation.GetVoucher,
	ids.Business:        operation.GetBusiness,
	ids.BusinessUser:    operation.ListBusinessUsers,
	ids.WebhookEndpoint: operation.GetEndpoint,
	ids.Delivery:        operation.GetDelivery,
	ids.Widget:          operation.GetWidget,
	// Events have no REST read of their own; they reach REST inside
	// deliveries, so they cost a delivery read.
	ids.Event: operation.GetDelivery,
}

// RootFieldLimits lists the budget of every Query and Mutation root field
// in the operations table, sorted by field, for checks and docs.
func RootFieldLimits() []FieldLimit {
	var out []FieldLimit
	for _, op := range operation.All() {
		if strings.HasPrefix(op.GraphQL, "Query.") || strings.HasPrefix(op.GraphQL, "Mutation.") {
			out = append(out, fieldLimit(op.GraphQL, op))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// NodeLimits lists nodeReads by id prefix (Field holds the prefix).
func NodeLimits() []FieldLimit {
	out := make([]FieldLimit, 0, len(nodeReads))
	for prefix, op := range nodeReads {
		out = append(out, fieldLimit(prefix, op))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func nodeRead(id string) *operation.Op {
	if i := strings.IndexByte(id, '_'); i > 0 {
		if op, ok := nodeReads[id[:i+1]]; ok {
			return op
		}
	}
	return operation.Node
}

// charge is one budget a field spends.
type charge struct {
	op   *operation.Op
	cost int
}

// chargesOf returns what one root field occurrence spends, in a stable order.
func chargesOf(field string, args map[string]any) ([]charge, error) {
	op, ok := operation.ByField(field)
	if !ok || op.Group == "" {
		// A field nobody declared must not be free; the schema test keeps
		// this from reaching production.
		return nil, apperr.InternalError(fmt.Errorf("ratelimit: GraphQL root field %s has no rate-limit group in internal/operation", field))
	}
	arg := byID[op]
	if arg == "" {
		return []charge{{op, 1}}, nil
	}
	var list []string
	switch v := args[arg].(type) {
	case string:
		list = []string{v}
	case []string:
		list = v
	case []any:
		for _, x := range v {
			s, _ := x.(string)
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		// nodes(ids: []) still is a field occurrence.
		return []charge{{operation.Node, 1}}, nil
	}
	byOp := map[*operation.Op]*charge{}
	var order []*operation.Op
	for _, id := range list {
		read := nodeRead(id)
		c := byOp[read]
		if c == nil {
			c = &charge{op: read}
			byOp[read] = c
			order = append(order, read)
		}
		c.cost++
	}
	sort.Slice(order, func(i, j int) bool { return order[i].Budget() < order[j].Budget() })
	out := make([]charge, 0, len(order))
	for _, op := range order {
		out = append(out, *byOp[op])
	}
	return out, nil
}

// limits is the GraphQL door's rate limiting; nil when limits are off.
type limits struct {
	gate          *ratelimit.Gate
	connsByAddr   *ratelimit.Slots
	connsByCaller *ratelimit.Slots
	subsByCaller  *ratelimit.Slots
}

func newLimits(gate *ratelimit.Gate) *limits {
	if !gate.Enabled() {
		return nil
	}
	return &limits{
		gate:          gate,
		connsByAddr:   ratelimit.NewSlots(gate.Cap(wsConnsPerAddress)),
		connsByCaller: ratelimit.NewSlots(gate.Cap(wsConnsPerCaller)),
		subsByCaller:  ratelimit.NewSlots(gate.Cap(subscriptionsPerCaller)),
	}
}

type requestKey struct{}

// request is one HTTP request's (or one websocket connection's) limiter
// state: the client address, the decisions for the response headers, and
// the slots a connection holds until it ends.
type request struct {
	addr string
	ws   bool

	mu        sync.Mutex
	decisions []ratelimit.Decision
	held      []func()
}

func requestFrom(ctx context.Context) *request {
	r, _ := ctx.Value(requestKey{}).(*request)
	return r
}

func (q *request) record(ds ...ratelimit.Decision) {
	if q.ws {
		// A connection lives for hours and has no headers to write.
		return
	}
	q.mu.Lock()
	q.decisions = append(q.decisions, ds...)
	q.mu.Unlock()
}

func (q *request) hold(release func()) {
	q.mu.Lock()
	q.held = append(q.held, release)
	q.mu.Unlock()
}

func (q *request) releaseAll() {
	q.mu.Lock()
	held := q.held
	q.held = nil
	q.mu.Unlock()
	for _, release := range held {
		release()
	}
}

// middleware wraps the /graphql handler: it notes the client address,
// refuses a websocket upgrade beyond the per-address cap with a 429 before
// upgrading, and writes the RateLimit fields of every field charged on a
// POST or GET before the response goes out.
func (l *limits) middleware(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := &request{addr: l.gate.ClientAddr(r)}
		r = r.WithContext(context.WithValue(r.Context(), requestKey{}, q))
		if !websocket.IsWebSocketUpgrade(r) {
			next.ServeHTTP(&headerWriter{ResponseWriter: w, q: q}, r)
			return
		}
		q.ws = true
		release, ok := l.connsByAddr.Acquire(ratelimit.AddressKey(q.addr))
		if !ok {
			ratelimit.SetConcurrencyHeaders(w.Header(), "websocket-connections", l.connsByAddr.Limit())
			httpx.WriteError(w, r, nil, ratelimit.ConcurrencyErr("websocket connections from this address", l.connsByAddr.Limit()))
			return
		}
		q.hold(release)
		// The transport returns as soon as it has upgraded: the slots
		// come back when the connection closes (at once if it never
		// opened).
		ctx, done := wstransport.ReleaseOnClose(r.Context(), q.releaseAll)
		defer done()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// headerWriter adds the RateLimit fields just before the response starts,
// when every root field (queries resolve them concurrently) has been charged.
type headerWriter struct {
	http.ResponseWriter
	q    *request
	done bool
}

func (w *headerWriter) flush() {
	if w.done {
		return
	}
	w.done = true
	w.q.mu.Lock()
	ds := w.q.decisions
	w.q.mu.Unlock()
	ratelimit.SetHeaders(w.Header(), ds...)
}

func (w *headerWriter) WriteHeader(code int) {
	w.flush()
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	w.flush()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrapInit caps authenticated websocket connections per token subject,
// once connection_init has said who the caller is. Anonymous connections
// are already counted by address.
func (l *limits) wrapInit(next transport.WebsocketInitFunc) transport.WebsocketInitFunc {
	if l == nil {
		return next
	}
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		ctx, ack, err := next(ctx, payload)
		if err != nil {
			return ctx, ack, err
		}
		p, q := auth.FromContext(ctx), requestFrom(ctx)
		if p == nil || q == nil {
			return ctx, ack, nil
		}
		release, ok := l.connsByCaller.Acquire(p.ID)
		if !ok {
			return ctx, nil, &wstransport.CloseError{
				Code: CloseTooManyRequests, Reason: "Too many connections",
				Err: ratelimit.ConcurrencyErr("websocket connections for this token", l.connsByCaller.Limit()),
			}
		}
		q.hold(release)
		return ctx, ack, nil
	}
}

// aroundFields charges root fields and caps subscriptions.
func (l *limits) aroundFields(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	if !isRootField(fc) || strings.HasPrefix(fc.Field.Name, "__") {
		return next(ctx)
	}
	q := requestFrom(ctx)
	if q == nil {
		return nil, apperr.InternalError(errNoRequest)
	}
	switch fc.Object {
	case "Query", "Mutation":
		if err := l.charge(ctx, q, fc.Object+"."+fc.Field.Name, fc.Args); err != nil {
			return nil, err
		}
	case "Subscription":
		release, ok := l.subsByCaller.Acquire(ratelimit.Caller(ctx, q.addr))
		if !ok {
			return nil, ratelimit.ConcurrencyErr("subscriptions", l.subsByCaller.Limit())
		}
		// Released when the subscription ends, whether the client stops
		// it, the stream completes or the socket closes: by the websocket
		// transport's end hook (which keeps no context chain alive for an
		// idle subscription), else when the operation's context ends.
		if !wstransport.OnEnd(ctx, release) {
			context.AfterFunc(ctx, release)
		}
	}
	return next(ctx)
}

// refused spends one unit of operation.RefusedDocument's budget for a
// document refused before any field ran. It returns the rate_limit error that replaces the refusal
// once the budget is spent, else nil.
func (l *limits) refused(ctx context.Context) *gqlerror.Error {
	q := requestFrom(ctx)
	if l == nil || q == nil {
		return nil
	}
	d, err := l.gate.Spend(ctx, operation.RefusedDocument.Group, operation.RefusedDocument.Budget(), q.addr, 1)
	if err != nil {
		ie := apperr.InternalError(err)
		return &gqlerror.Error{Message: ie.Message, Err: ie}
	}
	q.record(d)
	if err := ratelimit.Err(d); err != nil {
		return &gqlerror.Error{Message: err.Error(), Err: err}
	}
	return nil
}

// checkMessage applies the JSON text rules (httpx.CheckJSON) to a
// websocket message, whole; a refused one is charged like a refused
// document, and once the budget is spent the rate_limit error replaces
// the refusal. l may be nil (no limits): the rules still apply.
func (l *limits) checkMessage(ctx context.Context, msg []byte) error {
	err := httpx.CheckJSON(msg)
	if err == nil {
		return nil
	}
	if l != nil {
		if rl := l.refused(ctx); rl != nil {
			return rl
		}
	}
	return err
}

var errNoRequest = errors.New("ratelimit: GraphQL request without limiter state")

// isRootField reports whether fc is a field of the operation's root type.
// The generated executor puts a field-less context for the root object
// ({Object: "Query"}) above the root fields; a nested field always has a
// parent with a field.
func isRootField(fc *graphql.FieldContext) bool {
	if fc == nil || fc.Field.Field == nil {
		return false
	}
	p := fc.Parent
	return p == nil || (p.Field.Field == nil && p.Parent == nil)
}

// charge spends every budget of one root field occurrence.
func (l *limits) charge(ctx context.Context, q *request, field string, args map[string]any) error {
	cs, err := chargesOf(field, args)
	if err != nil {
		return err
	}
	for _, c := range cs {
		d, err := l.gate.Spend(ctx, c.op.Group, c.op.Budget(), q.addr, c.cost)
		if err != nil {
			return apperr.InternalError(err)
		}
		q.record(d)
		if err := ratelimit.Err(d); err != nil {
			return err
		}
	}
	return nil
}
