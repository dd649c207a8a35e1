package voucher_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// counter counts what a pool sends the database, at the driver: every
// statement executed (plain or prepared; preparing one is not counted)
// and every transaction begun, whoever sent it (the hand-written
// statements or ent).
type counter struct{ stmts, txs atomic.Int64 }

// sent is what was sent so far: statements and transactions.
func (c *counter) sent() (stmts, txs int64) { return c.stmts.Load(), c.txs.Load() }

// since fails t unless exactly wantStmts statements and no transaction were
// sent since mark (what sent returned before the call).
func (c *counter) since(t *testing.T, what string, mark [2]int64, wantStmts int64) {
	t.Helper()
	s, x := c.sent()
	if s-mark[0] != wantStmts || x != mark[1] {
		t.Fatalf("%s sent %d statements and %d transactions, want %d and none", what, s-mark[0], x-mark[1], wantStmts)
	}
}

func (c *counter) mark() [2]int64 {
	s, x := c.sent()
	return [2]int64{s, x}
}

// eachWithURL is testdb.Each, with the database's URL for a second pool
// (another replica) on the same database.
func eachWithURL(t *testing.T, fn func(t *testing.T, db *storage.DB, url string)) {
	t.Helper()
	for _, d := range testdb.Dialects {
		t.Run(d, func(t *testing.T) {
			db, url := testdb.OpenURL(t, d)
			fn(t, db, url)
		})
	}
}

// openCounting opens another pool on the database at url whose every
// statement c counts.
func openCounting(t *testing.T, url string) (*storage.DB, *counter) {
	t.Helper()
	c := &counter{}
	db, err := storage.Open(context.Background(), url, storage.Options{
		MaxOpenConns:  8,
		WrapConnector: func(in driver.Connector) driver.Connector { return countConnector{in, c} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, c
}

type countConnector struct {
	driver.Connector
	c *counter
}

func (k countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := k.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{conn, k.c}, nil
}

// countConn passes everything to the driver's connection, counting
// statements and transactions. A driver without QueryContext/ExecContext
// gets driver.ErrSkip, so database/sql takes its fallback (through
// Prepare, which counts at the statement).
type countConn struct {
	driver.Conn
	c *counter
}

func (k *countConn) Prepare(q string) (driver.Stmt, error) {
	return k.PrepareContext(context.Background(), q)
}

func (k *countConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := k.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, q)
	} else {
		st, err = k.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &countStmt{st, k.c}, nil
}

func (k *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	k.c.txs.Add(1)
	b, ok := k.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errNoContext
	}
	return b.BeginTx(ctx, opts)
}

func (k *countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := k.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	k.c.stmts.Add(1)
	return qc.QueryContext(ctx, q, args)
}

func (k *countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := k.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	k.c.stmts.Add(1)
	return ec.ExecContext(ctx, q, args)
}

func (k *countConn) Ping(ctx context.Context) error {
	if p, ok := k.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (k *countConn) ResetSession(ctx context.Context) error {
	if r, ok := k.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (k *countConn) IsValid() bool {
	if v, ok := k.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// countStmt counts each execution of a prepared statement.
type countStmt struct {
	driver.Stmt
	c *counter
}

func (k *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := k.Stmt.(driver.StmtQueryContext)
	if !ok {
		return nil, errNoContext
	}
	k.c.stmts.Add(1)
	return q.QueryContext(ctx, args)
}

func (k *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := k.Stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errNoContext
	}
	k.c.stmts.Add(1)
	return e.ExecContext(ctx, args)
}

// errNoContext: both drivers (lib/pq, modernc.org/sqlite) implement the
// context methods; a driver that did not would fail the tests rather than
// go uncounted.
var errNoContext = errors.New("count: the driver lacks a context method")
