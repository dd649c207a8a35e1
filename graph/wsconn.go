package graph

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Websocket close codes other packages (the rate limiter) and tests name.
const (
	// CloseForbidden refuses a bad token in connection_init, and ends a
	// connection whose token expired (graphql-transport-ws 4403 Forbidden).
	CloseForbidden = 4403
	// CloseInitTimeout ends a connection that sent no connection_init in
	// time (graphql-transport-ws 4408).
	CloseInitTimeout = 4408
)

const (
	subprotocolTransportWS = "graphql-transport-ws"
	subprotocolLegacy      = "graphql-ws"
)

var errMessageTooBig = errors.New("websocket message too big")

// wsGuard sits between gorilla's websocket.Conn and the hijacked TCP
// connection and sees every byte both ways. That lets anything holding the
// connection's context (a timer at token expiry, the keep-alive loop, the
// init timeout, the rate limiter refusing a connection) close it with a
// code of its choosing, or send a ping, at any moment without cutting in
// half a frame the transport is writing: it tracks frame boundaries on the
// way out and slips its frame in between. It also bounds inbound messages
// (before gorilla buffers them), counts the connection's subscriptions for
// the per-connection cap, and keeps what the connection holds until it
// ends (end). One per connection; it holds no goroutine.
type wsGuard struct {
	net.Conn
	readLimit int64
	maxSubs   int32
	legacy    bool // the connection speaks graphql-ws (subscriptions-transport-ws)

	mu        sync.Mutex
	handshake int // bytes of "\r\n\r\n" matched so far; -1 once the HTTP response is out
	out       frameTracker
	pending   []byte // a close frame waiting for the current frame to end
	closed    bool

	in    frameTracker // only touched by the (single) reader
	inMsg int64

	ready    atomic.Bool   // Conn is set (the upgrade hijacked the connection)
	hijacked chan struct{} // closed once Conn is set
	ka       *keepAlive
	inited   atomic.Bool // connection_init was handled
	subs     atomic.Int32

	// expiry closes the connection when its token expires (set by
	// initFunc, stopped when the connection ends).
	expiry *time.Timer
	// atEnd runs when the connection ends; detached says the transport
	// took the connection over from the request (see wsConn.serve) and
	// calls end itself.
	atEnd    []func()
	detached bool
	endOnce  sync.Once

	// Keep-alive state: the shared keepAlive loop pings once the ack is
	// out, and drops a client silent since the previous ping.
	acked    bool         // under mu: a frame went out after connection_init
	lastRead atomic.Int64 // unix nanos of the last bytes from the client
	pingedAt atomic.Int64 // unix nanos of the last ping
}

// frameTracker follows RFC 6455 frame boundaries in a byte stream.
type frameTracker struct {
	hdr       [14]byte
	hdrLen    int
	remaining uint64
}

func (f *frameTracker) atBoundary() bool { return f.hdrLen == 0 && f.remaining == 0 }

