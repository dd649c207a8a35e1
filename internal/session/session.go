// Package session manages payers' voucher sessions: the short-lived context
// whose 6-character code a payer shares with a payee, who signs in with it as
// a resource and reserves vouchers on it.
package session

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/vouchersession"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/revocation"
	"github.com/voucherd/voucherd/internal/storage"
)

// CodeAlphabet is Crockford's base32 without I, L, O, U: no code can be
// misread or spell a word.
const CodeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// CodeLength is the spec's context code length.
const CodeLength = 6

// Statuses as shown to callers.
const (
	StatusActive  = "ACTIVE"
	StatusClosed  = "CLOSED"
	StatusExpired = "EXPIRED"
)

// Service owns voucher sessions.
type Service struct {
	db  *storage.DB
	ttl time.Duration
	now func() time.Time
	// closed is told of each session Close ended (OnClose).
	closed func(sessionID string)
	// live remembers sessions found live, for resource tokens (Verifier).
	live *revocation.Cache[string, struct{}]
}

// NewService returns a session service; sessions live for ttl. It installs
// the sessions' read model on db's client, so build one per client.
func NewService(db *storage.DB, ttl time.Duration, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	db.VoucherSession.Intercept(readModel(now))
	return &Service{db: db, ttl: ttl, now: now, live: revocation.NewCache[string, struct{}](0, nil)}
}

// Revocations makes the sessions' cache of live sessions answer only while
// this replica hears ends, and forget a session closed on any replica (see
// internal/revocation). Without it (one process) the cache always answers
// and Close forgets locally. Call it before serving.
func (s *Service) Revocations(e *revocation.Ends) {
	s.live = revocation.NewCacheFor[string, struct{}](e, 0)
}

// readModel shows a session past its expiry as EXPIRED on every read, on
// both doors, before the sweeper has recorded it.
func readModel(now func() time.Time) ent.Interceptor {
	return ent.InterceptFunc(func(next ent.Querier) ent.Querier {
		return ent.QuerierFunc(func(ctx context.Context, q ent.Query) (ent.Value, error) {
			v, err := next.Query(ctx, q)
			if rows, ok := v.([]*ent.VoucherSession); ok {
				t := now()
				for _, r := range rows {
					if r.Status == vouchersession.StatusACTIVE && !t.Before(r.ExpiresAt) {
						r.Status = vouchersession.StatusEXPIRED
					}
				}
			}
			return v, err
		})
	})
}

// Create opens a new context for the calling payer (a registered user or device).
func (s *Service) Create(ctx context.Context) (*ent.VoucherSession, error) {
	p, err := operation.Caller(ctx, operation.CreateSession)
	if err != nil {
		return nil, err
	}
	// Millisecond precision: what the API shows is exactly what is stored
	// (PostgreSQL keeps microseconds and would round a nanosecond time).
	now := s.now().UTC().Truncate(time.Millisecond)
	for attempt := 0; attempt < 8; attempt++ {
		code, err := NewCode()
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		var created *ent.VoucherSession
		err = s.db.Tx(ctx, func(tx *ent.Tx) error {
			// A code whose session expired but was not yet swept is free again.
			if _, err := tx.VoucherSession.Update().
				Where(vouchersession.LiveCode(code), vouchersession.ExpiresAtLTE(now)).
				ClearLiveCode().Save(ctx); err != nil {
				return err
			}
			created, err = tx.VoucherSession.Create().
				SetCode(code).SetLiveCode(code).SetOwnerID(p.ID).
				SetExpiresAt(now.Add(s.ttl)).SetCreatedAt(now).SetUpdatedAt(now).
				Save(ctx)
			return err
		})
		if ent.IsConstraintError(err) {
			continue // the code is live elsewhere: draw another
		}
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		return created, nil
	}
	return nil, apperr.InternalError(fmt.Errorf("session: no free context code after 8 draws"))
}

