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

// FieldLimit is the budget a root field spends.
type FieldLimit struct {
	// Field is "Query.name" or "Mutation.name".
	Field string
	Group ratelimit.Group
	// Operation is the REST route pattern of the field's twin, whose budget
	// the field shares; for a field without a REST twin it names the
	// field's own budget and Twin is false.
	Operation string
	Twin      bool
	// ByID charges node/nodes per id, each to the read of its type
	// (NodeLimits), instead of to Operation.
	ByID string
}

// Pseudo-operations: budgets of GraphQL fields that have no REST twin.
const (
	opViewer          = "GraphQL viewer"
	opNode            = "GraphQL node"
	opVoucherSessions = "GraphQL voucherSessions"
	// opRefused is the budget a document spends when it is refused
	// before any field runs (it does not parse, validate, fit the
	// bounds or the complexity limit): its caller made the server
	// read, parse and measure it, and a client sending hostile
	// documents back to back must run out of budget as one sending
	// costly fields does.
	opRefused = "GraphQL refused document"
)

// rootLimits maps every Query and Mutation root field to its budget. A test
// walks the executable schema and fails for a field missing here, and
// another checks each twin against the REST routes (same group, route
// exists). Fields of workstreams still being built are listed ahead so
// their budgets are right the day they land.
var rootLimits = map[string]FieldLimit{
	// Identity. viewer has no REST twin; it reads the caller's own identity,
	// the auth area, and is charged like the rest of that group.
	"Mutation.signUp": twin(ratelimit.Auth, "POST /api/v1/auth/sign-up"),
	"Mutation.signIn": twin(ratelimit.Auth, "POST /api/v1/auth/sign-in"),
	"Query.viewer":    {Group: ratelimit.Auth, Operation: opViewer},

	// Voucher sessions (the spec's "sessions" are voucher writes).
	"Mutation.createSession": twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/sessions/create-session"),
	"Mutation.closeSession":  twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/sessions/{sessionId}/close-session"),
	"Query.voucherSession":   twin(ratelimit.VouchersRead, "GET /api/v1/vouchers/sessions/{sessionId}"),
	// The payer's own session list has no REST twin: a voucher read of its own.
	"Query.voucherSessions": {Group: ratelimit.VouchersRead, Operation: opVoucherSessions},

	// Vouchers. interop-init submits a payer's signature: a voucher write,
	// like the spec's "sign".
	"Mutation.reserveVoucher":   twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/reserve-voucher"),
	"Mutation.redeemVoucher":    twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/{voucherId}/redeem-voucher"),
	"Mutation.negotiateVoucher": twin(ratelimit.Negotiate, "POST /api/v1/vouchers/{voucherId}/negotiate-voucher"),
	"Mutation.resolveVoucher":   twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/{voucherId}/resolve-voucher"),
	"Mutation.discardVoucher":   twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/{voucherId}/discard-voucher"),
	"Mutation.interopInit":      twin(ratelimit.VouchersWrite, "POST /api/v1/vouchers/{voucherId}/submit/interop-init"),
	"Query.voucher":             twin(ratelimit.VouchersRead, "GET /api/v1/vouchers/{voucherId}"),
	"Query.vouchers":            twin(ratelimit.VouchersRead, "GET /api/v1/vouchers"),

	// Finance.
	"Query.currencies": twin(ratelimit.Finance, "GET /api/v1/finance/currencies"),
	"Query.rates":      twin(ratelimit.Finance, "GET /api/v1/finance/rates"),

	// Businesses and members.
	"Query.business":                    twin(ratelimit.Businesses, "GET /api/v1/businesses/{businessId}"),
	"Query.businesses":                  twin(ratelimit.Businesses, "GET /api/v1/businesses/{$}"),
	"Mutation.createBusiness":           twin(ratelimit.Businesses, "POST /api/v1/businesses/create-business"),
	"Mutation.updateBusiness":           twin(ratelimit.Businesses, "POST /api/v1/businesses/{businessId}/update-business"),
	"Mutation.updateBusinessStatus":     twin(ratelimit.Businesses, "POST /api/v1/businesses/{businessId}/update-status"),
	"Mutation.addBusinessUser":          twin(ratelimit.Businesses, "POST /api/v1/businesses/{businessId}/users/add-user"),
	"Mutation.updateBusinessUserStatus": twin(ratelimit.Businesses, "POST /api/v1/businesses/{businessId}/users/{businessUserId}/update-status"),

	// Webhook endpoints and deliveries.
	"Mutation.createEndpoint": twin(ratelimit.Webhooks, "POST /api/v1/businesses/{businessId}/webhook-endpoints/create-endpoint"),
	"Mutation.updateEndpoint": twin(ratelimit.Webhooks, "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/update-endpoint"),
	"Mutation.deleteEndpoint": twin(ratelimit.Webhooks, "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/delete-endpoint"),
	"Mutation.rotateSecret":   twin(ratelimit.Webhooks, "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/rotate-secret"),
	"Mutation.retryDelivery":  twin(ratelimit.Webhooks, "POST /api/v1/businesses/{businessId}/webhook-deliveries/{deliveryId}/retry-delivery"),
	"Query.webhookDeliveries": twin(ratelimit.Webhooks, "GET /api/v1/businesses/{businessId}/webhook-deliveries"),

	// node and nodes cost what reading each object over REST costs.
	"Query.node":  {ByID: "id"},
	"Query.nodes": {ByID: "ids"},
}

