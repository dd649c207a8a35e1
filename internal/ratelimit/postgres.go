package ratelimit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
)

// takeSQL spends $3 units of bucket $1 if they fit under limit $5, in one
// statement so replicas never race between reading and writing a counter.
//
// Exactness comes from the row lock ON CONFLICT takes: concurrent checks of
// one bucket queue on it, and under READ COMMITTED each re-evaluates the
// WHERE against the latest committed count. A brand-new bucket is inserted
// only if the cost fits at all, so a counter never exceeds its limit.
//
// The conditional upsert returns a row only when it spent; the second branch
// then reports the counter for the RateLimit header. FOR UPDATE makes it
// read the latest version (the one ON CONFLICT just locked) instead of the
// statement's snapshot, and NOT EXISTS becomes a one-time filter, so the
// branch costs nothing when the upsert succeeded. (PostgreSQL 18's
// RETURNING old.count would say this in one clause; we support older
// servers.)
const takeSQL = `WITH spent AS (
	INSERT INTO rate_limit_buckets AS b (id, window_start, count, expires_at)
	SELECT $1::text, $2::timestamptz, $3::bigint, $4::timestamptz
	WHERE $3::bigint <= $5::bigint
	ON CONFLICT (id) DO UPDATE SET count = b.count + EXCLUDED.count
	WHERE b.count + EXCLUDED.count <= $5::bigint
	RETURNING b.count
)
SELECT count, true FROM spent
UNION ALL
SELECT count, false FROM (
	SELECT count FROM rate_limit_buckets
	WHERE id = $1::text AND NOT EXISTS (SELECT 1 FROM spent)
	FOR UPDATE
) cur`

// sweepSQL removes buckets of finished windows. The expires_at index keeps
// it cheap; it runs at most once per sweepEvery per process.
const sweepSQL = `DELETE FROM rate_limit_buckets WHERE expires_at < $1`

// expiryGrace keeps a finished window's row a little longer than the window,
// so a replica whose clock lags slightly still finds (and respects) the
// counter instead of recreating an empty one.
const expiryGrace = time.Minute

// postgresStore keeps counters in the shared rate_limit_buckets table, so
// every replica on the database spends the same budget.
type postgresStore struct {
	db        *sql.DB
	now       func() time.Time
	nextSweep atomic.Int64 // Unix ns
}

func newPostgresStore(db *storage.DB, clock func() time.Time) *postgresStore {
	return &postgresStore{db: db.SQL, now: clock}
}

func (s *postgresStore) take(ctx context.Context, b bucket, cost, limit int) (int, bool, bool, error) {
	var (
		used  int64
		spent bool
		known = true
	)
	err := s.db.QueryRowContext(ctx, takeSQL, b.key(), b.start, cost, b.end.Add(expiryGrace), limit).Scan(&used, &spent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Denied, and the row is either absent (cost above the whole
		// limit in a fresh window) or was created after this statement's
		// snapshot: the counter is unknown, the denial is not.
		used, spent, known = 0, false, false
	case err != nil:
		return 0, false, false, fmt.Errorf("ratelimit: check %s budget: %w", b.group, err)
	}
	s.maybeSweep(ctx)
	return int(used), spent, known, nil
}

// maybeSweep deletes expired rows at most once per sweepEvery, in whichever
// request wins the race. It runs inline rather than in a goroutine so it can
// never outlive the database handle; a failure is harmless (the rows are
// never read again) and is retried at the next turn.
func (s *postgresStore) maybeSweep(ctx context.Context) {
	now := s.now()
	next := s.nextSweep.Load()
	if now.UnixNano() < next || !s.nextSweep.CompareAndSwap(next, now.Add(sweepEvery).UnixNano()) {
		return
	}
	_, _ = s.db.ExecContext(ctx, sweepSQL, now)
}
