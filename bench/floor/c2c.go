package floor

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
)

// C2C configures the commit→subscriber floor with the HTTP hop: the least
// any implementation of "a transition over HTTP, committed, pushed to the
// voucher's websocket subscriber" costs on this machine. Two floor
// processes play the service's two replicas. The committing one answers
// POST /api/v1/vouchers/{id}/negotiate-voucher: it decodes the body, runs
// Update, the service's own negotiate statement (captured from
// PostgreSQL's log: one conditional UPDATE of the voucher's row RETURNING
// it, committed on its own, a durable commit waiting for its WAL flush)
// with the path's voucher, reads the new version from the row, writes the
// voucher's frame to its subscriber if that subscriber is on this process,
// hands the change to its notifier and answers with the commit's instant
// in Server-Timing (as the service does). Running the very statement the
// service runs, on its table, is what the read and redeem floors do: the
// statement's cost (the row's width, its WAL, the table's pages) is the
// data's, any implementation pays it, and the difference the bench
// measures is the service's own. The notifier, one goroutine on one
// session with synchronous_commit off, NOTIFYs Channel with the service's
// own notification payload for every change waiting, in one statement (up
// to 128), as the service's notifier (pubsub.Notifier) does and for its
// reasons: a NOTIFY in the committing transaction holds a cluster-wide
// lock through the commit's WAL flush, so notifying commits go one flush
// at a time; and NOTIFYs sent from many sessions at once queue for that
// lock. Doing what the service's notifier does, with nothing else, makes
// the difference the bench measures the service's own cost rather than a
// different design. The other one (Listen) LISTENs on
// Channel and writes each notified change to its subscriber. Subscribers
// connect to GET /graphql and speak just enough graphql-transport-ws
// (connection_init, one subscribe with variables.id) to be the bench's
// subscribers, which read both sides with the same code.
type C2C struct {
	Channel string `json:"channel"`
	// Table and Column name the rows the transitions change and the
	// column that holds each one's version (the service's vouchers and
	// version): a subscriber's first frame carries its row's current
	// version, and Update's row its new one.
	Table  string `json:"table"`
	Column string `json:"column"`
	// Update is the transition statement, run with the path's voucher as
	// its IDParam (the committing replica only).
	Update ReadQuery `json:"update"`
	Listen bool      `json:"listen,omitempty"`
	// NATS, when set (a server's URL), carries the changes between the
	// two replicas instead of NOTIFY: the committing one publishes each on
	// the subject Channel as it commits (nats.go buffers it and its
	// flusher writes it, as the service's bus does), and the other
	// subscribes to it.
	NATS string `json:"nats,omitempty"`
	// Frame is a voucherUpdated message the service sent, with the
	// voucher id and version it carried: each change is that frame with
	// its own id and version in their places.
	Frame        string `json:"frame"`
	FrameID      string `json:"frameId"`
	FrameVersion int64  `json:"frameVersion"`
}

// c2cServer is one floor replica.
type c2cServer struct {
	cfg C2C
	db  *sql.DB
	// notifyDB is the notifier's session: the same database with
	// synchronous_commit off; pending the changes it has to send.
	notifyDB *sql.DB
	pending  chan string
	// send hands a change to the other replica: to the notifier
	// (pending), or to NATS.
	send    func(msg string)
	tmpl    *frameTemplate
	update  func(ctx context.Context, args ...any) (*sql.Rows, error)
	current *sql.Stmt
	// payload is the service's notification payload (POST /c2c/payload),
	// sent with every NOTIFY; nil until the bench has captured one.
	payload atomic.Pointer[string]

	mu   sync.RWMutex
	subs map[string]*c2cSub // voucher id → its subscriber
}

type c2cSub struct {
	mu  sync.Mutex
	c   *websocket.Conn
	buf []byte
}

var c2cUpgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 1024,
	Subprotocols:    []string{"graphql-transport-ws"},
	CheckOrigin:     func(*http.Request) bool { return true },
}