// nodeLimits maps a global id's prefix to the REST read of that type. An id
// of any other type (malformed, or a type node(id:) does not load) costs a
// unit of opNode in vouchers-read: it loads nothing, but every field
// occurrence is paid for.
var nodeLimits = map[string]FieldLimit{
	ids.Session:         twin(ratelimit.VouchersRead, "GET /api/v1/vouchers/sessions/{sessionId}"),
	ids.Voucher:         twin(ratelimit.VouchersRead, "GET /api/v1/vouchers/{voucherId}"),
	ids.Business:        twin(ratelimit.Businesses, "GET /api/v1/businesses/{businessId}"),
	ids.BusinessUser:    twin(ratelimit.Businesses, "GET /api/v1/businesses/{businessId}/users"),
	ids.WebhookEndpoint: twin(ratelimit.Webhooks, "GET /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}"),
	ids.Delivery:        twin(ratelimit.Webhooks, "GET /api/v1/businesses/{businessId}/webhook-deliveries/{deliveryId}"),
	// Events have no REST read of their own; they reach REST inside
	// deliveries, so they cost a delivery read.
	ids.Event: twin(ratelimit.Webhooks, "GET /api/v1/businesses/{businessId}/webhook-deliveries/{deliveryId}"),
}

var otherNode = FieldLimit{Group: ratelimit.VouchersRead, Operation: opNode}

func twin(g ratelimit.Group, pattern string) FieldLimit {
	return FieldLimit{Group: g, Operation: pattern, Twin: true}
}

// RootFieldLimits lists rootLimits, sorted by field, for checks and docs.
func RootFieldLimits() []FieldLimit {
	out := make([]FieldLimit, 0, len(rootLimits))
	for name, l := range rootLimits {
		l.Field = name
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// NodeLimits lists nodeLimits by id prefix (Field holds the prefix).
func NodeLimits() []FieldLimit {
	out := make([]FieldLimit, 0, len(nodeLimits))
	for prefix, l := range nodeLimits {
		l.Field = prefix
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func nodeLimit(id string) FieldLimit {
	if i := strings.IndexByte(id, '_'); i > 0 {
		if l, ok := nodeLimits[id[:i+1]]; ok {
			return l
		}
	}
	return otherNode
}

// charge is one budget a field spends.
type charge struct {
	group ratelimit.Group
	op    string
	cost  int
}

// chargesOf returns what one root field occurrence spends, in a stable order.
func chargesOf(field string, args map[string]any) ([]charge, error) {
	l, ok := rootLimits[field]
	if !ok {
		// A field nobody mapped must not be free; the schema test keeps
		// this from reaching production.
		return nil, apperr.InternalError(fmt.Errorf("ratelimit: GraphQL root field %s has no rate-limit entry", field))
	}
	if l.ByID == "" {
		return []charge{{l.Group, l.Operation, 1}}, nil
	}
	var list []string
	switch v := args[l.ByID].(type) {
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
		return []charge{{otherNode.Group, otherNode.Operation, 1}}, nil
	}
	byOp := map[string]*charge{}
	var order []string
	for _, id := range list {
		nl := nodeLimit(id)
		c := byOp[nl.Operation]
		if c == nil {
			c = &charge{group: nl.Group, op: nl.Operation}
			byOp[nl.Operation] = c
			order = append(order, nl.Operation)
		}
		c.cost++
	}
	sort.Strings(order)
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

// refused spends one unit of opRefused (a vouchers-read budget, the
// largest burst of the spec's table) for a document refused before any
// field ran. It returns the rate_limit error that replaces the refusal
// once the budget is spent, else nil.
func (l *limits) refused(ctx context.Context) *gqlerror.Error {
	q := requestFrom(ctx)
	if l == nil || q == nil {
		return nil
	}
	d, err := l.gate.Spend(ctx, ratelimit.VouchersRead, opRefused, q.addr, 1)
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
		d, err := l.gate.Spend(ctx, c.group, c.op, q.addr, c.cost)
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
