package graph

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
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
	// fieldHook observes field resolution (tests count renderings with it).
	fieldHook graphql.FieldMiddleware
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
	// The engine renders each voucherUpdated change once per selection and
	// prices connections by their page size (graph/engine).
	es := engine.NewSchema(
		generated.NewExecutableSchema(generated.Config{Resolvers: r, Schema: publicSchema(generated.NewExecutableSchema(generated.Config{}).Schema())}),
		present, opts.Recheck)
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
	for _, t := range []graphql.Transport{ws, transport.Options{}, engine.Get{Metrics: opts.Metrics}, engine.Post{Metrics: opts.Metrics}} {
		srv.AddTransport(guardedTransport{Transport: t, lim: lim})
	}
	cache := lru.New[*ast.QueryDocument](1000)
	srv.SetQueryCache(cache)
	// The bounds run before parsing and validation; the parser's own
	// token limit is a second fence.
	srv.Use(documentBounds{limits: opts.Bounds, cache: cache})
	srv.SetParserTokenLimit(opts.Bounds.Tokens)
	srv.Use(engine.NewComplexityLimit(opts.ComplexityLimit))
	srv.Use(transportRules{})
	if opts.Development {
		srv.Use(extension.Introspection{})
	}
	srv.AroundResponses(timeBudget(opts.TimeBudget))
	srv.AroundFields(internalErrors)
	srv.AroundFields(nullForAbsent)
	srv.AroundFields(keyScopes)
	if opts.Metrics != nil {
		// Outside the rate limits, so a refused field counts too.
		srv.AroundFields(func(ctx context.Context, next graphql.Resolver) (any, error) {
			fc := graphql.GetFieldContext(ctx)
			if !isRootField(fc) || strings.HasPrefix(fc.Field.Name, "__") {
				return next(ctx)
			}
			res, err := next(ctx)
			opts.Metrics.Field(fc.Object+"."+fc.Field.Name, err)
			return res, err
		})
	}
	if lim != nil {
		srv.AroundFields(lim.aroundFields)
	}
	if opts.fieldHook != nil {
		srv.AroundFields(opts.fieldHook)
	}
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

type methodKey struct{}

// limitBody enforces the 1 MiB body limit with the REST door's status
// (413 payload_too_large), also for bodies sent without a length; refuses
// a body or URL breaking the text rules (NUL, invalid UTF-8, a repeated
// JSON key: 400 validation_failed, charged as a refused document); gives
// the request its time budget; and notes the request method for
// transportRules (all but POST: a request without a note is a POST).
func limitBody(next http.Handler, lim *limits, pacer *refusalPacer, budget time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			// Its messages are bounded by the transport's read limit, and
			// the upgrade's GET says nothing about the operations on it;
			// they are paced one by one (guardedExec).
			next.ServeHTTP(w, pacer.socket(r))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), budget)
		defer cancel()
		r = r.WithContext(ctx)
		if r.Method != http.MethodPost {
			r = r.WithContext(context.WithValue(r.Context(), methodKey{}, r.Method))
		}
		// An address whose documents were refused waits its turn before
		// anything of its request is read (pacing.go).
		r, err := pacer.admit(r)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				// The time budget ran out while waiting (a budget shorter
				// than the owed wait): answered as a field out of time is.
				writeRefusal(w, errOutOfTime())
			}
			return // otherwise the client is gone
		}
		if err := checkURL(r); err != nil {
			refuseRequest(w, r, lim, err)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		tooBig := apperr.New(apperr.PayloadTooLarge, "request body exceeds 1 MiB")
		if r.ContentLength > httpx.MaxBodyBytes {
			httpx.WriteError(w, r, nil, tooBig)
			return
		}
		// gqlgen reads the whole body anyway; reading it here lets an
		// oversized chunked body get the same 413.
		body, release, err := readRequestBody(r)
		defer release()
		if err != nil {
			httpx.WriteError(w, r, nil, apperr.New(apperr.ValidationFailed, "could not read the request body"))
			return
		}
		if int64(len(body)) > httpx.MaxBodyBytes {
			httpx.WriteError(w, r, nil, tooBig)
			return
		}
		checked := false
		if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
			if err := httpx.CheckJSON(body); err != nil {
				if ae := apperr.From(err); len(ae.Details) == 0 {
					// Not JSON at all: said as gqlgen's POST says it.
					err = apperr.New(apperr.ValidationFailed, engine.NotGraphQLRequest)
				}
				refuseRequest(w, r, lim, err)
				return
			}
			checked = true
		}
		r.Body = engine.NewReadBody(body, checked)
		next.ServeHTTP(w, r)
	})
}

// bodyBuffers hold request bodies of up to pooledBody bytes while they
// are served: what a GraphQL document is read into is not garbage each
// time (a hostile client's 60 KiB bodies back to back were a steady
// source of collections, each taking a core from everyone else).
// Nothing keeps a body's bytes past its request: the transports decode
// copies (strings, maps) from them.
const pooledBody = 64 << 10

var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, pooledBody); return &b }}

