package graph

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/bounds"
	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/graph/generated"
	"github.com/voucherd/voucherd/graph/graphiql"
	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/metrics"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/ratelimit"
)

// Options configure the GraphQL server.
type Options struct {
	Log *slog.Logger
	// Verifier checks websocket connection_init tokens.
	Verifier auth.Verifier
	// Development turns on introspection and the GraphiQL page.
	Development bool
	// ComplexityLimit and DepthLimit bound a document's cost.
	ComplexityLimit int
	DepthLimit      int
	// Bounds measure a document before it is validated (graph/bounds);
	// DepthLimit, when set, overrides Bounds.Depth.
	Bounds bounds.Limits
	// TimeBudget bounds how long a query or mutation may take
	// (DefaultTimeBudget when zero).
	TimeBudget time.Duration
	// KeepAlive is the websocket ping interval.
	KeepAlive time.Duration
	// InitTimeout bounds the wait for connection_init.
	InitTimeout time.Duration
	// Base closes every websocket (1001, going away) when it is done: the
	// server's shutdown. Connections are detached from their HTTP
	// request, so nothing else ends them. Nil means never.
	Base context.Context
	// MaxSubscriptionsPerConn caps the subscriptions one websocket may
	// hold at once.
	MaxSubscriptionsPerConn int
	// Recheck is how often a subscription checks again, before sending,
	// that its caller may still see what it follows (a membership can be
	// deactivated while it runs).
	Recheck time.Duration
	// fieldHook observes field resolution (tests count renderings with it);
	// with it, gqlgen renders every field (no read plans, readplan.go).
	fieldHook graphql.FieldMiddleware
	// readPlanned is told of each voucher(id:) answer and each
	// voucherUpdated change a read plan rendered (tests).
	readPlanned func()
	// CheckOrigin decides a websocket upgrade's Origin (nil: any origin;
	// the app passes the CORS list's check).
	CheckOrigin func(*http.Request) bool
	// Metrics counts operations by root field and outcome (nil: none).
	Metrics *metrics.GraphQL
	// RateLimit charges root fields to their REST twins' budgets and caps
	// websocket connections and subscriptions per caller (nil: no limits).
	RateLimit *ratelimit.Gate
	// Sockets registers authenticated websockets so that Sockets.End can
	// close them when their grounds end (nil: NewHandler makes one).
	Sockets *Sockets
	// RefusalShare is the share of one core an address's refused
	// documents may take on average, and MaxRefusalWait the longest its
	// next request waits for it (pacing.go; defaults when zero).
	RefusalShare   float64
	MaxRefusalWait time.Duration
}

// Defaults of Options.
const (
	DefaultComplexityLimit         = 5000
	DefaultDepthLimit              = 12
	DefaultKeepAlive               = 15 * time.Second
	DefaultInitTimeout             = 10 * time.Second
	DefaultMaxSubscriptionsPerConn = 32
	DefaultRecheck                 = 30 * time.Second
)

