// Package testdb gives service tests a fresh, migrated database of each kind
// the service supports, so one test body runs on SQLite and on PostgreSQL.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// Dialects lists the databases every service test runs on.
var Dialects = []string{storage.SQLite, storage.Postgres}

// URL returns a fresh database URL of dialect for t (a temp SQLite file, or
// a new database on the shared throwaway PostgreSQL cluster).
func URL(t testing.TB, dialect string) string {
	t.Helper()
	if dialect == storage.Postgres {
		return testpg.Database(t)
	}
	return "sqlite://" + filepath.Join(t.TempDir(), "test.db")
}

// Open returns a fresh migrated database of dialect, closed when t ends.
func Open(t testing.TB, dialect string) *storage.DB {
	t.Helper()
	db, _ := OpenURL(t, dialect)
	return db
}

// OpenURL is Open, with the database's URL for connections a test opens
// itself (a second replica, a LISTEN session).
//
// The database is a copy of one this test process migrated once per
// dialect (a file's bytes for SQLite, a template database on PostgreSQL):
// running the migrations for every test cost a quarter of the CPU of the
// packages that open many databases (docs/testing.md). Migrate still runs
// on the copy and must find every migration applied. A database that must
// start empty (a binary migrating it at start, concurrent migrations) comes
// from URL.
func OpenURL(t testing.TB, dialect string) (*storage.DB, string) {
	t.Helper()
	ctx := context.Background()
	var url string
	switch dialect {
	case storage.Postgres:
		tmpl, err := pgTemplate(t)
		if err != nil {
			t.Fatalf("migrated template (%s): %v", dialect, err)
		}
		url = testpg.DatabaseFrom(t, tmpl)
	default:
		b, err := sqliteTemplate()
		if err != nil {
			t.Fatalf("migrated template (%s): %v", dialect, err)
		}
		path := filepath.Join(t.TempDir(), "test.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		url = "sqlite://" + path
	}
	db, err := storage.Open(ctx, url, storage.Options{MaxOpenConns: 40})
	if err != nil {
		t.Fatalf("open %s: %v", dialect, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", dialect, err)
	}
	return db, url
}

// The migrated databases OpenURL copies, made once per test process.
var templates struct {
	sqliteOnce sync.Once
	sqlite     []byte
	sqliteErr  error

	pgOnce sync.Once
	pg     *testpg.Cluster
	pgName string
	pgErr  error
}

// sqliteTemplate returns the bytes of a migrated SQLite database: migrated
// in a file of its own, its write-ahead log checkpointed into the file and
// the file closed, so the bytes are the whole database.
func sqliteTemplate() ([]byte, error) {
	templates.sqliteOnce.Do(func() {
		templates.sqlite, templates.sqliteErr = migrateSQLite()
	})
	return templates.sqlite, templates.sqliteErr
}

func migrateSQLite() ([]byte, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "testdb-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "template.db")
	db, err := storage.Open(ctx, "sqlite://"+path, storage.Options{})
	if err != nil {
		return nil, err
	}
	if err := db.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if _, err := db.SQL.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("the template's write-ahead log still holds %d bytes after closing", fi.Size())
	}
	return os.ReadFile(path)
}

// pgTemplate returns the name of a migrated database on the shared cluster
// that nobody stays connected to (PostgreSQL copies only such a database),
// dropped by Main.
func pgTemplate(t testing.TB) (string, error) {
	t.Helper()
	c := testpg.Shared(t)
	if c == nil {
		return "", errors.New("no PostgreSQL cluster")
	}
	templates.pgOnce.Do(func() {
		ctx := context.Background()
		name := fmt.Sprintf("t_template_%d", os.Getpid())
		dsn, err := c.CreateDatabase(ctx, name)
		if err != nil {
			templates.pgErr = err
			return
		}
		templates.pg, templates.pgName = c, name
		db, err := storage.Open(ctx, dsn, storage.Options{})
		if err != nil {
			templates.pgErr = err
			return
		}
		templates.pgErr = db.Migrate(ctx)
		if err := db.Close(); err != nil && templates.pgErr == nil {
			templates.pgErr = err
		}
	})
	return templates.pgName, templates.pgErr
}

// Each runs fn as a subtest on a fresh database of every dialect.
func Each(t *testing.T, fn func(t *testing.T, db *storage.DB)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d, func(t *testing.T) { fn(t, Open(t, d)) })
	}
}

// Main is TestMain for packages using testdb: it drops the PostgreSQL
// template (on a cluster testpgd shares between packages) and stops this
// process's own PostgreSQL cluster after the tests.
func Main(m *testing.M) { testpg.Main(mainRun{m}) }

type mainRun struct{ m *testing.M }

func (r mainRun) Run() int {
	code := r.m.Run()
	templates.pgOnce.Do(func() {})
	if templates.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := templates.pg.DropDatabase(ctx, templates.pgName); err != nil {
			fmt.Fprintln(os.Stderr, "testdb:", err)
		}
	}
	return code
}