// serveC2C adds the floor's routes to mux and, on the listening replica,
// starts its listener (stopped with ctx).
func serveC2C(ctx context.Context, mux *http.ServeMux, db *sql.DB, dsn string, cfg C2C, log *slog.Logger) (func(), error) {
	tmpl, err := newFrameTemplate([]byte(cfg.Frame), cfg.FrameID, cfg.FrameVersion)
	if err != nil {
		return nil, err
	}
	s := &c2cServer{cfg: cfg, db: db, tmpl: tmpl, subs: map[string]*c2cSub{}}
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	prep := func(q string) (*sql.Stmt, error) {
		st, err := db.PrepareContext(ctx, q)
		if err == nil {
			closers = append(closers, func() { st.Close() })
		}
		return st, err
	}
	if s.current, err = prep(`SELECT ` + pq.QuoteIdentifier(cfg.Column) + ` FROM ` + pq.QuoteIdentifier(cfg.Table) + ` WHERE id = $1`); err != nil {
		cleanup()
		return nil, err
	}
	mux.HandleFunc("GET /graphql", s.accept)
	if cfg.NATS != "" {
		nc, err := nats.Connect(cfg.NATS, nats.Name("voucherbench c2c floor"))
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("c2c floor: NATS: %w", err)
		}
		closers = append(closers, nc.Close)
		if cfg.Listen {
			sub, err := nc.Subscribe(cfg.Channel, func(m *nats.Msg) { s.heard(string(m.Data)) })
			if err == nil {
				err = sub.SetPendingLimits(1<<20, 256<<20)
			}
			if err == nil {
				err = nc.Flush()
			}
			if err != nil {
				cleanup()
				return nil, fmt.Errorf("c2c floor: NATS subscribe: %w", err)
			}
			log.Info("c2c floor ready", "listen", true, "transport", "nats")
			return cleanup, nil
		}
		s.send = func(msg string) {
			if err := nc.Publish(cfg.Channel, []byte(msg)); err != nil {
				log.Error("c2c floor: NATS publish", "err", err)
			}
		}
	}
	if cfg.Listen {
		l := pq.NewListener(dsn, 100*time.Millisecond, time.Second, nil)
		if err := l.Listen(cfg.Channel); err != nil {
			_ = l.Close()
			cleanup()
			return nil, fmt.Errorf("c2c floor LISTEN: %w", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.listen(ctx, l)
		}()
		closers = append(closers, func() { _ = l.Close(); <-done })
		return cleanup, nil
	}
	if cfg.Update.SQL == "" || cfg.Update.IDParam < 0 || cfg.Update.IDParam >= len(cfg.Update.Params) {
		cleanup()
		return nil, errors.New("c2c floor: no transition statement with the voucher's parameter")
	}
	s.update = func(ctx context.Context, args ...any) (*sql.Rows, error) {
		return db.QueryContext(ctx, cfg.Update.SQL, args...)
	}
	if cfg.Update.Prepared {
		st, err := prep(cfg.Update.SQL)
		if err != nil {
			cleanup()
			return nil, err
		}
		s.update = st.QueryContext
	}
	if s.send != nil {
		return s.serveCommitting(mux, cleanup, log), nil
	}
	ndsn, err := asyncCommit(dsn)
	if err != nil {
		cleanup()
		return nil, err
	}
	if s.notifyDB, err = sql.Open("postgres", ndsn); err != nil {
		cleanup()
		return nil, err
	}
	closers = append(closers, func() { s.notifyDB.Close() })
	s.notifyDB.SetMaxOpenConns(1)
	s.notifyDB.SetMaxIdleConns(1)
	if err := s.notifyDB.PingContext(ctx); err != nil {
		cleanup()
		return nil, err
	}
	s.pending = make(chan string, 1<<16)
	nctx, stopNotifier := context.WithCancel(ctx)
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		s.notifier(nctx, log)
	}()
	closers = append(closers, func() { stopNotifier(); <-notified })
	s.send = func(msg string) { s.pending <- msg }
	return s.serveCommitting(mux, cleanup, log), nil
}

