package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Token format (HS256 JWT):
//
//	header: {"alg":"HS256","kid":"<key id>","typ":"JWT"}
//	claims: {"iss":"<issuer>","aud":["<audience>"],"sub":"<id>",
//	         "iat":<unix s>,"exp":<unix s>,"jti":"<26 random base32 chars>",
//	         "userId":"usr_..." | "deviceId":"dev_..." | "contextId":"ses_..."}
//
// Exactly one of userId, deviceId, contextId is present; it names the kind
// (the spec's guards speak of "a JWT with userId or deviceId"), its value
// carries the kind's id prefix, and sub repeats it so generic tooling (logs,
// rate limiting by subject) needs no knowledge of our claims. A token whose
// kind field, prefix and sub disagree is rejected: the kind can never be
// inferred from a half-filled token.

// Defaults (docs/api.md, "Tokens").
const (
	DefaultUserTTL     = time.Hour
	DefaultDeviceTTL   = time.Hour
	DefaultResourceTTL = 15 * time.Minute
)

// ClockSkew is how far in the future a token's iat (or nbf) may lie. Only our
// own replicas mint tokens, so this only absorbs clock differences between
// them; it is not applied to exp, which is checked strictly, so a resource
// token never outlives the context it was clipped to.
const ClockSkew = 30 * time.Second

// MaxTokenLen bounds what Verify will parse. Our tokens are ~350 bytes; the
// bound keeps an attacker from making us base64- and JSON-decode megabytes
// before the signature check can fail.
const MaxTokenLen = 4096

var idPrefix = map[Kind]string{KindUser: "usr_", KindDevice: "dev_", KindResource: "ses_"}

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	Keys *Keyring
	// Issuer and Audience are written to and required in every token (iss, aud).
	Issuer   string
	Audience string
	// Lifetimes; zero takes the Default*TTL constants.
	UserTTL     time.Duration
	DeviceTTL   time.Duration
	ResourceTTL time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fixed clock.
	Now func() time.Time
}

// Issuer issues and verifies bearer tokens. It is safe for concurrent use.
type Issuer struct {
	keys                            *Keyring
	iss, aud                        string
	userTTL, deviceTTL, resourceTTL time.Duration
	now                             func() time.Time
	parser                          *jwt.Parser
	verified                        verifiedCache
}

// verifiedCache remembers tokens that passed Verify, so a client presenting
// the same token on every request (all of them do) costs one map lookup
// instead of base64- and JSON-decoding the token again: that decoding was
// a seventh of the CPU of a GET voucher. It is transparent because
// everything Verify checks is fixed once a token verified: the token is
// immutable, the keyring is immutable, and the only time-dependent checks
// (exp, and iat/nbf not in the future) are repeated on every hit. Only
// verified tokens enter, so garbage cannot fill it; when full it starts
// over. A revocation check, when one exists, must run on hits too.
type verifiedCache struct {
	mu sync.RWMutex
	m  map[string]verifiedToken
}

// maxVerified bounds the cache (~0.5 KiB per entry).
const maxVerified = 8192

type verifiedToken struct {
	p Principal
	// validFrom is the earliest time Verify accepts the token (iat and
	// nbf less the leeway); p.ExpiresAt is when it stops.
	validFrom time.Time
}

func (c *verifiedCache) get(token string) (verifiedToken, bool) {
	c.mu.RLock()
	v, ok := c.m[token]
	c.mu.RUnlock()
	return v, ok
}

func (c *verifiedCache) put(token string, v verifiedToken) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxVerified {
		c.m = make(map[string]verifiedToken, 256)
	}
	c.m[token] = v
	c.mu.Unlock()
}

