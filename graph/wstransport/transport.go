// Package wstransport is a lean websocket transport for the gqlgen GraphQL
// door. It speaks graphql-transport-ws (the graphql-ws library) and the
// legacy graphql-ws (subscriptions-transport-ws) like gqlgen's own
// transport.Websocket, but an idle connection costs one goroutine and a few
// kilobytes instead of four goroutines plus net/http's buffers:
//
//   - The HTTP handler returns right after the upgrade, so net/http frees the
//     connection's 4 KiB reader and writer and its request objects. The
//     connection's context keeps the request's values (principal, request
//     id) but not its cancellation; the transport ends it itself.
//   - One goroutine per connection reads. Keep-alive pings, pong and init
//     timeouts and scheduled closes (token expiry) run from one shared
//     scheduler (a heap and one goroutine, only while connections exist).
//     Writes take a per-connection mutex and a write deadline; a client that
//     cannot take a write in time is disconnected.
//   - A subscription whose resolver opts in with ReadyFromContext holds no
//     goroutine: it signals readiness when an event is queued, and a small
//     bounded worker pool calls its graphql.ResponseHandler (which then
//     returns at once) and writes the frame. Nor does it keep gqlgen's
//     per-operation state: its handler runs with the operation's own
//     context, and OnEnd releases what it holds when it ends. With
//     HandleDirectly the handler is called without gqlgen's wrapper per
//     call (a response context, the response middleware, the extensions:
//     most of what a delivery allocated). Operations
//     that do not opt in (queries, other subscriptions) run on a goroutine
//     each, as in gqlgen.
//
// Close codes are first-class: an InitFunc refuses a connection with a
// CloseError (4403 by default), and Conn.Close / Conn.CloseAt end one with
// any code, without racing a frame being written.
//
// Why (make bench, docs/performance.md): an idle subscription costs
// 7.2 KiB RSS and 0.98 goroutines (target 16 KiB), and one change reaches
// each of 5,000 subscribers for 17.0 µs of service CPU against a bare
// gorilla writer's 12.5 µs (1.35x; target 1.5x). gqlgen's own transport
// holds four goroutines and net/http's buffers per connection.
//
// Tied to gqlgen v0.17.90 and gqlparser v2.5.33: it implements
// graphql.Transport and drives the executor's ResponseHandler and
// OperationContext as that version does. gqlgen_test.go fails when the
// module versions move, so an upgrade re-reads gqlgen's
// handler/transport websocket and graphql/executor first.
package wstransport

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// Subprotocols the transport speaks. A client naming neither gets the
// legacy protocol, as with gqlgen.
const (
	SubprotocolTransportWS = "graphql-transport-ws"
	SubprotocolLegacy      = "graphql-ws"
)

// Close codes. The 44xx ones are graphql-transport-ws's; the transport uses
// them on the legacy protocol too where the meaning is the same.
const (
	CloseNormal            = websocket.CloseNormalClosure   // 1000: connection_terminate
	CloseGoingAway         = websocket.CloseGoingAway       // 1001: server shutdown
	CloseProtocolError     = websocket.CloseProtocolError   // 1002: legacy protocol violation
	ClosePolicyViolation   = websocket.ClosePolicyViolation // 1008: no pong to a keep-alive ping
	CloseInternalError     = websocket.CloseInternalServerErr
	CloseInvalidMessage    = 4400 // graphql-transport-ws: a message the protocol does not allow
	CloseUnauthorized      = 4401 // graphql-transport-ws: subscribe before connection_ack
	CloseForbidden         = 4403 // a refused connection_init, or an expired token
	CloseInitTimeout       = 4408 // no connection_init within InitTimeout
	CloseSubscriberExists  = 4409 // graphql-transport-ws: an operation id already in use
	CloseTooManyInitiation = 4429 // graphql-transport-ws: a second connection_init
)

