package storage_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func openPool(t *testing.T, url string, conns int) *storage.DB {
	t.Helper()
	db, err := storage.Open(context.Background(), url, storage.Options{MaxOpenConns: conns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func backendPID(t *testing.T, db *storage.DB) int {
	t.Helper()
	var pid int
	if err := db.SQL.QueryRowContext(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// A statement the service has sent runs to its end when its caller goes
// away: no error, the work done, and the pooled connection kept (lib/pq
// would cancel on a new connection and discard this one).
func TestSentStatementRunsToItsEnd(t *testing.T) {
	db := openPool(t, testdb.URL(t, storage.Postgres), 1)
	before := backendPID(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	rows, err := db.Prepared.QueryContext(ctx, "SELECT pg_sleep(0.3), 7")
	if err != nil {
		t.Fatalf("a statement whose caller left after sending it failed: %v", err)
	}
	var n int
	for rows.Next() {
		var slept string
		if err := rows.Scan(&slept, &n); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 7 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("got %d after %v, want 7 after the whole statement", n, time.Since(start))
	}
	if after := backendPID(t, db); after != before {
		t.Fatalf("the pooled connection was replaced (backend %d, then %d)", before, after)
	}
}

// A caller already gone sends nothing.
func TestGoneCallerSendsNothing(t *testing.T) {
	for _, d := range testdb.Dialects {
		t.Run(d, func(t *testing.T) {
			db := openPool(t, testdb.URL(t, d), 2)
			bg := context.Background()
			if _, err := db.SQL.ExecContext(bg, "CREATE TABLE probe (n INTEGER)"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			cancel()
			if _, err := db.Prepared.ExecContext(ctx, "INSERT INTO probe (n) VALUES (1)"); !errors.Is(err, context.Canceled) {
				t.Fatalf("ExecContext = %v, want context.Canceled", err)
			}
			if _, err := db.Prepared.QueryContext(ctx, "SELECT n FROM probe"); !errors.Is(err, context.Canceled) {
				t.Fatalf("QueryContext = %v, want context.Canceled", err)
			}
			var count int
			if err := db.SQL.QueryRowContext(bg, "SELECT count(*) FROM probe").Scan(&count); err != nil || count != 0 {
				t.Fatalf("probe holds %d rows (%v), want none", count, err)
			}
		})
	}
}

// Waiting for a turn honours the caller's context: with the one connection
// busy, a caller whose deadline passes gets its error then, not after the
// busy statement.
func TestWaitForATurnHonoursTheContext(t *testing.T) {
	db := openPool(t, testdb.URL(t, storage.Postgres), 1)
	done := make(chan error, 1)
	go func() {
		_, err := db.Prepared.ExecContext(context.Background(), "SELECT pg_sleep(0.6)")
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for db.SQL.Stats().InUse == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long statement never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := db.Prepared.ExecContext(ctx, "SELECT 1")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 400*time.Millisecond {
		t.Fatalf("waiting caller got %v after %v, want its deadline at about 50ms", err, time.Since(start))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// PostgreSQL bounds every statement: 30s unless the URL says otherwise.
func TestStatementTimeout(t *testing.T) {
	url := testdb.URL(t, storage.Postgres)
	show := func(db *storage.DB) string {
		var v string
		if err := db.SQL.QueryRowContext(context.Background(), "SHOW statement_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := show(openPool(t, url, 1)); got != storage.DefaultStatementTimeout {
		t.Fatalf("statement_timeout = %q, want %q", got, storage.DefaultStatementTimeout)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if got := show(openPool(t, url+sep+"statement_timeout=5s", 1)); got != "5s" {
		t.Fatalf("statement_timeout = %q with the URL's 5s", got)
	}
	// Migrations lift it for their own session only.
	db := openPool(t, url, 1)
	if err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := show(db); got != storage.DefaultStatementTimeout {
		t.Fatalf("after migrating, statement_timeout = %q", got)
	}
}