// readRequestBody reads r's body whole, at most httpx.MaxBodyBytes+1
// bytes (one more says it is over). A body whose length is declared is
// read into a buffer of that size, from bodyBuffers when it fits one;
// release gives the buffer back once the request is answered.
func readRequestBody(r *http.Request) (body []byte, release func(), err error) {
	n := r.ContentLength
	if n < 0 || n > httpx.MaxBodyBytes {
		b, err := io.ReadAll(io.LimitReader(r.Body, httpx.MaxBodyBytes+1))
		return b, func() {}, err
	}
	release = func() {}
	var buf []byte
	if n <= pooledBody {
		p := bodyBuffers.Get().(*[]byte)
		buf = (*p)[:n]
		release = func() { bodyBuffers.Put(p) }
	} else {
		buf = make([]byte, n)
	}
	// net/http's body ends at the declared length (a short one is an
	// error), so nothing more can follow.
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		return nil, release, err
	}
	return buf, release, nil
}

// checkURL keeps the text rules for a GET's query, variables and
// extensions parameters (and anything else in the URL).
func checkURL(r *http.Request) error {
	if err := httpx.CheckRequestText(r); err != nil {
		return err
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q := r.URL.Query()
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			if err := httpx.CheckJSON([]byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "application/json" || mt == "application/graphql+json" || strings.HasSuffix(mt, "+json")
}

// refuseRequest answers a request refused before GraphQL read it, as a
// GraphQL request error (400, no data), after charging it as a refused
// document.
func refuseRequest(w http.ResponseWriter, r *http.Request, lim *limits, err error) {
	refusedPaced(r.Context())
	if rl := lim.refused(r.Context()); rl != nil {
		err = rl.Err
	}
	writeRefusal(w, err)
}

// writeRefusal answers err as a GraphQL request error (no data), with
// its code's HTTP status.
func writeRefusal(w http.ResponseWriter, err error) {
	ae := apperr.From(err)
	ext := map[string]any{"code": string(ae.Code)}
	if len(ae.Details) > 0 {
		ext["details"] = ae.Details
	}
	if ae.RetryAfterSeconds > 0 {
		ext["retryAfter"] = ae.RetryAfterSeconds
		w.Header().Set("Retry-After", strconv.Itoa(ae.RetryAfterSeconds))
	}
	msg := ae.Message
	if msg == "" {
		msg = string(ae.Code)
	}
	b, _ := json.Marshal(graphql.Response{Errors: gqlerror.List{{Message: msg, Extensions: ext}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Code.HTTPStatus())
	_, _ = w.Write(b)
}

// internalErrors turns a plain error from a resolver into internal (the
// services return *apperr.Error for everything a caller should see), so
// the presenter can tell a bug, whose text must not leak, from gqlgen's
// own argument errors, which are the caller's.
func internalErrors(ctx context.Context, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err == nil {
		return res, nil
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil && strings.HasPrefix(fc.Field.Name, "__") {
		return res, err // introspection, refused outside development: the caller's
	}
	if outOfTime(ctx, err) {
		return res, errOutOfTime()
	}
	var ae *apperr.Error
	var ge *gqlerror.Error
	if !errors.As(err, &ae) && !errors.As(err, &ge) {
		err = apperr.InternalError(err)
	}
	return res, err
}

// presentError puts the service's error code in extensions.code; internal
// causes are logged, never shown.
func presentError(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gerr := graphql.DefaultErrorPresenter(ctx, err)
		var ae *apperr.Error
		if errors.As(err, &ae) {
			if ae.Code == apperr.Internal {
				log.ErrorContext(ctx, "graphql request failed", "err", ae.Error(), "path", gerr.Path.String())
			}
			gerr.Message = ae.Message
			if gerr.Message == "" {
				gerr.Message = string(ae.Code)
			}
			ext := map[string]any{"code": string(ae.Code)}
			if len(ae.Details) > 0 {
				ext["details"] = ae.Details
			}
			if ae.RetryAfterSeconds > 0 {
				ext["retryAfter"] = ae.RetryAfterSeconds
			}
			gerr.Extensions = ext
			return gerr
		}
		// gqlgen's own errors: parse, validation, complexity, argument
		// coercion. All are the caller's, except a non-null field left
		// null, which is ours.
		code := apperr.ValidationFailed
		if gerr.Path != nil && gerr.Message == "must not be null" {
			code = apperr.Internal
			log.ErrorContext(ctx, "graphql request failed", "err", gerr.Message, "path", gerr.Path.String())
		}
		if strings.HasPrefix(gerr.Message, "json request body could not be decoded") {
			// gqlgen echoes the whole body, which may hold a password.
			gerr.Message = engine.NotGraphQLRequest
		}
		gerr.Extensions = map[string]any{"code": string(code)}
		return gerr
	}
}

// initFunc authenticates connection_init. The payload's credentials may
// take the shapes clients commonly send (initCredentials). A bad token
// closes the socket with 4403 (after a connection_error message on the
// legacy protocol, which expects one); credentials in a shape it does not
// know close it with 4400, never leaving the connection silently
// anonymous. A good token ends the connection with 4403 when it expires,
// or when its grounds end first (Sockets): every subscription on it ends,
// and the client reconnects with a fresh token.
func initFunc(v auth.Verifier, sockets *Sockets) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		raw, err := initCredentials(payload)
		if err != nil {
			return ctx, nil, &wstransport.CloseError{Code: CloseBadRequest, Reason: err.Error(), Err: apperr.New(apperr.ValidationFailed, err.Error())}
		}
		if raw == "" {
			// The upgrade request's Authorization header may have proven
			// the caller (auth.Middleware): that principal ends at its
			// token's expiry like one from connection_init. A connection
			// without a token may still use open operations.
			if p := auth.FromContext(ctx); p != nil {
				return expireAt(ctx, p, v, sockets)
			}
			return ctx, nil, nil
		}
		tok, ok := auth.BearerToken(raw)
		var p *auth.Principal
		if ok && v != nil {
			p, err = v.Verify(ctx, tok)
		}
		if !ok || v == nil || err != nil {
			return ctx, nil, forbidden()
		}
		return expireAt(auth.WithPrincipal(ctx, p), p, v, sockets)
	}
}

// errInitShape is the 4400 reason for credentials initCredentials cannot read.
var errInitShape = errors.New(`connection_init: unrecognised credentials; send {"Authorization": "Bearer <token>"}`)

// initCredentials finds the Authorization value in a connection_init
// payload, in the shapes clients send:
//
//	{"Authorization": "Bearer <token>"}            (also "authorization")
//	{"headers": {"Authorization": "Bearer <token>"}} (Apollo-style links)
//	{"authToken": "<token>"}                         (also "token", "accessToken"; "Bearer " optional)
//
// "" means no credentials at all. Anything else that looks like
// credentials (a key naming auth or a token, a value of the wrong type,
// two different tokens) is an error: the caller meant to authenticate, and
// the connection must not go on anonymous.
func initCredentials(p transport.InitPayload) (string, error) {
	var found []string
	add := func(v any, bare bool) error {
		s, ok := v.(string)
		if !ok {
			return errInitShape
		}
		if bare && !strings.HasPrefix(strings.ToLower(s), "bearer ") {
			s = "Bearer " + s
		}
		found = append(found, s)
		return nil
	}
	for k, v := range p {
		switch k {
		case "Authorization", "authorization":
			if err := add(v, false); err != nil {
				return "", err
			}
		case "authToken", "token", "accessToken":
			if err := add(v, true); err != nil {
				return "", err
			}
		case "headers":
			h, ok := v.(map[string]any)
			if !ok {
				return "", errInitShape
			}
			for hk, hv := range h {
				if strings.EqualFold(hk, "Authorization") {
					if err := add(hv, false); err != nil {
						return "", err
					}
				} else if credentialKey(hk) {
					return "", errInitShape
				}
			}
		default:
			if credentialKey(k) {
				return "", errInitShape
			}
		}
	}
	for _, s := range found[min(1, len(found)):] {
		if s != found[0] {
			return "", errors.New("connection_init: two different credentials")
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

// credentialKey reports whether a payload key looks like it carries
// credentials.
func credentialKey(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "auth") || strings.Contains(k, "token") || strings.Contains(k, "bearer") ||
		strings.Contains(k, "jwt") || strings.Contains(k, "secret") || strings.Contains(k, "password")
}

func forbidden() error {
	return &wstransport.CloseError{Code: CloseForbidden, Reason: "Forbidden", Err: apperr.New(apperr.Unauthorized, "Forbidden")}
}

// expireAt refuses a principal whose token has expired, and schedules the
// connection's close (4403) at its token's expiry: every query, mutation
// and subscription on it ends then, and the client reconnects with a
// fresh token. It registers the connection in sockets, so that it also
// closes when the token's grounds end first (a session closed, a
// membership ended), and then checks once more that they have not ended
// meanwhile (v's Recheck, when it has one: the check that proved p may
// have run before an end whose Sockets.End found nothing to close).
func expireAt(ctx context.Context, p *auth.Principal, v auth.Verifier, sockets *Sockets) (context.Context, *transport.InitPayload, error) {
	if !p.ExpiresAt.IsZero() && !time.Now().Before(p.ExpiresAt) {
		return ctx, nil, forbidden()
	}
	c := wstransport.ConnFromContext(ctx)
	if c == nil {
		return ctx, nil, nil
	}
	if !p.ExpiresAt.IsZero() {
		c.CloseAt(p.ExpiresAt, CloseForbidden, "Forbidden: token expired")
	}
	sockets.add(c, p)
	if rc, ok := v.(Rechecker); ok {
		if err := rc.Recheck(ctx, p); err != nil {
			if apperr.From(err).Code == apperr.Internal {
				return ctx, nil, &wstransport.CloseError{Code: wstransport.CloseInternalError, Reason: "internal error", Err: err}
			}
			return ctx, nil, forbidden()
		}
	}
	return ctx, nil, nil
}

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
