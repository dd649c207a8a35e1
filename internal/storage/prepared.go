package storage

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"github.com/lib/pq"
)

// maxPrepared bounds the distinct statement texts Prepared keeps. The hot
// statements are a small fixed set (one text per transition and mode, the
// primary-key read, the webhook claim); a text past the bound runs
// unprepared rather than growing every connection's statement cache.
const maxPrepared = 256

// Prepared runs the hand-written hot statements as prepared statements:
// each distinct text is parsed and planned once per connection, and every
// later execution sends only its parameters (Bind/Execute, one round trip,
// as lib/pq's unnamed statements with binary_parameters). On PostgreSQL
// parsing, analysis and planning were about 40% of the server's CPU for a
// voucher transition (docs/performance.md); a prepared primary-key read or
// conditional UPDATE runs its generic plan instead.
//
// Operational consequence: the statements are named and live as long as the
// connection. A transaction-pooling proxy in front of PostgreSQL must
// support prepared statements (PgBouncer 1.21+ with max_prepared_statements
// set); session pooling always works; VOUCHER_DB_PREPARE=false turns
// preparing off (README).
//
// A statement, once sent, runs to its end. The caller's context decides
// whether it is sent (a caller already gone sends nothing) and how long to
// wait for a turn, not whether it is abandoned midway: these are
// single-row statements of a millisecond, and abandoning one costs more
// than it saves. lib/pq cancels by dialing the server on a new connection
// and then discards the pooled one (under a wave of client disconnects, a
// connection storm just when the database is slow); a transition cancelled
// after it reached the server may have committed all the same; and
// database/sql and lib/pq each watch a cancellable context with a
// goroutine per statement (6 µs of CPU per statement at 16 clients,
// docs/performance.md). The server bounds every statement instead
// (statement_timeout, set by Open), and turns bound how many statements
// can wait without their context: one per pooled connection.
type Prepared struct {
	db *sql.DB
	// on: prepare; off, every statement runs as a plain query.
	on bool
	// turns holds a token per statement between sending and its return,
	// at most the pool's size; nil when the pool is unbounded (then
	// database/sql never waits for a connection).
	turns chan struct{}

	mu    sync.RWMutex
	stmts map[string]*sql.Stmt
}

// newPrepared runs statements on db, whose pool holds at most maxConns
// connections (0: unbounded).
func newPrepared(db *sql.DB, on bool, maxConns int) *Prepared {
	p := &Prepared{db: db, on: on, stmts: make(map[string]*sql.Stmt)}
	if maxConns > 0 {
		p.turns = make(chan struct{}, maxConns)
	}
	return p
}

// NewPrepared runs statements on db prepared, for a pool other than DB's
// own (a session with settings of its own; its size already set). Close
// releases them.
func NewPrepared(db *sql.DB) *Prepared {
	return newPrepared(db, true, db.Stats().MaxOpenConnections)
}

// begin takes a turn for one statement: at once when one is free, else
// waiting as long as ctx allows. The statement then runs under the
// returned context, which carries ctx's values but not its cancellation;
// end gives the turn back.
func (p *Prepared) begin(ctx context.Context) (context.Context, error) {
	if p.turns != nil {
		select {
		case p.turns <- struct{}{}:
		default:
			select {
			case p.turns <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		p.end()
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

func (p *Prepared) end() {
	if p.turns != nil {
		<-p.turns
	}
}

// QueryContext runs query (already in the dialect's placeholder form) with
// args as a prepared statement, to its end once sent (see Prepared).
func (p *Prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return run(p, ctx, query, args, (*sql.DB).QueryContext, (*sql.Stmt).QueryContext)
}

// ExecContext is QueryContext for a statement without rows.
func (p *Prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return run(p, ctx, query, args, (*sql.DB).ExecContext, (*sql.Stmt).ExecContext)
}

// run is QueryContext and ExecContext: a turn, then query's prepared
// statement (plain, when there is none), prepared again once when its plan
// went stale. The database/sql calls are method expressions, so nothing is
// allocated to pass them.
func run[T any](p *Prepared, ctx context.Context, query string, args []any,
	plain func(*sql.DB, context.Context, string, ...any) (T, error),
	prepared func(*sql.Stmt, context.Context, ...any) (T, error)) (T, error) {
	var zero T
	ctx, err := p.begin(ctx)
	if err != nil {
		return zero, err
	}
	defer p.end()
	for retried := false; ; retried = true {
		st, err := p.stmt(ctx, query)
		if err != nil {
			return zero, err
		}
		if st == nil {
			return plain(p.db, ctx, query, args...)
		}
		out, err := prepared(st, ctx, args...)
		if err == nil || retried || !stalePlan(err) {
			return out, err
		}
		p.forget(query, st)
	}
}

// stalePlan reports PostgreSQL refusing a prepared statement whose result
// columns changed type since it was prepared (a migration by another
// replica during a rolling deploy). It is raised before the statement
// runs, and the statement stays refused on every connection, so the
// statement is forgotten and prepared again, once.
func stalePlan(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == "0A000" && strings.Contains(pe.Message, "cached plan must not change result type")
}

// forget drops st, query's statement, so the next use prepares it again.
func (p *Prepared) forget(query string, st *sql.Stmt) {
	p.mu.Lock()
	if p.stmts[query] == st {
		delete(p.stmts, query)
	}
	p.mu.Unlock()
	_ = st.Close()
}

// stmt returns query's prepared statement, preparing it on first use; nil
// (and no error) when the cache is full or preparing is off.
func (p *Prepared) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if !p.on {
		return nil, nil
	}
	p.mu.RLock()
	st, ok := p.stmts[query]
	full := len(p.stmts) >= maxPrepared
	p.mu.RUnlock()
	if ok {
		return st, nil
	}
	if full {
		return nil, nil
	}
	// Prepared outside the lock: preparing is a round trip. Two callers
	// racing on a new text both prepare; the loser's statement is closed.
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.stmts[query]; ok {
		_ = st.Close()
		return cur, nil
	}
	if len(p.stmts) >= maxPrepared {
		_ = st.Close()
		return nil, nil
	}
	p.stmts[query] = st
	return st, nil
}

// Len reports how many statement texts are prepared.
func (p *Prepared) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.stmts)
}

// Close releases every prepared statement (before the pool closes).
func (p *Prepared) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, st := range p.stmts {
		_ = st.Close()
		delete(p.stmts, q)
	}
}
