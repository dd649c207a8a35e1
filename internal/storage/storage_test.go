package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The checked-in migrations must produce exactly the ent schema: a schema
// change without `make migration` fails here.
func TestMigrationsMatchEntSchema(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		pending, err := db.PendingSchemaChanges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) > 0 {
			t.Fatalf("ent/schema has changes no migration covers; run `make migration NAME=...`:\n%v", pending)
		}
		// Migrating again is a no-op.
		if err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrentMigrationsOnPostgres(t *testing.T) {
	url := testdb.URL(t, storage.Postgres)
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			db, err := storage.Open(ctx, url, storage.Options{})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			errs <- db.Migrate(ctx)
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("replica migration: %v", err)
		}
	}
}

func TestSettingIsSharedAndStable(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		n := 0
		gen := func() (string, error) { n++; return "v" + string(rune('0'+n)), nil }
		a, err := db.Setting(ctx, "k", gen)
		if err != nil {
			t.Fatal(err)
		}
		b, err := db.Setting(ctx, "k", gen)
		if err != nil {
			t.Fatal(err)
		}
		if a != "v1" || b != "v1" {
			t.Fatalf("setting not stable: %q then %q", a, b)
		}
	})
}

func TestRebind(t *testing.T) {
	db := &storage.DB{Dialect: storage.Postgres}
	if got := db.Rebind("a = ? AND b = ?"); got != "a = $1 AND b = $2" {
		t.Fatal(got)
	}
	db.Dialect = storage.SQLite
	if got := db.Rebind("a = ?"); got != "a = ?" {
		t.Fatal(got)
	}
}

// TestSQLitePathIsTakenWhole: a file name is a path, not a URI. Characters
// a URI gives meaning to ('#' starts a fragment, '?' a query, '%' an
// escape) are part of the name: a test named "x#01" once opened /tmp/x, a
// file every run shared.
func TestSQLitePathIsTakenWhole(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a#01.db", "b?c.db", "d%41.db"} {
		path := filepath.Join(dir, name)
		db, err := storage.Open(context.Background(), "sqlite://"+path, storage.Options{})
		if err != nil {
			t.Fatalf("open %q: %v", name, err)
		}
		if _, err := db.SQL.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
			t.Fatalf("create in %q: %v", name, err)
		}
		db.Close()
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%q: the database is not at its path: %v", name, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		switch e.Name() {
		case "a#01.db", "b?c.db", "d%41.db":
		default:
			if !strings.HasSuffix(e.Name(), "-wal") && !strings.HasSuffix(e.Name(), "-shm") {
				t.Errorf("a stray file %q: a path was cut short", e.Name())
			}
		}
	}
}
