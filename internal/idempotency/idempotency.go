// Package idempotency makes a POST safe to retry: a caller that sends an
// Idempotency-Key gets the first answer to that key again, instead of the
// work being done twice (docs/api.md, "Idempotent retries").
//
// A key belongs to one caller (the token's subject, or the client address
// when the request has no token) and to one request: the SHA-256 of its
// method, path and query, and body bytes. Within 24 hours:
//   - the same key and request replays the first answer (status, body,
//     Content-Type) with `Idempotent-Replayed: true`, without calling the
//     handler;
//   - the same key with another request is 422 idempotency_key_reused;
//   - while the first request is still in flight, 409 idempotency_conflict.
//
// Answers with status 5xx or 429 are not kept (the key is freed, so the
// retry does the work); every other answer is. Keys live in the database so
// every replica sees them; the sweeper deletes expired ones. Answers carry
// tokens (sign-in) and signing secrets (webhook endpoints), so their bodies
// are sealed with the service's encryption key (internal/secretbox), bound
// to the key's row.
//
// A request holds its key with a lease: if its replica dies before the
// answer is stored, the key stays in conflict until the lease ends (Lease,
// two minutes), then a retry takes it over and does the work. The work and
// the stored answer are two commits: a replica that dies between them
// leaves the work done and the key free again once the lease ends, so such a
// retry meets the work's own state rules (a second redeem is
// already_redeemed).
package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/storage"
)

// Header names.
const (
	KeyHeader      = "Idempotency-Key"
	ReplayedHeader = "Idempotent-Replayed"
)

// MaxKeyLength bounds a key (characters; keys are printable ASCII).
const MaxKeyLength = 255

// Defaults.
const (
	// TTL is how long a key and its answer are kept.
	TTL = 24 * time.Hour
	// Lease is how long a request may hold its key before a retry may take
	// it over. It exceeds any request's run time (statements are bounded
	// to 30 s).
	Lease = 2 * time.Minute
	// maxAnswer bounds a kept answer; a larger one is not kept.
	maxAnswer = 1 << 20
)

// Store keeps keys and answers.
type Store struct {
	db    *storage.DB
	box   secretbox.Key
	log   *slog.Logger
	ttl   time.Duration
	lease time.Duration
	now   func() time.Time

	insertSQL, selectSQL, takeSQL, finishSQL, abandonSQL, sweepSQL string
}

// Options tune a Store; zero values take the defaults.
type Options struct {
	TTL, Lease time.Duration
	Now        func() time.Time
	Log        *slog.Logger
}

// New returns a Store on db whose answers are sealed with box.
func New(db *storage.DB, box secretbox.Key, opts Options) *Store {
	s := &Store{db: db, box: box, log: opts.Log, ttl: opts.TTL, lease: opts.Lease, now: opts.Now}
	if s.ttl <= 0 {
		s.ttl = TTL
	}
	if s.lease <= 0 {
		s.lease = Lease
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.insertSQL = db.Rebind(`INSERT INTO idempotency_keys (id, request_hash, status, lease, locked_until, content_type, created_at, expires_at)
		VALUES (?, ?, 0, ?, ?, '', ?, ?) ON CONFLICT (id) DO NOTHING`)
	s.selectSQL = db.Rebind(`SELECT request_hash, status, lease, locked_until, content_type, body, expires_at FROM idempotency_keys WHERE id = ?`)
	s.takeSQL = db.Rebind(`UPDATE idempotency_keys SET request_hash = ?, status = 0, lease = ?, locked_until = ?, content_type = '', body = NULL,
		created_at = ?, expires_at = ? WHERE id = ? AND lease = ?`)
	s.finishSQL = db.Rebind(`UPDATE idempotency_keys SET status = ?, content_type = ?, body = ?, locked_until = NULL WHERE id = ? AND lease = ?`)
	s.abandonSQL = db.Rebind(`DELETE FROM idempotency_keys WHERE id = ? AND lease = ?`)
	s.sweepSQL = db.Rebind(`DELETE FROM idempotency_keys WHERE expires_at < ?`)
	return s
}

// CheckKey validates a key: 1 to 255 printable ASCII characters.
func CheckKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return apperr.Invalid(KeyHeader, fmt.Sprintf("must be 1 to %d characters", MaxKeyLength))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return apperr.Invalid(KeyHeader, "must be printable ASCII characters")
		}
	}
	return nil
}

// Handle serves r under its Idempotency-Key for caller, calling next at
// most once per key and request. The caller has already checked that the
// request carries the header (without it there is nothing to do here, and
// no round trip). Errors are written with httpx.WriteError.
func (s *Store) Handle(w http.ResponseWriter, r *http.Request, caller string, next http.Handler) {
	if err := s.handle(w, r, caller, next); err != nil {
		httpx.WriteError(w, r, s.log, err)
	}
}