// Options configure a Transport. Zero values take the defaults.
type Options struct {
	// InitFunc checks connection_init's payload and returns the context
	// operations run in (typically with the caller's principal). An error
	// refuses the connection: a *CloseError says with which close code and
	// reason; any other error closes with 4403 Forbidden. The ack payload,
	// when not nil, is sent with connection_ack.
	InitFunc transport.WebsocketInitFunc
	// InitTimeout bounds the wait for connection_init (default 10s); the
	// connection is then closed with 4408.
	InitTimeout time.Duration
	// KeepAlive is the ping interval (default 15s; negative turns pings
	// off). graphql-transport-ws clients get {"type":"ping"} and must
	// answer (pong, or any message) before the next one, or are closed
	// with 1008; legacy clients get {"type":"ka"}.
	KeepAlive time.Duration
	// WriteTimeout bounds one write (default 10s). A client that does not
	// take a message within it is disconnected, so it cannot hold up the
	// workers that fan events out to everyone else.
	WriteTimeout time.Duration
	// NoInlineWrites makes every ready subscription wait for the worker
	// pool, even when its publisher could write the change itself (see
	// ReadyFromContext). For tests and measurements of both paths.
	NoInlineWrites bool
	// CloseGrace is how long a closing connection waits for the client's
	// close frame before dropping the TCP connection (default 2s).
	CloseGrace time.Duration
	// ReadLimit bounds an inbound message (default 1 MiB); a larger one is
	// answered with close code 1009.
	ReadLimit int64
	// MaxOperations caps the operations one connection runs at once
	// (0: no cap). Another subscribe is refused with an error message
	// carrying OperationLimitError(MaxOperations), passed through the
	// server's error presenter.
	MaxOperations       int
	OperationLimitError func(limit int) error
	// Workers bounds the goroutines that run ready subscriptions and timers
	// (default 4 × GOMAXPROCS, at least 4). They exist only while there is
	// work.
	Workers int
	// ReadBufferSize is each connection's read buffer (default 256 bytes;
	// messages larger than it are read in several steps). Write buffers
	// come from a shared pool and are held only while writing.
	ReadBufferSize  int
	WriteBufferSize int
	// CheckOrigin vets the Origin header (nil: gorilla's same-origin check).
	CheckOrigin func(*http.Request) bool
	// Base, when it ends, closes every connection with 1001 and refuses new
	// ones, like Shutdown without the wait. Connections are detached from
	// their HTTP requests, so server shutdown must end them this way, with
	// Shutdown, or through http.Server.Shutdown (the transport registers
	// with the server it serves on).
	Base context.Context
	// Log receives connection-level events (scheduled closes, clients cut
	// off for being slow). Never a token or payload.
	Log *slog.Logger
	// CheckMessage, when set, vets every inbound message whole before it
	// is decoded (the service refuses NUL, invalid UTF-8 and repeated keys
	// there, and charges the refusal to the caller's rate limit). ctx is
	// the one InitFunc returned once connection_init succeeded, else the
	// connection's (the upgrade request's values). A refused subscribe
	// (start) with an id fails that operation with an error message
	// carrying the error, passed through the server's error presenter;
	// any other refused message is a protocol error (4400; on the legacy
	// protocol connection_error and 1002).
	CheckMessage func(ctx context.Context, msg []byte) error
}

// Defaults of Options.
const (
	DefaultInitTimeout  = 10 * time.Second
	DefaultKeepAlive    = 15 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultCloseGrace   = 2 * time.Second
	DefaultReadLimit    = 1 << 20
)

// Transport is a graphql.Transport for websockets. Its zero value is not
// usable; build one with New.
type Transport struct {
	opts     Options
	upgrader websocket.Upgrader
	sched    scheduler
	pool     pool

	mu      sync.Mutex
	head    *Conn // registry of open connections (intrusive list)
	shut    bool
	wg      sync.WaitGroup
	servers map[*http.Server]bool

	conns atomic.Int64
	ops   atomic.Int64
	lean  atomic.Int64
}

var _ graphql.Transport = (*Transport)(nil)

