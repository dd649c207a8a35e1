// Package rest is the /api/v1 door: it decodes requests, calls the same
// internal services the GraphQL door calls, and encodes their results. No
// business rule lives here.
package rest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/idempotency"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/services"
)

// Services are the domain services the routes call: the same set the
// GraphQL door's resolvers hold (internal/services).
type Services = services.Services

// Limiter spends one unit of a rate-limit group's budget for the request's
// caller, writing the rate-limit headers; it returns a rate_limit error when
// the budget is spent.
type Limiter interface {
	Limit(ctx context.Context, group string, r *http.Request, h http.Header) error
}

// Options are the door's collaborators.
type Options struct {
	Log *slog.Logger
	// Limiter may be nil (no rate limits).
	Limiter Limiter
	// Idempotency keeps the answers of POSTs sent with an Idempotency-Key;
	// nil ignores the header.
	Idempotency *idempotency.Store
	// ClientAddr finds an unauthenticated caller's address (behind trusted
	// proxies); nil takes the connection's peer.
	ClientAddr func(*http.Request) string
}

type server struct {
	// table records every route handle registers, for Routes.
	table []Route
	Services
	log     *slog.Logger
	limiter Limiter
	idem    *idempotency.Store
	addr    func(*http.Request) string
	mux     *http.ServeMux
}

// catchAll is the pattern under which unknown /api paths are answered.
const catchAll = "/api/"

// handlerFunc is a route: it writes its success itself and returns an error
// for the one error writer to render.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// Register adds every /api/v1 route to mux, and a JSON 404/405 for
// anything else under /api/.
func Register(mux *http.ServeMux, svc Services, opts Options) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ClientAddr == nil {
		opts.ClientAddr = peerAddr
	}
	s := &server{Services: svc, log: opts.Log, limiter: opts.Limiter, idem: opts.Idempotency, addr: opts.ClientAddr, mux: mux}
	s.routes()
	mux.HandleFunc(catchAll, s.unmatched)
}

func (s *server) routes() {
	s.route(operation.SignUp, s.signUp)
	s.route(operation.SignIn, s.signIn)

	s.route(operation.CreateSession, s.createSession)
	s.route(operation.GetSession, s.getSession)
	s.route(operation.CloseSession, s.closeSession)

	s.route(operation.CreateBusiness, s.createBusiness)
	s.route(operation.ListBusinesses, s.listBusinesses)
	s.route(operation.GetBusiness, s.getBusiness)
	s.route(operation.UpdateBusiness, s.updateBusiness)
	s.route(operation.UpdateBusinessStatus, s.updateBusinessStatus)
	s.route(operation.ListBusinessUsers, s.listBusinessUsers)
	s.route(operation.AddBusinessUser, s.addBusinessUser)
	s.route(operation.UpdateBusinessUserStatus, s.updateBusinessUserStatus)

	s.apiKeyRoutes()

	s.webhookRoutes()
	s.eventRoutes()
	s.voucherRoutes()

	s.route(operation.OpenAPI, s.openAPI)
	s.widgetRoutes()
}

// route serves op's REST pattern (and its aliases) with h. Before h reads
// anything, the request spends a unit of op's budget and is admitted to op
// (operation.Admit: the door's one check of the table's guard), so a caller
// without the right token gets 401/403 whatever it sent; the service h
// calls finds the admission in the context and does not judge again.
func (s *server) route(op *operation.Op, h handlerFunc) {
	if op.REST == "" {
		panic("rest: operation " + op.Name + " has no REST route")
	}
	group := string(op.Group)
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			httpx.WriteError(w, r, s.log, err)
		}
	})
	post := strings.HasPrefix(op.REST, http.MethodPost+" ")
	guarded := func(w http.ResponseWriter, r *http.Request) {
		if s.limiter != nil && group != "" {
			if err := s.limiter.Limit(r.Context(), group, r, w.Header()); err != nil {
				httpx.WriteError(w, r, s.log, err)
				return
			}
		}
		ctx, p, err := operation.Admit(r.Context(), op)
		if err != nil {
			httpx.WriteError(w, r, s.log, err)
			return
		}
		r = r.WithContext(ctx)
		// Path ids and query values keep the text rules (no NUL, valid
		// UTF-8) before any handler reads them; bodies are checked by
		// the decoder.
		if err := httpx.CheckRequestText(r); err != nil {
			httpx.WriteError(w, r, s.log, err)
			return
		}
		// A POST with an Idempotency-Key runs once per key (after the rate
		// limit and the token guard: a refused caller stores nothing);
		// without the header it costs nothing.
		if post && s.idem != nil && len(r.Header.Values(idempotency.KeyHeader)) > 0 {
			s.idem.Handle(w, r, s.caller(p, r), serve)
			return
		}
		serve(w, r)
	}
	for _, pattern := range append([]string{op.REST}, op.Aliases...) {
		method, path, _ := strings.Cut(pattern, " ")
		s.table = append(s.table, Route{Method: method, Path: strings.TrimSuffix(path, "{$}"), Pattern: pattern, Group: group, Token: guardName(op.Guard)})
		s.mux.HandleFunc(pattern, guarded)
	}
}

// caller names whoever holds an idempotency key: the token's subject, or
// the client address of a request without a token (sign-up, sign-in).
func (s *server) caller(p *auth.Principal, r *http.Request) string {
	if p == nil {
		p = auth.FromContext(r.Context())
	}
	if p != nil && p.ID != "" {
		return string(p.Kind) + ":" + p.ID
	}
	return "ip:" + s.addr(r)
}

// peerAddr is the connection's peer address.
func peerAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

var probeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// unmatched answers unknown paths with a JSON 404 and known paths with a
// wrong method with a JSON 405.
func (s *server) unmatched(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" && p != catchAll {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		httpx.NotFound(w, r)
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	httpx.WriteError(w, r, nil, apperr.Newf(apperr.MethodNotAllowed, "%s is not allowed here; use %s", r.Method, strings.Join(allow, " or ")))
}

// decode reads a strict JSON body into dst.
func decode(r *http.Request, dst any) error { return httpx.DecodeJSON(r, dst, false) }

// decodeEmpty accepts an empty body or an empty JSON object.
func decodeEmpty(r *http.Request) error {
	var empty struct{}
	return httpx.DecodeJSON(r, &empty, true)
}

func ok(w http.ResponseWriter, v any) error {
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}