func (s *Store) handle(w http.ResponseWriter, r *http.Request, caller string, next http.Handler) error {
	values := r.Header.Values(KeyHeader)
	if len(values) != 1 {
		return apperr.Invalid(KeyHeader, "must be given once")
	}
	key := values[0]
	if err := CheckKey(key); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, httpx.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apperr.Newf(apperr.PayloadTooLarge, "request body exceeds %d bytes", httpx.MaxBodyBytes)
		}
		return apperr.New(apperr.ValidationFailed, "request body could not be read")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	id := rowID(caller, key)
	hash := requestHash(r, body)
	ctx := r.Context()
	lease, ans, err := s.acquire(ctx, id, hash)
	if err != nil {
		return err
	}
	if ans != nil {
		h := w.Header()
		if ans.contentType != "" {
			h.Set("Content-Type", ans.contentType)
		}
		h.Set("Content-Length", strconv.Itoa(len(ans.body)))
		h.Set(ReplayedHeader, "true")
		w.WriteHeader(ans.status)
		_, _ = w.Write(ans.body)
		return nil
	}

	rec := &recorder{ResponseWriter: w}
	// The key is released if the handler panics (the outer middleware
	// answers 500) or the answer is not to be kept. The statements outlive
	// a client that went away.
	dctx := context.WithoutCancel(ctx)
	kept := false
	defer func() {
		if !kept {
			s.exec(dctx, s.abandonSQL, id, lease)
		}
	}()
	next.ServeHTTP(rec, r)
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if status >= 500 || status == http.StatusTooManyRequests || rec.overflow {
		return nil
	}
	sealed, err := s.box.Seal(rec.body.Bytes(), []byte(id))
	if err != nil {
		s.log.ErrorContext(ctx, "idempotency: seal answer", "err", err.Error())
		return nil
	}
	if s.exec(dctx, s.finishSQL, status, rec.Header().Get("Content-Type"), sealed, id, lease) {
		kept = true
	}
	return nil
}

// answer is a kept answer.
type answer struct {
	status      int
	contentType string
	body        []byte
}

// acquire takes the key for this request (returning its lease) or returns
// the first request's answer, or the error for a key in use.
func (s *Store) acquire(ctx context.Context, id, hash string) (string, *answer, error) {
	for attempt := 0; attempt < 4; attempt++ {
		now := s.now().UTC()
		lease := newLease()
		res, err := s.db.SQL.ExecContext(ctx, s.insertSQL, id, hash, lease, now.Add(s.lease), now, now.Add(s.ttl))
		if err != nil {
			return "", nil, apperr.InternalError(fmt.Errorf("idempotency: insert: %w", err))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return lease, nil, nil
		}
		var (
			rowHash, oldLease, contentType string
			status                         int
			lockedUntil                    sql.NullTime
			body                           sql.NullString
			expiresAt                      time.Time
		)
		err = s.db.SQL.QueryRowContext(ctx, s.selectSQL, id).Scan(&rowHash, &status, &oldLease, &lockedUntil, &contentType, &body, &expiresAt)
		if errors.Is(err, sql.ErrNoRows) {
			continue // released or swept in between: try again
		}
		if err != nil {
			return "", nil, apperr.InternalError(fmt.Errorf("idempotency: read: %w", err))
		}
		expired := !expiresAt.After(now)
		abandoned := status == 0 && lockedUntil.Valid && !lockedUntil.Time.After(now)
		if !expired {
			if rowHash != hash {
				return "", nil, apperr.New(apperr.IdempotencyKeyReused,
					"this Idempotency-Key was already used with another request; use a new key for a new request")
			}
			if status == 0 && !abandoned {
				return "", nil, apperr.New(apperr.IdempotencyConflict,
					"a request with this Idempotency-Key is still in flight; retry after it finished")
			}
			if status != 0 {
				plain, err := s.box.Open(body.String, []byte(id))
				if err != nil {
					return "", nil, apperr.InternalError(fmt.Errorf("idempotency: open answer: %w", err))
				}
				return "", &answer{status: status, contentType: contentType, body: plain}, nil
			}
		}
		// Expired, or its holder is gone: take it over, unless another
		// request just did.
		res, err = s.db.SQL.ExecContext(ctx, s.takeSQL, hash, lease, now.Add(s.lease), now, now.Add(s.ttl), id, oldLease)
		if err != nil {
			return "", nil, apperr.InternalError(fmt.Errorf("idempotency: take over: %w", err))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return lease, nil, nil
		}
	}
	return "", nil, apperr.New(apperr.IdempotencyConflict, "a request with this Idempotency-Key is still in flight; retry after it finished")
}

// exec runs a finishing statement, reporting whether it changed the row;
// failures are logged (the answer was already sent).
func (s *Store) exec(ctx context.Context, query string, args ...any) bool {
	res, err := s.db.SQL.ExecContext(ctx, query, args...)
	if err != nil {
		s.log.ErrorContext(ctx, "idempotency: store", "err", err.Error())
		return false
	}
	n, _ := res.RowsAffected()
	return n == 1
}

// Sweep deletes expired keys and returns how many.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	res, err := s.db.SQL.ExecContext(ctx, s.sweepSQL, s.now().UTC())
	if err != nil {
		return 0, fmt.Errorf("idempotency: sweep: %w", err)
	}
	return res.RowsAffected()
}

// rowID names a caller's key; the separator cannot occur in a key.
func rowID(caller, key string) string {
	h := sha256.New()
	h.Write([]byte(caller))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// requestHash fingerprints a request: method, path and query, body.
func requestHash(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func newLease() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recorder passes the answer through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	overflow bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.overflow {
		if r.body.Len()+len(b) > maxAnswer {
			r.overflow = true
		} else {
			r.body.Write(b)
		}
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
