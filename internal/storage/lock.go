package storage

import (
	"context"
	"fmt"
)

// Advisory lock keys for work one replica at a time should do.
const (
	LockSweeper int64 = 0x7377656570 // "sweep"
)

// WithTryLock runs fn if this replica gets the PostgreSQL advisory lock key,
// and skips it (returning nil) when another replica holds it. SQLite has a
// single process, so fn always runs.
func (db *DB) WithTryLock(ctx context.Context, key int64, fn func(context.Context) error) error {
	if !db.IsPostgres() {
		return fn(ctx)
	}
	conn, err := db.SQL.Conn(ctx)
	if err != nil {
		return fmt.Errorf("storage: lock: %w", err)
	}
	defer conn.Close()
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		return fmt.Errorf("storage: lock: %w", err)
	}
	if !got {
		return nil
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key) //nolint:errcheck
	return fn(ctx)
}