// feed consumes p, calling onHeader for every complete frame header.
func (f *frameTracker) feed(p []byte, onHeader func(opcode byte, length uint64) error) error {
	for len(p) > 0 {
		if f.remaining > 0 {
			k := uint64(len(p))
			if k > f.remaining {
				k = f.remaining
			}
			f.remaining -= k
			p = p[k:]
			continue
		}
		f.hdr[f.hdrLen] = p[0]
		f.hdrLen++
		p = p[1:]
		if f.hdrLen < 2 {
			continue
		}
		need := 2
		switch f.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if f.hdr[1]&0x80 != 0 {
			need += 4 // masking key
		}
		if f.hdrLen < need {
			continue
		}
		length := uint64(f.hdr[1] & 0x7f)
		switch length {
		case 126:
			length = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		case 127:
			length = binary.BigEndian.Uint64(f.hdr[2:10])
		}
		f.hdrLen = 0
		f.remaining = length
		if onHeader != nil {
			if err := onHeader(f.hdr[0]&0x0f, length); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write passes gorilla's bytes through, noting where frames end, and sends
// a pending close frame at the first boundary.
func (g *wsGuard) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flushCloseLocked()
	if g.closed {
		return 0, net.ErrClosed
	}
	n, err := g.Conn.Write(p)
	g.track(p[:n])
	g.flushCloseLocked()
	return n, err
}

// track feeds written bytes to the outbound tracker, skipping the HTTP
// upgrade response that precedes the first frame.
func (g *wsGuard) track(p []byte) {
	const end = "\r\n\r\n"
	for g.handshake >= 0 && len(p) > 0 {
		if p[0] == end[g.handshake] {
			g.handshake++
		} else if p[0] == end[0] {
			g.handshake = 1
		} else {
			g.handshake = 0
		}
		p = p[1:]
		if g.handshake == len(end) {
			g.handshake = -1
		}
	}
	if g.handshake < 0 {
		_ = g.out.feed(p, g.sawFrame)
	}
}

// sawFrame notes an outgoing frame (under mu): the first one after
// connection_init is the ack.
func (g *wsGuard) sawFrame(byte, uint64) error {
	if !g.acked && g.inited.Load() {
		g.acked = true
	}
	return nil
}

func (g *wsGuard) flushCloseLocked() {
	if g.pending == nil || g.closed || g.handshake >= 0 || !g.out.atBoundary() {
		return
	}
	_ = g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = g.Conn.Write(g.pending)
	g.pending = nil
	g.closed = true
	_ = g.Conn.Close()
}

// Read enforces the inbound message limit: a message growing past it gets
// a 1009 close and ends the connection before it is buffered.
func (g *wsGuard) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if n > 0 {
		g.lastRead.Store(time.Now().UnixNano())
	}
	if n > 0 && g.readLimit > 0 {
		ferr := g.in.feed(p[:n], func(opcode byte, length uint64) error {
			switch {
			case opcode >= 0x8: // control frames are small and standalone
				return nil
			case opcode == 0x0: // continuation
				g.inMsg += int64(length)
			default:
				g.inMsg = int64(length)
			}
			if length > uint64(g.readLimit) || g.inMsg > g.readLimit {
				return errMessageTooBig
			}
			return nil
		})
		if ferr != nil {
			g.closeWith(websocket.CloseMessageTooBig, "message too big")
			return 0, ferr
		}
	}
	return n, err
}

// sendText writes one text frame between the transport's frames.
func (g *wsGuard) sendText(payload string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || !g.out.atBoundary() {
		return
	}
	_, _ = g.Conn.Write(frame(websocket.TextMessage, []byte(payload)))
}

// closeWith sends a close frame with code as soon as no other frame is half
// written, then closes the socket; the transport's reader then fails and
// tears the connection (and its subscriptions) down. It never blocks for
// long: a writer stuck on a dead peer is cut off after two seconds.
func (g *wsGuard) closeWith(code int, reason string) {
	if len(reason) > 120 {
		reason = reason[:120]
	}
	payload := websocket.FormatCloseMessage(code, reason)
	if g.mu.TryLock() {
		if g.pending == nil {
			g.pending = frame(websocket.CloseMessage, payload)
		}
		g.flushCloseLocked()
		g.mu.Unlock()
	} else {
		go func() {
			g.mu.Lock()
			if g.pending == nil {
				g.pending = frame(websocket.CloseMessage, payload)
			}
			g.flushCloseLocked()
			g.mu.Unlock()
		}()
	}
	time.AfterFunc(2*time.Second, func() { _ = g.Conn.Close() })
}

// frame builds an unmasked server frame.
func frame(opcode int, payload []byte) []byte {
	b := make([]byte, 0, len(payload)+10)
	b = append(b, 0x80|byte(opcode))
	switch n := len(payload); {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, payload...)
}

type guardKey struct{}

// guardFrom returns the websocket guard of the connection ctx belongs to,
// or nil outside a websocket.
func guardFrom(ctx context.Context) *wsGuard {
	g, _ := ctx.Value(guardKey{}).(*wsGuard)
	return g
}

// hijackWriter hands gorilla the guard instead of the raw connection. Once
// hijacked, it lets go of net/http's response (and through it the
// connection's 8 KiB of read and write buffers): the frames serving the
// socket (gqlgen's recover handler among them) hold this writer for the
// connection's whole life.
type hijackWriter struct {
	http.ResponseWriter
	g *wsGuard
}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.ResponseWriter = hijacked{}
	w.g.Conn = c
	w.g.ready.Store(true)
	w.g.ka.add(w.g)
	close(w.g.hijacked)
	return w.g, rw, nil
}

// hijacked is the ResponseWriter after the hijack: nothing may be written
// through it any more.
type hijacked struct{}

func (hijacked) Header() http.Header       { return http.Header{} }
func (hijacked) Write([]byte) (int, error) { return 0, http.ErrHijacked }
func (hijacked) WriteHeader(int)           {}

// negotiated repeats gorilla's subprotocol choice: the client's first
// protocol the server speaks; none means the legacy graphql-ws, as with
// gqlgen.
func negotiated(r *http.Request) string {
	for _, p := range websocket.Subprotocols(r) {
		if p == subprotocolTransportWS || p == subprotocolLegacy {
			return p
		}
	}
	return ""
}

// guardConfig configures guardSockets.
type guardConfig struct {
	readLimit   int64
	initTimeout time.Duration
	maxSubs     int32
	// base ends every connection when it is done (server shutdown).
	base      context.Context
	keepAlive *keepAlive
}