// serveCommitting adds the committing replica's routes: the payload and
// the transition.
func (s *c2cServer) serveCommitting(mux *http.ServeMux, cleanup func(), log *slog.Logger) func() {
	mux.HandleFunc("POST /c2c/payload", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) == 0 {
			http.Error(w, "payload wanted", http.StatusBadRequest)
			return
		}
		p := string(b)
		s.payload.Store(&p)
	})
	mux.HandleFunc("POST /api/v1/vouchers/{id}/negotiate-voucher", s.negotiate)
	log.Info("c2c floor ready", "listen", false, "transport", map[bool]string{false: "notify", true: "nats"}[s.cfg.NATS != ""])
	return cleanup
}

// negotiate is the transition: decode, the statement (committed alone),
// its row's version, hand it to the notifier, deliver in process, answer.
func (s *c2cServer) negotiate(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := s.payload.Load()
	if p == nil {
		http.Error(w, "no notification payload yet", http.StatusServiceUnavailable)
		return
	}
	id := r.PathValue("id")
	ctx := r.Context()
	version, err := s.transition(ctx, id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	committed := time.Now()
	s.send(id + " " + strconv.FormatInt(version, 10) + " " + *p)
	s.deliver(id, version)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Server-Timing", `commit;desc="`+strconv.FormatInt(committed.UnixNano(), 10)+`"`)
	fmt.Fprintf(w, `{"id":%q,"version":%d}`, id, version)
}

// transition runs the statement on voucher id and returns the version
// its row comes back with (an error when no row does).
func (s *c2cServer) transition(ctx context.Context, id string) (int64, error) {
	q := s.cfg.Update
	args := make([]any, len(q.Params))
	for i, p := range q.Params {
		if p != nil {
			args[i] = *p
		}
	}
	args[q.IDParam] = id
	rows, err := s.update(ctx, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("voucher %s: no row changed", id)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return 0, err
	}
	for i, c := range cols {
		if c == s.cfg.Column {
			return strconv.ParseInt(string(vals[i]), 10, 64)
		}
	}
	return 0, fmt.Errorf("the statement returns no %s column", s.cfg.Column)
}

// notifier sends every waiting change, up to 128 in one statement
// (SELECT pg_notify($1, $2), pg_notify($1, $3), ...), until ctx ends.
func (s *c2cServer) notifier(ctx context.Context, log *slog.Logger) {
	const maxBatch = 128
	args := make([]any, 0, maxBatch+1)
	var q strings.Builder
	for {
		args = append(args[:0], s.cfg.Channel)
		select {
		case <-ctx.Done():
			return
		case m := <-s.pending:
			args = append(args, m)
		}
	more:
		for len(args) <= maxBatch {
			select {
			case m := <-s.pending:
				args = append(args, m)
			default:
				break more
			}
		}
		q.Reset()
		q.WriteString("SELECT ")
		for i := 2; i <= len(args); i++ {
			if i > 2 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "pg_notify($1, $%d)", i)
		}
		if _, err := s.notifyDB.ExecContext(ctx, q.String(), args...); err != nil && ctx.Err() == nil {
			log.Error("c2c floor: NOTIFY", "err", err)
		}
	}
}

