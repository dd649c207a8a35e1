package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// openPG opens a migrated, empty database; each call is another pool (a
// replica) when given the same dsn.
func openPG(t *testing.T, dsn string) *storage.DB {
	t.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, dsn, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

func postgresFactory(t *testing.T, table Table, clock func() time.Time) *Limiter {
	l := New(openPG(t, testpg.Database(t)), table, clock)
	if _, ok := l.store.(*postgresStore); !ok {
		t.Fatalf("store = %T, want *postgresStore", l.store)
	}
	return l
}

func TestPostgres(t *testing.T) { runSuite(t, postgresFactory) }

func TestPostgresReplicasShareBudget(t *testing.T) {
	dsn := testpg.Database(t)
	clk := newClock()
	a := New(openPG(t, dsn), SpecTable(), clk.Now)
	b := New(openPG(t, dsn), SpecTable(), clk.Now)
	assertConcurrent(t, []*Limiter{a, b}, 1, 5)

	// And sequentially: what one replica spends, the other sees.
	for i, l := range []*Limiter{a, b, a} {
		d := mustAllow(t, l, Finance, "caller", 2)
		if want := i < 2; d.Allowed != want {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
}

func TestPostgresSweep(t *testing.T) {
	db := openPG(t, testpg.Database(t))
	clk := newClock()
	l := New(db, SpecTable(), clk.Now)
	ctx := context.Background()
	rows := func() int {
		var n int
		if err := db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM rate_limit_buckets`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, s := range []string{"a", "b", "c"} {
		mustAllow(t, l, Negotiate, s, 1) // first check also sweeps (nothing yet)
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	clk.Advance(30 * time.Second) // not due: at most one sweep a minute
	mustAllow(t, l, Negotiate, "d", 1)
	if n := rows(); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
	// Past window end + grace, and a minute since the last sweep.
	clk.Advance(2 * time.Minute)
	mustAllow(t, l, Negotiate, "e", 1)
	if n := rows(); n != 1 {
		t.Fatalf("%d rows after sweep, want 1", n)
	}
}