// New returns a Transport.
func New(opts Options) *Transport {
	if opts.InitTimeout <= 0 {
		opts.InitTimeout = DefaultInitTimeout
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	if opts.ReadLimit <= 0 {
		opts.ReadLimit = DefaultReadLimit
	}
	if opts.OperationLimitError == nil {
		opts.OperationLimitError = func(limit int) error {
			return fmt.Errorf("at most %d operations per connection", limit)
		}
	}
	if opts.Workers <= 0 {
		opts.Workers = max(4, 4*runtime.GOMAXPROCS(0))
	}
	if opts.ReadBufferSize <= 0 {
		opts.ReadBufferSize = 256
	}
	if opts.WriteBufferSize <= 0 {
		// WriteMessage copies what fits and hands the rest to writev, so
		// a frame never splits however small this is.
		opts.WriteBufferSize = 1024
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	t := &Transport{opts: opts, servers: map[*http.Server]bool{}}
	t.upgrader = websocket.Upgrader{
		ReadBufferSize:  opts.ReadBufferSize,
		WriteBufferSize: opts.WriteBufferSize,
		WriteBufferPool: &sync.Pool{},
		Subprotocols:    []string{SubprotocolTransportWS, SubprotocolLegacy},
		CheckOrigin:     opts.CheckOrigin,
	}
	t.pool.max = opts.Workers
	t.sched.pool = &t.pool
	if opts.Base != nil {
		context.AfterFunc(opts.Base, func() { t.closeAll() })
	}
	return t
}

// Supports implements graphql.Transport: websocket upgrade requests.
func (t *Transport) Supports(r *http.Request) bool { return websocket.IsWebSocketUpgrade(r) }

// Do implements graphql.Transport. It upgrades the request, starts the
// connection's reader and returns, so net/http keeps nothing of the
// connection.
func (t *Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	t.mu.Lock()
	shut := t.shut
	t.mu.Unlock()
	if shut {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	ws, err := t.upgrader.Upgrade(hijacker{w}, r, nil)
	if err != nil {
		return // the upgrader answered the request with an error status
	}
	ws.SetReadLimit(t.opts.ReadLimit)
	c := &Conn{
		t:       t,
		ws:      ws,
		netConn: ws.NetConn(),
		exec:    exec,
		legacy:  ws.Subprotocol() != SubprotocolTransportWS,
		heapIdx: -1,
	}
	if sc, ok := c.netConn.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	// The request's context ends when this handler returns; the
	// connection keeps its values (principal, request id, limiter state)
	// and gets its own end.
	c.req = r.Context()
	c.ctx, c.cancel = context.WithCancel(connValues{c})
	c.hooks = adoptHolds(r.Context())
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		t.watch(srv)
	}

	t.mu.Lock()
	if t.shut {
		t.mu.Unlock()
		c.closeWith(CloseGoingAway, "server shutting down")
		c.teardownUnstarted()
		return
	}
	c.next = t.head
	if t.head != nil {
		t.head.prev = c
	}
	t.head = c
	t.wg.Add(1)
	t.mu.Unlock()
	t.conns.Add(1)

	c.mu.Lock()
	c.initDeadline = time.Now().Add(t.opts.InitTimeout)
	c.rescheduleLocked()
	c.mu.Unlock()
	go c.readLoop()
}

// watch closes this transport's connections when srv shuts down: hijacked
// connections are not net/http's to close, and RegisterOnShutdown is its
// hook for exactly this.
func (t *Transport) watch(srv *http.Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.servers[srv] {
		return
	}
	t.servers[srv] = true
	srv.RegisterOnShutdown(func() { t.closeAll() })
}

// closeAll refuses new connections and starts closing every open one with
// 1001; it does not wait.
func (t *Transport) closeAll() []*Conn {
	t.mu.Lock()
	t.shut = true
	var all []*Conn
	for c := t.head; c != nil; c = c.next {
		all = append(all, c)
	}
	t.mu.Unlock()
	for _, c := range all {
		c.closeWith(CloseGoingAway, "server shutting down")
	}
	return all
}

// Shutdown closes every connection with 1001 (going away), refuses new ones,
// and waits until each has ended or ctx is done; then the rest are dropped
// without waiting for their clients.
func (t *Transport) Shutdown(ctx context.Context) error {
	all := t.closeAll()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range all {
			_ = c.netConn.Close()
		}
		<-done
		return ctx.Err()
	}
}

// Stats are counters for tests and metrics.
type Stats struct {
	// Connections open now.
	Connections int64
	// Operations running now, and how many of them hold no goroutine.
	Operations     int64
	LeanOperations int64
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{Connections: t.conns.Load(), Operations: t.ops.Load(), LeanOperations: t.lean.Load()}
}

func (t *Transport) unregister(c *Conn) {
	t.mu.Lock()
	if c.prev != nil {
		c.prev.next = c.next
	} else if t.head == c {
		t.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	t.mu.Unlock()
	t.conns.Add(-1)
	t.wg.Done()
}

// CloseError refuses a connection_init with a close code. Reason goes into
// the close frame (and, on the legacy protocol, a connection_error message
// before it); Err is the cause, for the caller's logs, never sent.
type CloseError struct {
	Code   int
	Reason string
	Err    error
}

func (e *CloseError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("websocket closed with %d %s: %v", e.Code, e.Reason, e.Err)
	}
	return fmt.Sprintf("websocket closed with %d %s", e.Code, e.Reason)
}

func (e *CloseError) Unwrap() error { return e.Err }

// hijacker lets the upgrader reach the connection through response writer
// wrappers (access logs, metrics) that only offer Unwrap.
type hijacker struct{ http.ResponseWriter }

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}
