// Package floor is the bench's two floors: the least a server could do for
// the service's hot paths on this machine. The read floor is a bare
// net/http handler running the very SQL the service runs for GET voucher
// (captured from PostgreSQL's log) on the same database and driver; the
// fan-out floor is a bare websocket server writing one pre-built frame to
// every connection. They run in a child process (voucherbench floor) so they
// compete for the CPUs the way the service does.
package floor

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	_ "github.com/lib/pq" // the service's PostgreSQL driver
)

// ReadQuery is the captured primary-key read: SQL with its parameters,
// IDParam being the index of the one that names the voucher. Prepared runs
// it as a prepared statement, as the service did when it was captured.
type ReadQuery struct {
	SQL      string    `json:"sql"`
	Params   []*string `json:"params"`
	IDParam  int       `json:"idParam"`
	Prepared bool      `json:"prepared,omitempty"`
}

// Config configures the floor process.
type Config struct {
	Addr     string    `json:"addr"`
	DSN      string    `json:"dsn,omitempty"`
	MaxConns int       `json:"maxConns,omitempty"`
	Read     ReadQuery `json:"read,omitempty"`
	// Redeem is the captured redeem statement (the one conditional UPDATE
	// … RETURNING the service runs for a voucher without a business), for
	// the redeem floor; empty when not captured.
	Redeem ReadQuery `json:"redeem,omitempty"`
	// C2C, when set (with DSN), makes this process one replica of the
	// commit→subscriber floor with the HTTP hop (c2c.go).
	C2C *C2C `json:"c2c,omitempty"`
}

// Serve runs the floors on cfg.Addr until ctx ends:
//
//	GET  /vouchers/{id}  the read floor (when cfg.DSN is set)
//	POST /vouchers/{id}/redeem  the redeem floor (when cfg.Redeem.SQL is set too)
//	GET  /ws             websocket connections for the fan-out floor
//	POST /broadcast      writes the request body as one text frame to every connection
//	GET  /count          number of open websocket connections
//
// and with cfg.C2C the commit→subscriber floor's routes (c2c.go):
//
//	POST /api/v1/vouchers/{id}/negotiate-voucher  a transition (committing replica)
//	POST /c2c/payload    the NOTIFY payload to send (committing replica)
//	GET  /graphql        a voucher's subscriber
func Serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	mux := http.NewServeMux()
	if cfg.DSN != "" {
		db, err := sql.Open("postgres", cfg.DSN)
		if err != nil {
			return err
		}
		defer db.Close()
		n := cfg.MaxConns
		if n <= 0 {
			n = 32
		}
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
		query := func(ctx context.Context, args ...any) (*sql.Rows, error) {
			return db.QueryContext(ctx, cfg.Read.SQL, args...)
		}
		if cfg.Read.Prepared {
			st, err := db.PrepareContext(ctx, cfg.Read.SQL)
			if err != nil {
				return err
			}
			defer st.Close()
			query = st.QueryContext
		}
		if cfg.C2C != nil {
			stop, err := serveC2C(ctx, mux, db, cfg.DSN, *cfg.C2C, log)
			if err != nil {
				return err
			}
			defer stop()
		}
		if cfg.Read.SQL != "" {
			mux.HandleFunc("GET /vouchers/{id}", readHandler(query, cfg.Read))
		}
		if cfg.Redeem.SQL != "" {
			// The redeem floor: the request's body is read and decoded
			// (as any JSON endpoint must), then the captured statement
			// runs with the path's voucher and the row it returns is
			// written back, as readHandler does.
			redeem := func(ctx context.Context, args ...any) (*sql.Rows, error) {
				return db.QueryContext(ctx, cfg.Redeem.SQL, args...)
			}
			if cfg.Redeem.Prepared {
				st, err := db.PrepareContext(ctx, cfg.Redeem.SQL)
				if err != nil {
					return err
				}
				defer st.Close()
				redeem = st.QueryContext
			}
			rh := readHandler(redeem, cfg.Redeem)
			mux.HandleFunc("POST /vouchers/{id}/redeem", func(w http.ResponseWriter, r *http.Request) {
				var body map[string]any
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				rh(w, r)
			})
		}
	}
	b := &broadcaster{conns: map[*websocket.Conn]struct{}{}}
	mux.HandleFunc("GET /ws", b.accept)
	mux.HandleFunc("POST /broadcast", b.broadcast)
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		n := len(b.conns)
		b.mu.Unlock()
		fmt.Fprint(w, n)
	})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		b.closeAll()
	}()
	log.Info("floor listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// readHandler answers with the voucher row as a JSON object of its columns,
// which is what a minimal GET voucher does: one primary-key read, encode,
// write.
func readHandler(query func(ctx context.Context, args ...any) (*sql.Rows, error), q ReadQuery) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		args := make([]any, len(q.Params))
		for i, p := range q.Params {
			if p != nil {
				args[i] = *p
			}
		}
		args[q.IDParam] = r.PathValue("id")
		rows, err := query(r.Context(), args...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if !rows.Next() {
			http.Error(w, `{"code":"not_found"}`, http.StatusNotFound)
			return
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		obj := make(map[string]any, len(cols))
		for i, c := range cols {
			switch v := vals[i].(type) {
			case []byte:
				if json.Valid(v) {
					obj[c] = json.RawMessage(v)
				} else {
					obj[c] = string(v)
				}
			default:
				obj[c] = v
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	}
}

type broadcaster struct {
	mu    sync.Mutex
	conns map[*websocket.Conn]struct{}
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 1024,
	WriteBufferPool: &sync.Pool{},
	CheckOrigin:     func(*http.Request) bool { return true },
}

func (b *broadcaster) accept(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	b.mu.Lock()
	b.conns[c] = struct{}{}
	b.mu.Unlock()
	// A reader per connection notices the client leaving, as any server's
	// must; it costs what the service's reader costs.
	go func() {
		defer func() {
			b.mu.Lock()
			delete(b.conns, c)
			b.mu.Unlock()
			c.Close()
		}()
		for {
			if _, _, err := c.NextReader(); err != nil {
				return
			}
		}
	}()
}

// broadcast writes one prepared frame (encoded once) to every connection,
// spread over one goroutine per CPU, and answers when all writes are done.
func (b *broadcaster) broadcast(w http.ResponseWriter, r *http.Request) {
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	start := time.Now()
	pm, err := websocket.NewPreparedMessage(websocket.TextMessage, payload)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var failed int64
	var fmu sync.Mutex
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := k; i < len(conns); i += workers {
				_ = conns[i].SetWriteDeadline(time.Now().Add(10 * time.Second))
				if err := conns[i].WritePreparedMessage(pm); err != nil {
					fmu.Lock()
					failed++
					fmu.Unlock()
				}
			}
		}(k)
	}
	wg.Wait()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"conns": len(conns), "failed": failed, "elapsedNs": time.Since(start)})
}

func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
		c.Close()
	}
}
