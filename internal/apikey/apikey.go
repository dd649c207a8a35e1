// Package apikey gives a business's own server a credential of its own: API
// keys with scopes. OWNER and ADMIN create and revoke them, every ACTIVE
// member lists them; a key (vsk_ + base64url of 32 random bytes) is shown
// once, at creation, and stored only as its SHA-256.
//
// The package also proves keys: Verifier turns "Authorization: Bearer
// vsk_…" into a principal of kind apikey (its subject the key's bak_ id).
// A key found live is remembered (internal/revocation), so a request with
// it costs no statement; a revocation forgets it here and on every other
// replica before it is answered, and a replica that cannot be sure it hears
// revocations reads the database instead.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/ent"
	entapikey "github.com/voucherd/voucherd/ent/apikey"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/revocation"
	"github.com/voucherd/voucherd/internal/storage"
)

// Bounds.
const (
	// Prefix starts every key.
	Prefix = "vsk_"
	// MaxPerBusiness is how many live (unrevoked) keys a business may hold.
	MaxPerBusiness = 20
	MaxNameLength  = 128
	// UsageInterval is how stale lastUsedAt may be: it is written at most
	// once per interval, however often the key is used.
	UsageInterval = time.Minute
	// maxCached bounds the cache (a few hundred bytes an entry); when full
	// it starts over.
	maxCached = 10000
)

// keyLen is the length of a key: the prefix and 43 base64url characters.
const keyLen = len(Prefix) + 43

// Options configure the Service.
type Options struct {
	// Now is the wall clock for stored times; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Service manages API keys and proves them.
type Service struct {
	db  *storage.DB
	now func() time.Time
	log *slog.Logger
	// live remembers live keys by hash; ends spreads a revocation over
	// the replicas (nil: one process, the cache forgets locally).
	live *revocation.Cache[string, *cached]
	ends *revocation.Ends
}

// cached is what a replica knows about a live key: its principal and the
// last use written (unix milliseconds), so a hit knows without a statement
// whether lastUsedAt is due.
type cached struct {
	p        *auth.Principal
	lastUsed atomic.Int64
}

// NewService returns the API key service over db.
func NewService(db *storage.DB, o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{db: db, now: o.Now, log: o.Log, live: revocation.NewCache[string, *cached](maxCached, nil)}
}

// Revocations makes the key cache answer only while this replica hears
// ends, forget a key revoked on any replica, and Revoke wait until every
// replica has forgotten it (internal/revocation). Call it before serving.
func (s *Service) Revocations(e *revocation.Ends) {
	s.live = revocation.NewCacheFor[string, *cached](e, maxCached)
	s.ends = e
}

// WithKey is a key with its secret: the answer to create-api-key, the only
// time the key is shown (REST renders it with view.OfAPIKeyWithKey;
// GraphQL's ApiKeyWithKey binds to it).
type WithKey struct {
	*ent.APIKey
	Key string
}

// CreateInput is the create-api-key body.
type CreateInput struct {
	Name   *string  `json:"name"`
	Scopes []string `json:"scopes"`
}

// Validate checks the body's own shape and bounds.
func (in CreateInput) Validate() error {
	var v apperr.Validator
	if v.Check(in.Name != nil, "name", "is required") {
		v.Text("name", *in.Name, MaxNameLength)
	}
	if v.Check(len(in.Scopes) > 0, "scopes", "must name at least one scope") {
		seen := map[string]bool{}
		for i, sc := range in.Scopes {
			field := fmt.Sprintf("scopes[%d]", i)
			switch {
			case !auth.ValidScope(sc):
				v.Add(field, "must be one of "+scopeList())
			case seen[sc]:
				v.Add(field, "is repeated")
			}
			seen[sc] = true
		}
	}
	return v.Err()
}

func scopeList() string {
	s := make([]string, len(auth.Scopes))
	for i, sc := range auth.Scopes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}

// Create makes a key for the business (OWNER or ADMIN of an ACTIVE
// business, never a key: the operation names no scope; at most
// MaxPerBusiness live keys) and returns it with the key,
// the only time it is shown.
func (s *Service) Create(ctx context.Context, businessID string, in CreateInput) (*WithKey, error) {
	b, err := business.Manager(ctx, s.db.Client, operation.CreateAPIKey, businessID)
	if err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if err := business.RequireActive(b); err != nil {
		return nil, err
	}
	key, hash, err := newKey()
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	creator := auth.FromContext(ctx).ID
	now := s.now().UTC().Truncate(time.Millisecond)
	var created *ent.APIKey
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		// The business row is the lock that keeps two creates from both
		// taking the last place.
		q := tx.Business.Query().Where(entbusiness.ID(b.ID))
		if s.db.IsPostgres() {
			q = q.ForUpdate()
		}
		if _, err := q.Only(ctx); err != nil {
			return err
		}
		n, err := tx.APIKey.Query().Where(entapikey.BusinessID(b.ID), entapikey.RevokedAtIsNil()).Count(ctx)
		if err != nil {
			return err
		}
		if n >= MaxPerBusiness {
			return apperr.Newf(apperr.LimitExceeded, "a business may have at most %d live API keys", MaxPerBusiness)
		}
		created, err = tx.APIKey.Create().SetID(ids.New(ids.APIKey)).
			SetBusinessID(b.ID).SetName(*in.Name).SetScopes(in.Scopes).
			SetKeyHash(hash).SetCreatedBy(creator).SetCreatedAt(now).
			Save(ctx)
		return err
	})
	if err != nil {
		return nil, apperr.From(err)
	}
	return &WithKey{APIKey: created, Key: key}, nil
}