// Get returns one of the caller's own sessions; anyone else's is not_found.
func (s *Service) Get(ctx context.Context, id string) (*ent.VoucherSession, error) {
	p, err := operation.Caller(ctx, operation.GetSession)
	if err != nil {
		return nil, err
	}
	row, err := s.db.VoucherSession.Query().
		Where(vouchersession.ID(id), vouchersession.OwnerID(p.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "voucher session not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return row, nil
}

// OnClose sets f to be told, after commit, of every session Close ends
// (not of one already closed): the app ends the session's principal with
// it on every replica (revocation.Ends.End: the resource tokens' websockets
// close, other replicas forget the session) before Close returns. Call it
// before serving.
func (s *Service) OnClose(f func(sessionID string)) { s.closed = f }

// Close ends one of the caller's sessions; its code stops working at once.
// Closing a closed session is a no-op that returns it.
func (s *Service) Close(ctx context.Context, id string) (*ent.VoucherSession, error) {
	p, err := operation.Caller(ctx, operation.CloseSession)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	n, err := s.db.VoucherSession.Update().
		Where(vouchersession.ID(id), vouchersession.OwnerID(p.ID), vouchersession.StatusEQ(vouchersession.StatusACTIVE)).
		SetStatus(vouchersession.StatusCLOSED).SetClosedAt(now).ClearLiveCode().SetUpdatedAt(now).
		Save(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if n > 0 {
		s.live.End(id)
		if s.closed != nil {
			s.closed(id)
		}
	}
	return s.Get(ctx, id)
}

// List is the one list of sessions: the caller's own. It is not ordered
// or paged: the GraphQL connection does that (newest first by default);
// REST has no session list.
func (s *Service) List(ctx context.Context) (*ent.VoucherSessionQuery, error) {
	p, err := operation.Caller(ctx, operation.ListSessions)
	if err != nil {
		return nil, err
	}
	return s.db.VoucherSession.Query().Where(vouchersession.OwnerID(p.ID)), nil
}

// NormalizeCode upper-cases a context code; ok is false when it is not 6
// characters of CodeAlphabet.
func NormalizeCode(code string) (string, bool) {
	c := strings.ToUpper(strings.TrimSpace(code))
	if len(c) != CodeLength {
		return "", false
	}
	for i := 0; i < len(c); i++ {
		if strings.IndexByte(CodeAlphabet, c[i]) < 0 {
			return "", false
		}
	}
	return c, true
}

// Live returns the live session holding code. The error says why not:
// invalid_code for a malformed, closed or expired code, not_found for a
// well-formed code no session ever had.
func (s *Service) Live(ctx context.Context, code string) (*ent.VoucherSession, error) {
	c, ok := NormalizeCode(code)
	if !ok {
		return nil, apperr.Invalid("code", "must be 6 characters of "+CodeAlphabet)
	}
	now := s.now()
	row, err := s.db.VoucherSession.Query().Where(vouchersession.LiveCode(c)).Only(ctx)
	switch {
	case err == nil && now.Before(row.ExpiresAt):
		return row, nil
	case err != nil && !ent.IsNotFound(err):
		return nil, apperr.InternalError(err)
	}
	// Not live: did the code ever exist?
	seen, err := s.db.VoucherSession.Query().Where(vouchersession.Code(c)).Exist(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if !seen {
		return nil, apperr.New(apperr.NotFound, "context not found")
	}
	return nil, apperr.New(apperr.InvalidCode, "context code is closed or expired")
}

// SweepExpired records sessions past their expiry as EXPIRED and frees their
// codes. It returns how many it recorded.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	now := s.now().UTC()
	return s.db.VoucherSession.Update().
		Where(vouchersession.StatusEQ(vouchersession.StatusACTIVE), vouchersession.ExpiresAtLTE(now)).
		SetStatus(vouchersession.StatusEXPIRED).ClearLiveCode().SetUpdatedAt(now).
		Save(ctx)
}

// NewCode draws a context code from crypto/rand.
func NewCode() (string, error) {
	var b [CodeLength]byte
	max := big.NewInt(int64(len(CodeAlphabet)))
	for i := range b {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b[i] = CodeAlphabet[n.Int64()]
	}
	return string(b[:]), nil
}

// Verifier wraps v so that a resource token ends with its session: a
// payee's token for a session that was closed (or has expired) no longer
// proves anyone, so its requests are 401 (docs/hardening.md). A session
// found live is remembered with its expiry (internal/revocation), so a
// payee's request costs no statement; a close forgets it here at once and
// on every other replica before the close is answered, and a replica that
// cannot be sure it hears closes reads the database instead. Other tokens
// pass through untouched.
func (s *Service) Verifier(v auth.Verifier) auth.Verifier {
	return sessionVerifier{next: v, s: s}
}

type sessionVerifier struct {
	next auth.Verifier
	s    *Service
}

var errSessionEnded = apperr.New(apperr.Unauthorized, "the voucher session of this token has ended")

func (sv sessionVerifier) Verify(ctx context.Context, token string) (*auth.Principal, error) {
	p, err := sv.next.Verify(ctx, token)
	if err != nil {
		return nil, err
	}
	if p.Kind != auth.KindResource {
		return p, nil
	}
	if _, ok := sv.s.live.Get(p.ID, sv.s.now()); ok {
		return p, nil
	}
	t := sv.s.live.Begin()
	expires, err := sv.s.liveUntil(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	sv.s.live.Put(t, p.ID, p.ID, struct{}{}, expires)
	return p, nil
}

// Recheck says whether p, proved earlier, still holds: for a resource
// token, whether its session is still live. It reads the database, not
// the cache: the websocket door checks again after registering a socket,
// so that a close committed meanwhile is not missed.
func (sv sessionVerifier) Recheck(ctx context.Context, p *auth.Principal) error {
	if p == nil || p.Kind != auth.KindResource {
		return nil
	}
	_, err := sv.s.liveUntil(ctx, p.ID)
	return err
}

// liveUntil returns the expiry of session id if it is live now, and
// errSessionEnded if it is not.
func (s *Service) liveUntil(ctx context.Context, id string) (time.Time, error) {
	row, err := s.db.VoucherSession.Query().
		Where(vouchersession.ID(id), vouchersession.StatusEQ(vouchersession.StatusACTIVE), vouchersession.ExpiresAtGT(s.now())).
		Select(vouchersession.FieldExpiresAt).Only(ctx)
	if ent.IsNotFound(err) {
		return time.Time{}, errSessionEnded
	}
	if err != nil {
		return time.Time{}, apperr.InternalError(err)
	}
	return row.ExpiresAt, nil
}