// guardSockets wraps every websocket upgrade in a wsGuard, arms the init
// timeout (4408), and detaches the
// connection from net/http once it is hijacked: the transport then runs in
// a goroutine of its own and the handler returns, so net/http drops its
// request, response and 8 KiB of connection buffers instead of keeping
// them for the socket's whole life (idle subscribers are the service's
// largest population). The connection's context keeps the request's
// values but not its cancellation; cfg.base ends it at shutdown.
func guardSockets(next http.Handler, cfg guardConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		g := &wsGuard{readLimit: cfg.readLimit, maxSubs: cfg.maxSubs, legacy: negotiated(r) != subprotocolTransportWS, hijacked: make(chan struct{}), ka: cfg.keepAlive}
		// The connection's context keeps the request's values but not its
		// cancellation; nothing needs cancelling at its end (operations
		// are cancelled one by one by the transport).
		r = r.WithContext(context.WithValue(context.WithoutCancel(r.Context()), guardKey{}, g))
		hw := &hijackWriter{ResponseWriter: w, g: g}
		done := make(chan struct{})
		// r is a parameter, not a capture, so it is dead once handed on.
		go func(r *http.Request) {
			defer close(done)
			// Shutdown closes the socket (1001), which ends everything.
			stopBase := context.AfterFunc(cfg.base, func() {
				if g.ready.Load() {
					g.closeWith(websocket.CloseGoingAway, "server shutting down")
				}
			})
			init := time.AfterFunc(cfg.initTimeout, func() {
				if g.ready.Load() && !g.inited.Load() {
					g.closeWith(CloseInitTimeout, "Connection initialisation timeout")
				}
			})
			g.atEnd = append(g.atEnd, func() { stopBase() }, func() { init.Stop() })
			next.ServeHTTP(hw, r)
			if !g.detached {
				g.end()
			}
		}(r)
		select {
		case <-g.hijacked:
		case <-done: // answered without upgrading
		}
	})
}

// end releases what the connection held, once.
func (g *wsGuard) end() {
	g.endOnce.Do(func() {
		if g.expiry != nil {
			g.expiry.Stop()
		}
		if g.ready.Load() {
			g.ka.remove(g)
		}
		for _, f := range g.atEnd {
			f()
		}
		g.atEnd = nil
	})
}

// keepAlive pings every websocket from one goroutine (gqlgen runs one per
// connection): graphql-transport-ws gets {"type":"ping"} and must
// answer (any message counts) before the next round, or it is closed; the
// legacy protocol gets {"type":"ka"}, which it never answers. The loop runs
// only while connections exist.
type keepAlive struct {
	interval time.Duration
	idle     chan struct{}
	mu       sync.Mutex
	conns    map[*wsGuard]struct{}
	running  bool
}

func newKeepAlive(interval time.Duration) *keepAlive {
	return &keepAlive{interval: interval, idle: make(chan struct{}, 1), conns: map[*wsGuard]struct{}{}}
}

func (k *keepAlive) add(g *wsGuard) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.conns[g] = struct{}{}
	if !k.running {
		k.running = true
		go k.run()
	}
}

func (k *keepAlive) remove(g *wsGuard) {
	k.mu.Lock()
	delete(k.conns, g)
	empty := len(k.conns) == 0 && k.running
	k.mu.Unlock()
	if empty {
		select { // let the loop end now rather than at its next tick
		case k.idle <- struct{}{}:
		default:
		}
	}
}

func (k *keepAlive) run() {
	t := time.NewTicker(k.interval)
	defer t.Stop()
	var batch []*wsGuard
	for {
		select {
		case <-t.C:
		case <-k.idle:
		}
		k.mu.Lock()
		if len(k.conns) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		batch = batch[:0]
		for g := range k.conns {
			batch = append(batch, g)
		}
		k.mu.Unlock()
		now := time.Now().UnixNano()
		for _, g := range batch {
			g.keepAlive(now)
		}
		clear(batch)
	}
}

var (
	pingFrame = frame(websocket.TextMessage, []byte(`{"type":"ping"}`))
	kaFrame   = frame(websocket.TextMessage, []byte(`{"type":"ka"}`))
)

// keepAlive sends this round's ping, or closes a graphql-transport-ws
// connection that sent nothing since the last one. It never waits on the
// connection: a writer busy with a frame just skips this round.
func (g *wsGuard) keepAlive(now int64) {
	if !g.legacy && g.pingedAt.Load() != 0 && g.lastRead.Load() < g.pingedAt.Load() {
		g.closeWith(websocket.ClosePolicyViolation, "no pong")
		return
	}
	if !g.mu.TryLock() {
		return
	}
	defer g.mu.Unlock()
	// Nothing before connection_ack (the first frame after init) is out.
	if !g.acked || g.closed || g.pending != nil || !g.out.atBoundary() {
		return
	}
	f := kaFrame
	if !g.legacy {
		f = pingFrame
	}
	// A peer that stopped reading must not stall every other connection's
	// ping: a write that cannot finish at once cuts the connection.
	_ = g.Conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := g.Conn.Write(f)
	_ = g.Conn.SetWriteDeadline(time.Time{})
	if err != nil {
		g.closed = true
		_ = g.Conn.Close()
		return
	}
	g.pingedAt.Store(now)
}