// NewHandler returns the /graphql handler: POST and GET (queries only) over
// HTTP, and websockets speaking graphql-transport-ws or the legacy
// graphql-ws (subscriptions-transport-ws), plus /graphiql in development.
func NewHandler(r *Resolver, opts Options) *Handler {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ComplexityLimit == 0 {
		opts.ComplexityLimit = DefaultComplexityLimit
	}
	if opts.DepthLimit == 0 {
		opts.DepthLimit = DefaultDepthLimit
	}
	if opts.TimeBudget == 0 {
		opts.TimeBudget = DefaultTimeBudget
	}
	if opts.DepthLimit != 0 {
		opts.Bounds.Depth = opts.DepthLimit
	}
	opts.Bounds = opts.Bounds.WithDefaults()
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.InitTimeout == 0 {
		opts.InitTimeout = DefaultInitTimeout
	}
	if opts.MaxSubscriptionsPerConn == 0 {
		opts.MaxSubscriptionsPerConn = DefaultMaxSubscriptionsPerConn
	}
	if opts.Recheck == 0 {
		opts.Recheck = DefaultRecheck
	}
	if opts.Base == nil {
		opts.Base = context.Background()
	}
	if opts.CheckOrigin == nil {
		opts.CheckOrigin = func(*http.Request) bool { return true }
	}
	if opts.Sockets == nil {
		opts.Sockets = NewSockets()
	}
	lim := newLimits(opts.RateLimit)
	present := presentError(opts.Log)
	// voucherUpdated's subscriptions follow the hub (vouchers_stream.go).
	rr := *r
	rr.feeds = &voucherFeeds{hub: r.Hub, vouchers: r.Vouchers, recheck: opts.Recheck, recent: &recentChecks{}}
	// Read plans render voucher(id:) answers and voucherUpdated changes
	// whose selections they know (readplan.go); not with the tests' field
	// hook, which observes every field gqlgen resolves.
	var plans *readPlans
	eopts := engine.Options{Present: present, DefaultPageSize: paging.DefaultPageSize, MaxPageSize: paging.MaxPageSize}
	if opts.fieldHook == nil {
		plans = newReadPlans(opts.readPlanned)
		eopts.Plan = plans.subscription
	}
	// The engine renders each voucherUpdated change once per selection and
	// prices connections by their page size (graph/engine).
	es := engine.NewSchema(
		generated.NewExecutableSchema(generated.Config{Resolvers: &rr, Schema: publicSchema(generated.NewExecutableSchema(generated.Config{}).Schema())}),
		eopts)
	srv := handler.New(es)
	// The websocket transport is graph/wstransport, not gqlgen's: an idle
	// subscriber holds no goroutine and net/http keeps nothing of its
	// connection (docs/graphql-websockets.md).
	ws := wstransport.New(wstransport.Options{
		InitFunc:      lim.wrapInit(initFunc(opts.Verifier, opts.Sockets)),
		InitTimeout:   opts.InitTimeout,
		KeepAlive:     opts.KeepAlive,
		ReadLimit:     httpx.MaxBodyBytes,
		MaxOperations: opts.MaxSubscriptionsPerConn,
		OperationLimitError: func(n int) error {
			return apperr.Newf(apperr.LimitExceeded, "at most %d subscriptions per connection", n)
		},
		// Browsers send Origin; tokens, not cookies, authenticate here,
		// so a cross-site page gains nothing from connecting. With
		// VOUCHER_CORS_ORIGINS set, only those origins may (the app's
		// httpx.CORS.CheckOrigin).
		CheckOrigin:  opts.CheckOrigin,
		Base:         opts.Base,
		Log:          opts.Log,
		CheckMessage: lim.checkMessage,
	})
	// GET and POST are graph/engine's: a lean POST, and request errors
	// answered as the GraphQL-over-HTTP spec says.
	refusals := engine.Refusals{MalformedCode: string(apperr.ValidationFailed), Status: refusalStatus}
	if opts.Metrics != nil {
		refusals.Rejected = opts.Metrics.Rejected
	}
	// POST first: it is the common request, and gqlgen asks the transports
	// in turn. The order decides nothing else: a POST with an Upgrade
	// header is not Post's, and the others take only upgrades, HEAD and
	// OPTIONS, and GET.
	for _, t := range []graphql.Transport{engine.Post{Refusals: refusals}, ws, transport.Options{}, engine.Get{Refusals: refusals}} {
		srv.AddTransport(guardedTransport{Transport: t, lim: lim})
	}
	cache := lru.New[*ast.QueryDocument](1000)
	srv.SetQueryCache(cache)
	// The bounds run before parsing and validation; the parser's own
	// token limit is a second fence.
	srv.Use(documentBounds{limits: opts.Bounds, cache: cache})
	srv.SetParserTokenLimit(opts.Bounds.Tokens)
	// The field middleware is set on each operation, not registered with
	// AroundFields (fields.go, fieldMiddleware).
	srv.Use(newFieldMiddleware(fieldRules{lim: lim, metrics: opts.Metrics}, opts.fieldHook, plans))
	srv.Use(engine.NewComplexityLimit(opts.ComplexityLimit))
	srv.Use(transportRules{})
	if opts.Development {
		srv.Use(extension.Introspection{})
	}
	srv.AroundResponses(timeBudget(opts.TimeBudget))
	srv.SetErrorPresenter(present)
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		opts.Log.ErrorContext(ctx, "graphql panic", "panic", v)
		return apperr.New(apperr.Internal, "internal error")
	})

	mux := http.NewServeMux()
	var clientAddr func(*http.Request) string
	if opts.RateLimit != nil {
		clientAddr = opts.RateLimit.ClientAddr
	}
	pacer := newRefusalPacer(opts.RefusalShare, opts.MaxRefusalWait, clientAddr)
	mux.Handle("/graphql", lim.middleware(limitBody(srv, lim, pacer, opts.TimeBudget)))
	if opts.Development {
		gi := graphiql.Handler()
		mux.Handle("GET /graphiql", gi)
		mux.Handle("GET /graphiql/assets/", gi)
		sdl := PrintSchema()
		mux.HandleFunc("GET /graphql/schema.graphql", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(sdl)
		})
	}
	return &Handler{Handler: mux, ws: ws, sockets: opts.Sockets}
}

// Handler is the GraphQL door (see NewHandler).
type Handler struct {
	http.Handler
	ws      *wstransport.Transport
	sockets *Sockets
}

// Sockets is the registry of the handler's authenticated websockets.
func (h *Handler) Sockets() *Sockets { return h.sockets }

// Websockets is how many websocket connections are open now.
func (h *Handler) Websockets() int64 { return h.ws.Stats().Connections }

// Shutdown closes every websocket with a close frame (1001) and waits
// until they have ended or ctx is done.
func (h *Handler) Shutdown(ctx context.Context) error { return h.ws.Shutdown(ctx) }

// transportRules keeps each operation on its transport: mutations never
// over GET (a link or a prefetch must not change anything), subscriptions
// only over a websocket (a POST would hang waiting for changes).
type transportRules struct{}

func (transportRules) ExtensionName() string                   { return "TransportRules" }
func (transportRules) Validate(graphql.ExecutableSchema) error { return nil }
func (transportRules) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	switch oc.Operation.Operation {
	case ast.Mutation:
		if m, _ := ctx.Value(methodKey{}).(string); m == http.MethodGet {
			return &gqlerror.Error{Message: "mutations need POST", Err: apperr.New(apperr.MethodNotAllowed, "mutations need POST")}
		}
	case ast.Subscription:
		if wstransport.ConnFromContext(ctx) == nil {
			msg := "subscriptions are served over a websocket on /graphql (graphql-transport-ws or graphql-ws)"
			return &gqlerror.Error{Message: msg, Err: apperr.New(apperr.ValidationFailed, msg)}
		}
	}
	return nil
}
