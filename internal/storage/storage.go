// Package storage opens the database (embedded SQLite by default, PostgreSQL
// for production), applies the checked-in migrations, and gives services one
// transaction helper. Services never open connections themselves.
package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/lib/pq"  // PostgreSQL driver
	_ "modernc.org/sqlite" // pure-Go SQLite driver

	"entgo.io/ent/dialect"

	"github.com/voucherd/voucherd/ent"
)

// Dialects.
const (
	Postgres = dialect.Postgres
	SQLite   = dialect.SQLite
)

// DB is an open database: the ent client for ordinary work and the raw
// handle for the few hot statements written by hand.
type DB struct {
	*ent.Client
	SQL *sql.DB
	// Prepared runs the hot hand-written statements prepared (see there).
	Prepared *Prepared
	Dialect  string
	// URL is the connection string with any password removed, for logs.
	URL string
}

// Options tune the connection pool.
type Options struct {
	// MaxOpenConns bounds the pool (PostgreSQL); 0 means 32.
	MaxOpenConns int
	// Unprepared runs the hot statements unprepared (Prepared then passes
	// them straight to the pool), for a connection pooler that cannot
	// keep prepared statements.
	Unprepared bool
	// WrapConnector, when set, wraps the driver's connector: every
	// connection of the pool comes from what it returns. Tests use it to
	// count the statements a call sends.
	WrapConnector func(driver.Connector) driver.Connector
}

// DefaultStatementTimeout is how long PostgreSQL lets one of the service's
// statements run (its statement_timeout) unless the database URL sets
// statement_timeout itself. The service's statements take milliseconds;
// migrations lift the bound for their own session.
const DefaultStatementTimeout = "30s"

// DefaultSQLiteURL is where the embedded database lives unless configured.
const DefaultSQLiteURL = "sqlite://./data/voucherd.db"

// Open connects to rawURL: postgres://... or postgresql://... selects
// PostgreSQL; sqlite://PATH (or a bare file path) selects SQLite.
func Open(ctx context.Context, rawURL string, opts Options) (*DB, error) {
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 32
	}
	var (
		db      *sql.DB
		dialect string
		safe    string
		err     error
	)
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		dialect = Postgres
		u, perr := url.Parse(rawURL)
		if perr != nil {
			return nil, fmt.Errorf("storage: database URL is not a valid URL")
		}
		q := u.Query()
		// Without binary parameters lib/pq prepares every statement first:
		// two round trips per query instead of one. The price: lib/pq then
		// sends []byte arguments in binary form, which a jsonb column
		// refuses ("unsupported jsonb version number"). So JSON columns
		// written through ent are text on PostgreSQL, and hand-written
		// statements pass JSON as a string with an explicit ::jsonb cast.
		if q.Get("binary_parameters") == "" {
			q.Set("binary_parameters", "yes")
		}
		boundStatements(q)
		u.RawQuery = q.Encode()
		safe = u.Redacted()
		db, err = opts.open("postgres", u.String())
		if err != nil {
			return nil, fmt.Errorf("storage: open postgres: %w", err)
		}
		db.SetMaxOpenConns(opts.MaxOpenConns)
		db.SetMaxIdleConns(opts.MaxOpenConns)
		db.SetConnMaxIdleTime(5 * time.Minute)
	default:
		dialect = SQLite
		path := strings.TrimPrefix(strings.TrimPrefix(rawURL, "sqlite://"), "sqlite:")
		if path == "" {
			return nil, errors.New("storage: empty SQLite path")
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("storage: create data directory: %w", err)
			}
		}
		safe = "sqlite://" + path
		// WAL lets readers run beside the writer; immediate transactions take
		// the write lock up front so concurrent writers queue on busy_timeout
		// instead of failing; times are written in one sortable text format.
		dsn := "file:" + sqliteURIPath.Replace(path) + "?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)" +
			"&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate&_time_format=sqlite"
		db, err = opts.open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("storage: open sqlite: %w", err)
		}
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: connect to %s: %w", safe, err)
	}
	drv := entsql.OpenDB(dialect, db)
	return &DB{Client: ent.NewClient(ent.Driver(drv)), SQL: db, Prepared: newPrepared(db, !opts.Unprepared, db.Stats().MaxOpenConnections), Dialect: dialect, URL: safe}, nil
}

// open is sql.Open, through WrapConnector when set.
func (o Options) open(driverName, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil || o.WrapConnector == nil {
		return db, err
	}
	drv := db.Driver()
	_ = db.Close() // sql.Open connected nothing yet
	return sql.OpenDB(o.WrapConnector(dsnConnector{drv: drv, dsn: dsn})), nil
}

// dsnConnector opens drv's connections to dsn (what sql.Open does for a
// driver without a connector of its own).
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

// sqliteURIPath escapes what a "file:" URI gives meaning to, so a path is
// opened whole: '#' would start a fragment, '?' the parameters, '%' an
// escape (SQLite's URI rules).
var sqliteURIPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// Close closes the pool.
func (db *DB) Close() error {
	db.Prepared.Close()
	return db.Client.Close()
}

// IsPostgres reports whether db is PostgreSQL.
func (db *DB) IsPostgres() bool { return db.Dialect == Postgres }

// Ping checks the database answers (for /readyz).
func (db *DB) Ping(ctx context.Context) error { return db.SQL.PingContext(ctx) }

// Tx runs fn in a transaction, committing when it returns nil and rolling
// back otherwise (or on panic).
func (db *DB) Tx(ctx context.Context, fn func(tx *ent.Tx) error) (err error) {
	tx, err := db.Client.Tx(ctx)
	if err != nil {
		return fmt.Errorf("storage: begin: %w", err)
	}
	defer func() {
		if v := recover(); v != nil {
			_ = tx.Rollback()
			panic(v)
		}
	}()
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			return errors.Join(err, fmt.Errorf("storage: rollback: %w", rerr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storage: commit: %w", err)
	}
	return nil
}

// Rebind rewrites ? placeholders as $1, $2, ... for PostgreSQL, so a
// hand-written statement serves both databases.
func (db *DB) Rebind(query string) string {
	if db.Dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// AsyncCommitURL is a PostgreSQL databaseURL for a session of its own whose
// commits do not wait for their WAL flush (synchronous_commit off: a run-time
// parameter lib/pq sends in the startup packet), tagged applicationName in
// pg_stat_activity, with binary_parameters (one round trip per statement).
// For writes whose loss in a crash costs nothing but a repeat: a
// notification (the data it announces is already durable) or a webhook
// delivery's lease (an expired or lost lease only lets the delivery be
// attempted again, which at-least-once delivery allows anyway).
func AsyncCommitURL(databaseURL, applicationName string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("storage: database URL is not a valid URL")
	}
	q := u.Query()
	q.Set("application_name", applicationName)
	q.Set("synchronous_commit", "off")
	q.Set("binary_parameters", "yes")
	boundStatements(q)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// boundStatements has the server bound every statement of a session
// (Prepared lets a statement it has sent run to its end), unless the URL
// already says how.
func boundStatements(q url.Values) {
	if !q.Has("statement_timeout") && !strings.Contains(q.Get("options"), "statement_timeout") {
		q.Set("statement_timeout", DefaultStatementTimeout)
	}
}