// NewIssuer checks cfg and returns an Issuer.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	if cfg.Keys == nil {
		return nil, errors.New("auth: issuer needs a keyring")
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: issuer and audience must be set")
	}
	if cfg.UserTTL < 0 || cfg.DeviceTTL < 0 || cfg.ResourceTTL < 0 {
		return nil, errors.New("auth: token lifetimes must not be negative")
	}
	i := &Issuer{
		keys:        cfg.Keys,
		iss:         cfg.Issuer,
		aud:         cfg.Audience,
		userTTL:     orDefault(cfg.UserTTL, DefaultUserTTL),
		deviceTTL:   orDefault(cfg.DeviceTTL, DefaultDeviceTTL),
		resourceTTL: orDefault(cfg.ResourceTTL, DefaultResourceTTL),
		now:         cfg.Now,
	}
	if i.now == nil {
		i.now = time.Now
	}
	i.parser = jwt.NewParser(
		// Pinning the algorithm is what defeats alg=none and the
		// HMAC-with-a-public-key confusion.
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(i.iss),
		jwt.WithAudience(i.aud),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(ClockSkew),
		jwt.WithTimeFunc(i.now),
		jwt.WithStrictDecoding(),
	)
	return i, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// IssueUser issues a token for an email-password account (usr_ id).
func (i *Issuer) IssueUser(userID string) (string, time.Time, error) {
	return i.issue(KindUser, userID, i.userTTL, time.Time{})
}

// IssueDevice issues a token for a mobile device (dev_ id).
func (i *Issuer) IssueDevice(deviceID string) (string, time.Time, error) {
	return i.issue(KindDevice, deviceID, i.deviceTTL, time.Time{})
}

// IssueResource issues a payee's token for a voucher context (ses_ id). It
// expires at the resource lifetime or at contextExpiresAt, whichever is first:
// the token must not outlive what it grants access to. A context that has
// already expired (the sign-in raced its expiry) gives invalid_credentials,
// the code sign-in uses for an expired context code.
func (i *Issuer) IssueResource(sessionID string, contextExpiresAt time.Time) (string, time.Time, error) {
	if contextExpiresAt.IsZero() {
		return "", time.Time{}, apperr.InternalError(errors.New("auth: resource token needs the context's expiry"))
	}
	return i.issue(KindResource, sessionID, i.resourceTTL, contextExpiresAt)
}

// tokenClaims is the wire form. The kind fields are pointers so that a
// present-but-empty field counts as present (and is then rejected), rather
// than silently reading as absent.
type tokenClaims struct {
	jwt.RegisteredClaims
	UserID    *string `json:"userId,omitempty"`
	DeviceID  *string `json:"deviceId,omitempty"`
	ContextID *string `json:"contextId,omitempty"`
}

func (i *Issuer) issue(kind Kind, id string, ttl time.Duration, notAfter time.Time) (string, time.Time, error) {
	if !validID(kind, id) {
		return "", time.Time{}, apperr.InternalError(fmt.Errorf("auth: %s token for malformed id %q", kind, id))
	}
	now := i.now()
	exp := now.Add(ttl)
	if !notAfter.IsZero() && notAfter.Before(exp) {
		exp = notAfter
	}
	// JWT times are whole seconds. Truncating (never rounding up) keeps exp
	// at or before notAfter, and the returned expiresAt equal to what the
	// token says.
	exp = exp.Truncate(time.Second)
	if !exp.After(now) {
		return "", time.Time{}, apperr.New(apperr.InvalidCredentials, "the context code is unknown, closed or expired")
	}
	c := tokenClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer:    i.iss,
		Subject:   id,
		Audience:  jwt.ClaimStrings{i.aud},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
		ID:        rand.Text(),
	}}
	switch kind {
	case KindUser:
		c.UserID = &id
	case KindDevice:
		c.DeviceID = &id
	case KindResource:
		c.ContextID = &id
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	t.Header["kid"] = i.keys.current.ID
	s, err := t.SignedString(i.keys.current.Secret)
	if err != nil {
		return "", time.Time{}, apperr.InternalError(fmt.Errorf("auth: sign token: %w", err))
	}
	return s, exp.UTC(), nil
}

func validID(kind Kind, id string) bool {
	p := idPrefix[kind]
	return p != "" && len(id) > len(p) && strings.HasPrefix(id, p)
}

