// Package testdb gives service tests a fresh, migrated database of each kind
// the service supports, so one test body runs on SQLite and on PostgreSQL.
package testdb

import (
	"context"
	"path/filepath"
	"testing"

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
func OpenURL(t testing.TB, dialect string) (*storage.DB, string) {
	t.Helper()
	ctx := context.Background()
	url := URL(t, dialect)
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

// Each runs fn as a subtest on a fresh database of every dialect.
func Each(t *testing.T, fn func(t *testing.T, db *storage.DB)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d, func(t *testing.T) { fn(t, Open(t, d)) })
	}
}

// Main is TestMain for packages using testdb: it stops the shared
// PostgreSQL cluster after the tests.
func Main(m *testing.M) { testpg.Main(m) }