// asyncCommit is dsn for sessions whose commits do not wait for their WAL
// flush (synchronous_commit off, a run-time parameter lib/pq sends at
// connect), as the service's notifier's session is.
func asyncCommit(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("c2c floor: database URL: %w", err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// listen writes each notified change to its subscriber (the other
// replica's path).
func (s *c2cServer) listen(ctx context.Context, l *pq.Listener) {
	for {
		select {
		case <-ctx.Done():
			return
		case n, ok := <-l.Notify:
			if !ok {
				return
			}
			if n == nil {
				continue
			}
			s.heard(n.Extra)
		}
	}
}

// heard delivers a change the committing replica sent ("<id> <version>
// <payload>").
func (s *c2cServer) heard(msg string) {
	id, rest, _ := strings.Cut(msg, " ")
	ver, _, _ := strings.Cut(rest, " ")
	if v, err := strconv.ParseInt(ver, 10, 64); err == nil {
		s.deliver(id, v)
	}
}

// deliver writes the voucher's frame at version to its subscriber, if it
// is on this replica.
func (s *c2cServer) deliver(id string, version int64) {
	s.mu.RLock()
	sub := s.subs[id]
	s.mu.RUnlock()
	if sub == nil {
		return
	}
	sub.write(s.tmpl, id, version)
}

func (sub *c2cSub) write(t *frameTemplate, id string, version int64) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.buf = t.render(sub.buf[:0], id, version)
	_ = sub.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = sub.c.WriteMessage(websocket.TextMessage, sub.buf)
}

// accept: connection_init → connection_ack; subscribe with variables.id →
// the voucher's current state as its first frame; then the connection is
// read until the client leaves (pings answered), as any server must.
func (s *c2cServer) accept(w http.ResponseWriter, r *http.Request) {
	c, err := c2cUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	sub := &c2cSub{c: c}
	var voucher string
	defer func() {
		if voucher != "" {
			s.mu.Lock()
			if s.subs[voucher] == sub {
				delete(s.subs, voucher)
			}
			s.mu.Unlock()
		}
	}()
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Payload struct {
				Variables map[string]any `json:"variables"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return
		}
		switch m.Type {
		case "connection_init":
			sub.mu.Lock()
			err = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_ack"}`))
			sub.mu.Unlock()
		case "ping":
			sub.mu.Lock()
			err = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"pong"}`))
			sub.mu.Unlock()
		case "subscribe":
			id, _ := m.Payload.Variables["id"].(string)
			var version int64
			if id == "" || voucher != "" {
				return
			}
			if err := s.current.QueryRowContext(r.Context(), id).Scan(&version); err != nil {
				return
			}
			voucher = id
			s.mu.Lock()
			s.subs[id] = sub
			s.mu.Unlock()
			sub.write(s.tmpl, id, version)
		}
		if err != nil {
			return
		}
	}
}

// frameTemplate is a captured frame with its voucher id and version cut
// out, so a change's frame is the same bytes with its own in their place.
type frameTemplate struct {
	frame []byte
	spans []span // sorted, not overlapping
}

type span struct {
	start, end int
	version    bool // the version's digits; else the id's characters
}

func newFrameTemplate(frame []byte, id string, version int64) (*frameTemplate, error) {
	const key = `"voucherUpdated"`
	base := bytes.Index(frame, []byte(key))
	if base < 0 || id == "" {
		return nil, fmt.Errorf("c2c floor: frame %.200q is not a voucherUpdated message of %q", frame, id)
	}
	obj := frame[base:]
	i := bytes.Index(obj, []byte(`"`+id+`"`))
	v := []byte(`"version":` + strconv.FormatInt(version, 10))
	j := bytes.Index(obj, v)
	if i < 0 || j < 0 {
		return nil, fmt.Errorf("c2c floor: frame %.200q does not carry id %q and version %d", frame, id, version)
	}
	spans := []span{
		{start: base + i + 1, end: base + i + 1 + len(id)},
		{start: base + j + len(`"version":`), end: base + j + len(v), version: true},
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start < spans[b].start })
	return &frameTemplate{frame: frame, spans: spans}, nil
}

func (t *frameTemplate) render(b []byte, id string, version int64) []byte {
	prev := 0
	for _, s := range t.spans {
		b = append(b, t.frame[prev:s.start]...)
		if s.version {
			b = strconv.AppendInt(b, version, 10)
		} else {
			b = append(b, id...)
		}
		prev = s.end
	}
	return append(b, t.frame[prev:]...)
}