// Reasons a token is refused. They become the Cause of the unauthorized
// error, so logs say why, while the client sees one generic message. They
// are fixed strings on purpose: the library's own errors can quote header
// values (the alg), which are attacker-controlled.
var (
	errMalformed   = errors.New("malformed token")
	errAlgorithm   = errors.New("algorithm not allowed")
	errKeyID       = errors.New("missing or unknown key id")
	errCritical    = errors.New("unsupported critical header")
	errSignature   = errors.New("signature or algorithm invalid")
	errExpired     = errors.New("token expired")
	errNotYetValid = errors.New("token issued in the future or not yet valid")
	errAudience    = errors.New("wrong audience")
	errIssuer      = errors.New("wrong issuer")
	errMissing     = errors.New("required claim missing")
	errShape       = errors.New("claims do not name exactly one well-formed principal")
	errInvalid     = errors.New("invalid token")
)

func unauthorized(reason error) error {
	return &apperr.Error{Code: apperr.Unauthorized, Message: "bearer token missing or invalid", Cause: reason}
}

// Verify checks a bearer token and returns the principal it proves. Every
// failure is unauthorized with the same message. ctx is taken so a
// revocation lookup (by jti) can be added without touching callers.
func (i *Issuer) Verify(ctx context.Context, token string) (*Principal, error) {
	if token == "" || len(token) > MaxTokenLen {
		return nil, unauthorized(errMalformed)
	}
	if v, ok := i.verified.get(token); ok {
		now := i.now()
		switch {
		case !now.Before(v.p.ExpiresAt):
			return nil, unauthorized(errExpired)
		case now.Before(v.validFrom):
			return nil, unauthorized(errNotYetValid)
		}
		p := v.p
		return &p, nil
	}
	var c tokenClaims
	if _, err := i.parser.ParseWithClaims(token, &c, i.keyFor); err != nil {
		return nil, unauthorized(classify(err))
	}
	// The parser allowed ClockSkew past exp; we do not.
	if !i.now().Before(c.ExpiresAt.Time) {
		return nil, unauthorized(errExpired)
	}
	kind, id := c.principal()
	p := Principal{Kind: kind, ID: id, TokenID: c.ID, ExpiresAt: c.ExpiresAt.Time.UTC()}
	from := c.IssuedAt.Time
	if c.NotBefore != nil && c.NotBefore.After(from) {
		from = c.NotBefore.Time
	}
	i.verified.put(token, verifiedToken{p: p, validFrom: from.Add(-ClockSkew)})
	return &p, nil
}

// keyFor picks the secret by kid. There is deliberately no fallback to the
// current key when kid is missing or unknown: a token names its key or fails.
func (i *Issuer) keyFor(t *jwt.Token) (any, error) {
	if _, ok := t.Method.(*jwt.SigningMethodHMAC); !ok {
		return nil, errAlgorithm
	}
	// RFC 7515 §4.1.11: a recipient that does not understand a "crit"
	// extension must reject the token; we understand none.
	if _, ok := t.Header["crit"]; ok {
		return nil, errCritical
	}
	kid, ok := t.Header["kid"].(string)
	if !ok {
		return nil, errKeyID
	}
	secret, ok := i.keys.lookup(kid)
	if !ok {
		return nil, errKeyID
	}
	return secret, nil
}

// Validate is called by the parser after the signature and the registered
// claims check out (jwt.ClaimsValidator).
func (c *tokenClaims) Validate() error {
	if c.ID == "" || c.IssuedAt == nil {
		return errMissing
	}
	n := 0
	for _, f := range []*string{c.UserID, c.DeviceID, c.ContextID} {
		if f != nil {
			n++
		}
	}
	if n != 1 {
		return errShape
	}
	kind, id := c.principal()
	if !validID(kind, id) || c.Subject != id {
		return errShape
	}
	return nil
}

func (c *tokenClaims) principal() (Kind, string) {
	switch {
	case c.UserID != nil:
		return KindUser, *c.UserID
	case c.DeviceID != nil:
		return KindDevice, *c.DeviceID
	case c.ContextID != nil:
		return KindResource, *c.ContextID
	}
	return "", ""
}

func classify(err error) error {
	// Our own reasons first (keyFor and Validate errors arrive wrapped).
	for _, r := range []error{errAlgorithm, errKeyID, errCritical, errShape, errMissing} {
		if errors.Is(err, r) {
			return r
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return errExpired
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued), errors.Is(err, jwt.ErrTokenNotValidYet):
		return errNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return errAudience
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errIssuer
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errMissing
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// e.g. an alg the library does not know at all.
		return errAlgorithm
	}
	return errInvalid
}
