package graph

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/99designs/gqlgen/graphql/playground"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/generated"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
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
	// KeepAlive is the websocket ping interval.
	KeepAlive time.Duration
	// InitTimeout bounds the wait for connection_init.
	InitTimeout time.Duration
}

// CloseForbidden is the websocket close code for a refused connection_init
// (graphql-transport-ws uses 4403 Forbidden).
const CloseForbidden = 4403

// NewHandler returns the /graphql handler: POST and GET (queries only) over
// HTTP, and websockets speaking graphql-transport-ws or the legacy graphql-ws.
func NewHandler(r *Resolver, opts Options) http.Handler {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ComplexityLimit == 0 {
		opts.ComplexityLimit = 1000
	}
	if opts.DepthLimit == 0 {
		opts.DepthLimit = 12
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.InitTimeout == 0 {
		opts.InitTimeout = 10 * time.Second
	}
	srv := handler.New(generated.NewExecutableSchema(generated.Config{Resolvers: r}))
	ws := &transport.Websocket{
		Upgrader: websocket.Upgrader{
			// Small buffers and a shared write pool keep idle connections cheap.
			ReadBufferSize:  1024,
			WriteBufferSize: 1024,
			WriteBufferPool: &sync.Pool{},
			// Browsers send Origin; tokens, not cookies, authenticate here,
			// so a cross-site page gains nothing from connecting.
			CheckOrigin: func(*http.Request) bool { return true },
		},
		InitFunc:              initFunc(opts.Verifier),
		InitTimeout:           opts.InitTimeout,
		KeepAlivePingInterval: opts.KeepAlive,
		PingPongInterval:      opts.KeepAlive,
	}
	srv.AddTransport(ws)
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.Use(extension.FixedComplexityLimit(opts.ComplexityLimit))
	srv.Use(depthLimit{max: opts.DepthLimit})
	if opts.Development {
		srv.Use(extension.Introspection{})
	}
	srv.SetErrorPresenter(presentError(opts.Log))
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		opts.Log.ErrorContext(ctx, "graphql panic", "panic", v)
		return apperr.New(apperr.Internal, "internal error")
	})

	mux := http.NewServeMux()
	mux.Handle("/graphql", captureConn(limitBody(srv)))
	if opts.Development {
		mux.Handle("GET /graphiql", playground.Handler("voucherd GraphiQL", "/graphql"))
	}
	return mux
}

// limitBody enforces the 1 MiB body limit with the REST door's status.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > httpx.MaxBodyBytes {
			httpx.WriteError(w, r, nil, apperr.New(apperr.PayloadTooLarge, "request body exceeds 1 MiB"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, httpx.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
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
		// Parse, validation and argument-coercion errors from gqlgen.
		if gerr.Extensions == nil {
			gerr.Extensions = map[string]any{}
		}
		if _, ok := gerr.Extensions["code"]; ok || gerr.Path == nil {
			gerr.Extensions["code"] = string(apperr.ValidationFailed)
		} else {
			gerr.Extensions["code"] = string(apperr.Internal)
		}
		return gerr
	}
}

type connKey struct{}

// connHolder lets initFunc reach the hijacked connection so it can close it
// with 4403, which gqlgen's transport cannot do itself.
type connHolder struct {
	mu   sync.Mutex
	conn net.Conn
}

type hijackWriter struct {
	http.ResponseWriter
	h *connHolder
}

func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.h.mu.Lock()
		w.h.conn = c
		w.h.mu.Unlock()
	}
	return c, rw, err
}

func captureConn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		h := &connHolder{}
		r = r.WithContext(context.WithValue(r.Context(), connKey{}, h))
		next.ServeHTTP(hijackWriter{ResponseWriter: w, h: h}, r)
	})
}

// closeForbidden writes a close frame with code 4403 straight to the socket
// and closes it. It runs inside connection_init handling, before gqlgen has
// written anything else, so no frame can interleave.
func closeForbidden(ctx context.Context, reason string) {
	h, _ := ctx.Value(connKey{}).(*connHolder)
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return
	}
	if len(reason) > 120 {
		reason = reason[:120]
	}
	payload := append([]byte{byte(CloseForbidden >> 8), byte(CloseForbidden & 0xff)}, reason...)
	frame := append([]byte{0x88, byte(len(payload))}, payload...)
	_ = h.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = h.conn.Write(frame)
	_ = h.conn.Close()
}

// initFunc authenticates connection_init's {"Authorization": "Bearer ..."}.
// A bad token closes the socket with 4403; a good one ends the connection
// when the token expires.
func initFunc(v auth.Verifier) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		raw := payload.Authorization()
		if raw == "" {
			// A connection without a token may still use open operations.
			return ctx, nil, nil
		}
		tok, ok := auth.BearerToken(raw)
		var p *auth.Principal
		var err error
		if ok && v != nil {
			p, err = v.Verify(ctx, tok)
		}
		if !ok || v == nil || err != nil {
			closeForbidden(ctx, "Forbidden")
			return ctx, nil, apperr.New(apperr.Unauthorized, "Forbidden")
		}
		ctx = auth.WithPrincipal(ctx, p)
		if !p.ExpiresAt.IsZero() {
			// The token's end is the connection's end; gqlgen closes the
			// socket when this context ends. Stopping the timer once the
			// connection ends first releases it.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, p.ExpiresAt)
			context.AfterFunc(ctx, cancel)
			ctx = transport.AppendCloseReason(ctx, "token expired")
		}
		return ctx, nil, nil
	}
}

// depthLimit refuses documents nested deeper than max.
type depthLimit struct{ max int }

func (depthLimit) ExtensionName() string                   { return "DepthLimit" }
func (depthLimit) Validate(graphql.ExecutableSchema) error { return nil }
func (d depthLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	if depth(oc.Operation.SelectionSet, oc.Doc.Fragments, 0, map[string]bool{}) > d.max {
		return &gqlerror.Error{Message: "query is nested too deeply", Extensions: map[string]any{"code": string(apperr.ValidationFailed)}}
	}
	return nil
}

func depth(set ast.SelectionSet, frags ast.FragmentDefinitionList, level int, seen map[string]bool) int {
	max := level
	for _, s := range set {
		var d int
		switch s := s.(type) {
		case *ast.Field:
			d = depth(s.SelectionSet, frags, level+1, seen)
		case *ast.InlineFragment:
			d = depth(s.SelectionSet, frags, level, seen)
		case *ast.FragmentSpread:
			if seen[s.Name] {
				continue
			}
			seen[s.Name] = true
			if f := frags.ForName(s.Name); f != nil {
				d = depth(f.SelectionSet, frags, level, seen)
			}
			delete(seen, s.Name)
		}
		if d > max {
			max = d
		}
	}
	return max
}