// List returns the business's live keys, oldest first (any ACTIVE member).
func (s *Service) List(ctx context.Context, businessID string) ([]*ent.APIKey, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.ListAPIKeys, businessID); err != nil {
		return nil, err
	}
	rows, err := s.db.APIKey.Query().
		Where(entapikey.BusinessID(businessID), entapikey.RevokedAtIsNil()).
		Order(ent.Asc(entapikey.FieldCreatedAt), ent.Asc(entapikey.FieldID)).
		All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}

// Revoke ends a key (OWNER or ADMIN; also while the business is INACTIVE:
// taking a credential away is never refused). Revoking a revoked key
// answers it again. It returns once every replica has forgotten the key
// (revocation.Ends.End), so the caller's next request with it is refused
// wherever it lands.
func (s *Service) Revoke(ctx context.Context, businessID, id string) (*ent.APIKey, error) {
	if _, err := business.Manager(ctx, s.db.Client, operation.RevokeAPIKey, businessID); err != nil {
		return nil, err
	}
	k, err := s.db.APIKey.Query().Where(entapikey.ID(id), entapikey.BusinessID(businessID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "API key not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if k.RevokedAt != nil {
		return k, nil
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	n, err := s.db.APIKey.Update().Where(entapikey.ID(id), entapikey.RevokedAtIsNil()).SetRevokedAt(now).Save(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if s.ends != nil {
		s.ends.End(k.ID)
	} else {
		s.live.End(k.ID)
	}
	if n > 0 {
		k.RevokedAt = &now
	} else if k, err = s.db.APIKey.Get(ctx, id); err != nil {
		return nil, apperr.InternalError(err)
	}
	return k, nil
}

// newKey draws a key and returns it with the hash that is stored instead.
// SHA-256, not a password hash: a key has 256 random bits, which no one can
// enumerate however fast each guess is (internal/widget's client secrets
// say the same).
func newKey() (key, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	key = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, hashOf(key), nil
}

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// IsKey reports whether a bearer token is shaped like an API key (such a
// token is never a JWT, whose header starts "eyJ").
func IsKey(token string) bool { return strings.HasPrefix(token, Prefix) }

func wellFormed(key string) bool {
	if len(key) != keyLen || !IsKey(key) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(key[len(Prefix):])
	return err == nil
}

var errBadKey = apperr.New(apperr.Unauthorized, "API key missing, unknown or revoked")

// Verifier wraps next so that a bearer token shaped like an API key is
// proved here and any other token by next.
func (s *Service) Verifier(next auth.Verifier) auth.Verifier {
	return verifier{s: s, next: next}
}

type verifier struct {
	s    *Service
	next auth.Verifier
}

func (v verifier) Verify(ctx context.Context, token string) (*auth.Principal, error) {
	if IsKey(token) {
		return v.s.Authenticate(ctx, token)
	}
	return v.next.Verify(ctx, token)
}

// Recheck says whether p, proved earlier, still holds (the websocket door
// asks after registering a socket): for a key, whether it is still
// unrevoked; any other principal is next's to judge, when next can.
func (v verifier) Recheck(ctx context.Context, p *auth.Principal) error {
	if p.IsAPIKey() {
		live, err := v.s.db.APIKey.Query().Where(entapikey.ID(p.ID), entapikey.RevokedAtIsNil()).Exist(ctx)
		if err != nil {
			return apperr.InternalError(err)
		}
		if !live {
			return errBadKey
		}
		return nil
	}
	if r, ok := v.next.(interface {
		Recheck(context.Context, *auth.Principal) error
	}); ok {
		return r.Recheck(ctx, p)
	}
	return nil
}

// Authenticate proves a key: from the cache when this replica remembers it
// live, else from the database (and remembered). lastUsedAt is written when
// the last one written is UsageInterval old.
func (s *Service) Authenticate(ctx context.Context, key string) (*auth.Principal, error) {
	if !wellFormed(key) {
		return nil, errBadKey
	}
	hash := hashOf(key)
	c, ok := s.live.Get(hash, time.Now())
	if !ok {
		t := s.live.Begin()
		k, err := s.db.APIKey.Query().Where(entapikey.KeyHash(hash)).Only(ctx)
		if ent.IsNotFound(err) {
			return nil, errBadKey
		}
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		if k.RevokedAt != nil {
			return nil, errBadKey
		}
		scopes := make([]auth.Scope, len(k.Scopes))
		for i, sc := range k.Scopes {
			scopes[i] = auth.Scope(sc)
		}
		c = &cached{p: &auth.Principal{Kind: auth.KindAPIKey, ID: k.ID, BusinessID: k.BusinessID, Scopes: scopes}}
		if k.LastUsedAt != nil {
			c.lastUsed.Store(k.LastUsedAt.UnixMilli())
		}
		s.live.Put(t, hash, k.ID, c, time.Time{})
	}
	s.touch(ctx, c)
	return c.p, nil
}

// touch writes lastUsedAt when the last one written is UsageInterval old
// (or absent): one request a minute per replica, the one that wins the
// swap, makes the statement. The condition is in the statement too, so
// replicas racing to write it write once.
func (s *Service) touch(ctx context.Context, c *cached) {
	now := s.now().UTC().Truncate(time.Millisecond)
	last := c.lastUsed.Load()
	if last != 0 && now.UnixMilli()-last < UsageInterval.Milliseconds() {
		return
	}
	if !c.lastUsed.CompareAndSwap(last, now.UnixMilli()) {
		return
	}
	_, err := s.db.APIKey.Update().
		Where(entapikey.ID(c.p.ID), entapikey.Or(entapikey.LastUsedAtIsNil(), entapikey.LastUsedAtLT(now.Add(-UsageInterval)))).
		SetLastUsedAt(now).Save(ctx)
	if err != nil {
		// A lost usage stamp is not worth failing the request for.
		s.log.WarnContext(ctx, "apikey: lastUsedAt not written", "key", c.p.ID, "err", err.Error())
	}
}
