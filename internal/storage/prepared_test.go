package storage_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// A hot statement runs prepared: the server keeps it (PostgreSQL shows it in
// pg_prepared_statements of the connection), every run after the first
// reuses it, and the results are those of the plain query.
func TestPreparedStatementsRunPrepared(t *testing.T) {
	for _, d := range testdb.Dialects {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			// One connection, so the statement's session is the one asked.
			db, err := storage.Open(ctx, testdb.URL(t, d), storage.Options{MaxOpenConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q := db.Rebind("SELECT ? || '-' || ?")
			for i := range 3 {
				rows, err := db.Prepared.QueryContext(ctx, q, "a", strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				var got string
				if !rows.Next() {
					t.Fatalf("no row: %v", rows.Err())
				}
				if err := rows.Scan(&got); err != nil {
					t.Fatal(err)
				}
				rows.Close()
				if want := "a-" + strconv.Itoa(i); got != want {
					t.Fatalf("run %d: got %q, want %q", i, got, want)
				}
			}
			if n := db.Prepared.Len(); n != 1 {
				t.Fatalf("prepared texts: %d, want 1", n)
			}
			if d == storage.Postgres {
				var n int
				if err := db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", q).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Fatalf("server-side prepared statements for %q: %d, want 1", q, n)
				}
			}
			if _, err := db.Prepared.ExecContext(ctx, db.Rebind("SELECT ?"), 1); err != nil {
				t.Fatal(err)
			}
			if n := db.Prepared.Len(); n != 2 {
				t.Fatalf("prepared texts after an exec: %d, want 2", n)
			}
		})
	}
}

// A statement the database refuses fails like the plain query would, and
// PostgreSQL's refusal at prepare time keeps nothing. (The SQLite driver
// compiles at first execution, so there the text stays, failing the same
// way each time, within the bound.)
func TestPreparedStatementErrorIsNotKept(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		if _, err := db.Prepared.QueryContext(ctx, "SELECT nope FROM vouchers"); err == nil {
			t.Fatal("a statement naming a missing column ran")
		}
		if n := db.Prepared.Len(); db.IsPostgres() && n != 0 {
			t.Fatalf("prepared texts after a refused statement: %d, want 0", n)
		}
	})
}

// Past its bound the cache stops growing and statements still run,
// unprepared.
func TestPreparedStatementsAreBounded(t *testing.T) {
	db := testdb.Open(t, storage.SQLite)
	ctx := context.Background()
	for i := range 300 {
		var got int
		rows, err := db.Prepared.QueryContext(ctx, "SELECT "+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("statement %d: no row", i)
		}
		if err := rows.Scan(&got); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if got != i {
			t.Fatalf("statement %d returned %d", i, got)
		}
	}
	if n := db.Prepared.Len(); n != 256 {
		t.Fatalf("prepared texts: %d, want the bound, 256", n)
	}
}

// With preparing off (a pooler that cannot keep prepared statements), the
// same statements run as plain queries and nothing is prepared.
func TestUnpreparedRunsPlainQueries(t *testing.T) {
	for _, d := range testdb.Dialects {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			db, err := storage.Open(ctx, testdb.URL(t, d), storage.Options{MaxOpenConns: 1, Unprepared: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q := db.Rebind("SELECT ? || '-x'")
			var got string
			rows, err := db.Prepared.QueryContext(ctx, q, "a")
			if err != nil {
				t.Fatal(err)
			}
			if !rows.Next() {
				t.Fatalf("no row: %v", rows.Err())
			}
			if err := rows.Scan(&got); err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if got != "a-x" {
				t.Fatalf("got %q", got)
			}
			if n := db.Prepared.Len(); n != 0 {
				t.Fatalf("prepared texts: %d, want 0", n)
			}
			if d == storage.Postgres {
				var n int
				if err := db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Fatalf("server-side prepared statements: %d, want 0", n)
				}
			}
		})
	}
}

// An async-commit session commits without waiting for its WAL flush and
// shows itself in pg_stat_activity.
func TestAsyncCommitURL(t *testing.T) {
	dsn, err := storage.AsyncCommitURL(testdb.URL(t, storage.Postgres), "voucherd-test")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sc, app, st string
	if err := db.QueryRowContext(context.Background(), "SELECT current_setting('synchronous_commit'), current_setting('application_name'), current_setting('statement_timeout')").Scan(&sc, &app, &st); err != nil {
		t.Fatal(err)
	}
	if sc != "off" || app != "voucherd-test" || st != storage.DefaultStatementTimeout {
		t.Fatalf("synchronous_commit=%s application_name=%s statement_timeout=%s", sc, app, st)
	}
}

// A column's type changed under a prepared statement (another replica's
// migration during a rolling deploy): PostgreSQL refuses the old plan, and
// the statement is prepared again instead of failing from then on.
func TestPreparedStatementSurvivesAColumnTypeChange(t *testing.T) {
	ctx := context.Background()
	db, err := storage.Open(ctx, testdb.URL(t, storage.Postgres), storage.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.SQL.ExecContext(ctx, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.ExecContext(ctx, "INSERT INTO t VALUES (1, 7)"); err != nil {
		t.Fatal(err)
	}
	read := func() (string, error) {
		rows, err := db.Prepared.QueryContext(ctx, "SELECT v FROM t WHERE id = $1", 1)
		if err != nil {
			return "", err
		}
		defer rows.Close()
		var v string
		if !rows.Next() {
			return "", fmt.Errorf("no row: %v", rows.Err())
		}
		if err := rows.Scan(&v); err != nil {
			return "", err
		}
		return v, nil
	}
	if v, err := read(); err != nil || v != "7" {
		t.Fatalf("before: %q, %v", v, err)
	}
	if _, err := db.SQL.ExecContext(ctx, "ALTER TABLE t ALTER COLUMN v TYPE text"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if v, err := read(); err != nil || v != "7" {
			t.Fatalf("after the type change, read %d: %q, %v", i, v, err)
		}
	}
}
