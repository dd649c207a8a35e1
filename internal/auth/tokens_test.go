package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/voucherd/voucherd/internal/apperr"
)

const (
	testIss = "https://voucherd.test"
	testAud = "voucherd-api"
)

var (
	secretA = bytes.Repeat([]byte("A"), 32)
	secretB = bytes.Repeat([]byte("B"), 48)
	secretC = bytes.Repeat([]byte("C"), 32)
	keyA    = Key{ID: "k-2026-01", Secret: secretA}
	keyB    = Key{ID: "k-2026-02", Secret: secretB}
	keyC    = Key{ID: "k-2026-03", Secret: secretC}
)

// clock is a settable time source; t0 has a fractional second on purpose,
// to exercise the whole-second truncation of JWT times.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

var t0 = time.Date(2026, 11, 21, 19, 6, 0, 500_000_000, time.UTC)

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }
func newClock() *clock               { return &clock{t: t0} }
func sec(t time.Time) int64          { return t.Unix() }
func b64u(b []byte) string           { return base64.RawURLEncoding.EncodeToString(b) }
func jsonB64(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b64u(b)
}

func newIssuer(t *testing.T, c *clock, current Key, previous ...Key) *Issuer {
	t.Helper()
	kr, err := NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	i, err := NewIssuer(IssuerConfig{Keys: kr, Issuer: testIss, Audience: testAud, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// craft builds a token by hand, so tests control every header and claim.
func craft(t *testing.T, header, claims map[string]any, mac func() hash.Hash, secret []byte) string {
	t.Helper()
	signing := jsonB64(t, header) + "." + jsonB64(t, claims)
	if mac == nil {
		return signing + "."
	}
	m := hmac.New(mac, secret)
	m.Write([]byte(signing))
	return signing + "." + b64u(m.Sum(nil))
}

func hs256Header(kid string) map[string]any {
	return map[string]any{"alg": "HS256", "typ": "JWT", "kid": kid}
}

// goodClaims are claims Verify accepts at t0; tests break one thing at a time.
func goodClaims() map[string]any {
	return map[string]any{
		"iss":    testIss,
		"aud":    []string{testAud},
		"sub":    "usr_alice",
		"userId": "usr_alice",
		"iat":    sec(t0),
		"exp":    sec(t0.Add(time.Hour)),
		"jti":    "jti-1",
	}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == nil {
			delete(out, k)
		} else {
			out[k] = kv[i+1]
		}
	}
	return out
}

// wantUnauthorized checks the error contract: code unauthorized, the generic
// message, no trace of the token, and (for the test's own sake) the reason.
func wantUnauthorized(t *testing.T, i *Issuer, token string, reason error) {
	t.Helper()
	p, err := i.Verify(context.Background(), token)
	if err == nil {
		t.Fatalf("Verify accepted the token: %+v", p)
	}
	if p != nil {
		t.Errorf("Verify returned a principal with an error")
	}
	if got := apperr.CodeOf(err); got != apperr.Unauthorized {
		t.Fatalf("code = %q, want unauthorized (err %v)", got, err)
	}
	var ae *apperr.Error
	errors.As(err, &ae)
	if ae.Message != "bearer token missing or invalid" {
		t.Errorf("message = %q", ae.Message)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 && strings.Contains(err.Error(), part) {
			t.Errorf("error %q echoes the token", err.Error())
		}
	}
	if reason != nil && !errors.Is(err, reason) {
		t.Errorf("reason = %v, want %v", ae.Cause, reason)
	}
}

func decodeClaims(t *testing.T, token string) (map[string]any, map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var h, c map[string]any
	for i, dst := range []*map[string]any{&h, &c} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	return h, c
}

func TestRoundTrip(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyA)
	ctxExp := t0.Add(10 * time.Minute)

	cases := []struct {
		kind  Kind
		id    string
		field string
		issue func() (string, time.Time, error)
		exp   time.Time
	}{
		{KindUser, "usr_01J9", "userId", func() (string, time.Time, error) { return i.IssueUser("usr_01J9") }, t0.Add(time.Hour)},
		{KindDevice, "dev_01J9", "deviceId", func() (string, time.Time, error) { return i.IssueDevice("dev_01J9") }, t0.Add(time.Hour)},
		{KindResource, "ses_01J9", "contextId", func() (string, time.Time, error) { return i.IssueResource("ses_01J9", ctxExp) }, t0.Add(10 * time.Minute)},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			tok, exp, err := tc.issue()
			if err != nil {
				t.Fatal(err)
			}
			wantExp := tc.exp.Truncate(time.Second)
			if !exp.Equal(wantExp) || exp.Location() != time.UTC {
				t.Errorf("expiresAt = %v, want %v UTC", exp, wantExp)
			}
			p, err := i.Verify(context.Background(), tok)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if p.Kind != tc.kind || p.ID != tc.id || !p.ExpiresAt.Equal(exp) || p.TokenID == "" {
				t.Errorf("principal = %+v", p)
			}

			h, cl := decodeClaims(t, tok)
			if h["alg"] != "HS256" || h["kid"] != keyA.ID {
				t.Errorf("header = %v", h)
			}
			if cl["iss"] != testIss || cl["sub"] != tc.id || cl[tc.field] != tc.id || cl["jti"] != p.TokenID {
				t.Errorf("claims = %v", cl)
			}
			if aud, _ := cl["aud"].([]any); len(aud) != 1 || aud[0] != testAud {
				t.Errorf("aud = %v", cl["aud"])
			}
			if cl["iat"] != float64(sec(t0)) || cl["exp"] != float64(sec(exp)) {
				t.Errorf("iat/exp = %v/%v", cl["iat"], cl["exp"])
			}
			kinds := 0
			for _, f := range []string{"userId", "deviceId", "contextId"} {
				if _, ok := cl[f]; ok {
					kinds++
				}
			}
			if kinds != 1 || len(cl) != 7 {
				t.Errorf("claims carry %d kind fields, %d claims: %v", kinds, len(cl), cl)
			}
		})
	}
}

func TestTokenIDsAreUnique(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	seen := map[string]bool{}
	for range 100 {
		tok, _, err := i.IssueUser("usr_x")
		if err != nil {
			t.Fatal(err)
		}
		p, err := i.Verify(context.Background(), tok)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p.TokenID] || len(p.TokenID) < 22 {
			t.Fatalf("jti %q repeated or short", p.TokenID)
		}
		seen[p.TokenID] = true
	}
}

func TestHandCraftedGoodTokenVerifies(t *testing.T) {
	// Guards the negative tests below: each breaks exactly one thing of this.
	i := newIssuer(t, newClock(), keyA)
	p, err := i.Verify(context.Background(), craft(t, hs256Header(keyA.ID), goodClaims(), sha256.New, secretA))
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindUser || p.ID != "usr_alice" || p.TokenID != "jti-1" {
		t.Fatalf("principal = %+v", p)
	}
}

func TestTamperedSignature(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	tok, _, _ := i.IssueUser("usr_alice")
	parts := strings.Split(tok, ".")

	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig[0] ^= 0x01
	wantUnauthorized(t, i, parts[0]+"."+parts[1]+"."+b64u(sig), errSignature)
	wantUnauthorized(t, i, parts[0]+"."+parts[1]+"."+b64u(sig[:16]), errSignature)
	wantUnauthorized(t, i, parts[0]+"."+parts[1]+".", errSignature)

	// Payload swapped for another user's, signature kept.
	_, cl := decodeClaims(t, tok)
	cl["userId"], cl["sub"] = "usr_mallory", "usr_mallory"
	wantUnauthorized(t, i, parts[0]+"."+jsonB64(t, cl)+"."+parts[2], errSignature)

	// Same kid, different secret (e.g. another environment's key with the same name).
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), goodClaims(), sha256.New, secretC), errSignature)
}

func TestExpiry(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyA)
	tok, exp, _ := i.IssueUser("usr_alice")

	c.Set(exp.Add(-time.Millisecond))
	if _, err := i.Verify(context.Background(), tok); err != nil {
		t.Fatalf("just before exp: %v", err)
	}
	// exp is strict: no leeway, not even ClockSkew.
	for _, at := range []time.Time{exp, exp.Add(time.Second), exp.Add(ClockSkew - time.Second), exp.Add(24 * time.Hour)} {
		c.Set(at)
		wantUnauthorized(t, i, tok, errExpired)
	}
}

func TestAlgNone(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	for _, alg := range []string{"none", "None", "NONE", ""} {
		h := map[string]any{"alg": alg, "typ": "JWT", "kid": keyA.ID}
		wantUnauthorized(t, i, craft(t, h, goodClaims(), nil, nil), nil)
		// With a (meaningless) signature too.
		wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), nil)
	}
	// Fully by hand, the classic form: {"alg":"none"} and an empty signature.
	bare := b64u([]byte(`{"alg":"none"}`)) + "." + jsonB64(t, goodClaims()) + "."
	wantUnauthorized(t, i, bare, nil)
	// No alg at all.
	wantUnauthorized(t, i, craft(t, map[string]any{"kid": keyA.ID}, goodClaims(), sha256.New, secretA), nil)
}

func TestOtherAlgorithms(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)

	// HS512 with the right secret and kid: a valid MAC, but not the pinned algorithm.
	h := map[string]any{"alg": "HS512", "typ": "JWT", "kid": keyA.ID}
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha512.New, secretA), errSignature)
	h["alg"] = "HS384"
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha512.New384, secretA), errSignature)
	// Unknown to the library altogether.
	h["alg"] = "hs256"
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errAlgorithm)

	// RS256, properly signed with an RSA key.
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rt := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims(goodClaims()))
	rt.Header["kid"] = keyA.ID
	rs, err := rt.SignedString(rk)
	if err != nil {
		t.Fatal(err)
	}
	wantUnauthorized(t, i, rs, errSignature)

	// RS256 header over an HMAC made with our secret (key-confusion shape).
	h["alg"] = "RS256"
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errSignature)
}

func TestAudience(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	bad := []any{
		[]string{"other-api"},
		"other-api",
		[]string{},
		"",
		[]string{""},
		[]string{strings.ToUpper(testAud)},
		42,
	}
	for _, aud := range bad {
		wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "aud", aud), sha256.New, secretA), nil)
	}
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "aud", nil), sha256.New, secretA), errMissing)
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "aud", []string{"other"}), sha256.New, secretA), errAudience)

	// A single string aud, and a list containing ours, are both valid RFC 7519 forms.
	for _, aud := range []any{testAud, []string{"other", testAud}} {
		if _, err := i.Verify(context.Background(), craft(t, hs256Header(keyA.ID), with(goodClaims(), "aud", aud), sha256.New, secretA)); err != nil {
			t.Errorf("aud %v: %v", aud, err)
		}
	}
}

func TestIssuerClaim(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "iss", "https://evil.test"), sha256.New, secretA), errIssuer)
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "iss", testIss+"/"), sha256.New, secretA), errIssuer)
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "iss", nil), sha256.New, secretA), errMissing)
	wantUnauthorized(t, i, craft(t, hs256Header(keyA.ID), with(goodClaims(), "iss", ""), sha256.New, secretA), errMissing)

	// A token minted by an issuer with the same key but another iss/aud
	// (say, a staging deployment sharing a secret by mistake).
	c := newClock()
	kr, _ := NewKeyring(keyA)
	other, err := NewIssuer(IssuerConfig{Keys: kr, Issuer: "https://staging.test", Audience: "staging-api", Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _ := other.IssueUser("usr_alice")
	wantUnauthorized(t, i, tok, nil)
}

func TestRequiredTimesAndIDs(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	sign := func(cl map[string]any) string { return craft(t, hs256Header(keyA.ID), cl, sha256.New, secretA) }

	wantUnauthorized(t, i, sign(with(goodClaims(), "exp", nil)), errMissing)
	wantUnauthorized(t, i, sign(with(goodClaims(), "iat", nil)), errMissing)
	wantUnauthorized(t, i, sign(with(goodClaims(), "jti", nil)), errMissing)
	wantUnauthorized(t, i, sign(with(goodClaims(), "jti", "")), errMissing)
	wantUnauthorized(t, i, sign(with(goodClaims(), "exp", "tomorrow")), errMalformed)
	wantUnauthorized(t, i, sign(with(goodClaims(), "exp", sec(t0))), errExpired)

	// iat may run ahead of our clock by ClockSkew (another replica's clock), no more.
	if _, err := i.Verify(context.Background(), sign(with(goodClaims(), "iat", sec(t0.Add(ClockSkew-time.Second))))); err != nil {
		t.Errorf("iat within skew: %v", err)
	}
	wantUnauthorized(t, i, sign(with(goodClaims(), "iat", sec(t0.Add(ClockSkew+2*time.Second)))), errNotYetValid)
	wantUnauthorized(t, i, sign(with(goodClaims(), "nbf", sec(t0.Add(time.Hour)))), errNotYetValid)
}

func TestKeyIDs(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	h := hs256Header("k-unknown")
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errKeyID)
	h = hs256Header("")
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errKeyID)
	delete(h, "kid")
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errKeyID)
	h["kid"] = 1
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errKeyID)
	h["kid"] = []string{keyA.ID}
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errKeyID)

	// A token from a ring whose current key we do not hold.
	tok, _, _ := newIssuer(t, newClock(), keyB).IssueUser("usr_alice")
	wantUnauthorized(t, i, tok, errKeyID)
}

func TestCriticalHeader(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	h := with(hs256Header(keyA.ID), "crit", []string{"exp"})
	wantUnauthorized(t, i, craft(t, h, goodClaims(), sha256.New, secretA), errCritical)
}

func TestKeyRotation(t *testing.T) {
	c := newClock()
	old := newIssuer(t, c, keyA)
	oldTok, _, err := old.IssueUser("usr_alice")
	if err != nil {
		t.Fatal(err)
	}

	// Step 1: B becomes current, A stays for verification.
	rotated := newIssuer(t, c, keyB, keyA)
	if p, err := rotated.Verify(context.Background(), oldTok); err != nil || p.ID != "usr_alice" {
		t.Fatalf("old token during rotation: %v, %v", p, err)
	}
	newTok, _, err := rotated.IssueDevice("dev_phone")
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := decodeClaims(t, newTok); h["kid"] != keyB.ID {
		t.Fatalf("new token kid = %v, want %s", h["kid"], keyB.ID)
	}
	if _, err := rotated.Verify(context.Background(), newTok); err != nil {
		t.Fatalf("new token: %v", err)
	}
	// Replicas still on the old ring cannot read new tokens (deploy order:
	// first add B as a previous key everywhere, then make it current).
	wantUnauthorized(t, old, newTok, errKeyID)

	// Step 2: A removed.
	final := newIssuer(t, c, keyB)
	wantUnauthorized(t, final, oldTok, errKeyID)
	if _, err := final.Verify(context.Background(), newTok); err != nil {
		t.Fatalf("new token after A removed: %v", err)
	}
	// Several previous keys.
	many := newIssuer(t, c, keyC, keyB, keyA)
	for _, tok := range []string{oldTok, newTok} {
		if _, err := many.Verify(context.Background(), tok); err != nil {
			t.Errorf("three-key ring: %v", err)
		}
	}
}

func TestResourceExpiryClipped(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyA)
	ctx := context.Background()

	// Context outlives the resource lifetime: 15 minutes.
	_, exp, err := i.IssueResource("ses_1", t0.Add(2*time.Hour))
	if err != nil || !exp.Equal(t0.Add(15*time.Minute).Truncate(time.Second)) {
		t.Fatalf("long context: exp %v, err %v", exp, err)
	}

	// Context expires first: the token ends with it (rounded down to the second).
	ctxExp := t0.Add(3*time.Minute + 700*time.Millisecond)
	tok, exp, err := i.IssueResource("ses_1", ctxExp)
	if err != nil {
		t.Fatal(err)
	}
	if exp.After(ctxExp) || ctxExp.Sub(exp) >= time.Second {
		t.Fatalf("exp %v not clipped to context expiry %v", exp, ctxExp)
	}
	if _, cl := decodeClaims(t, tok); cl["exp"] != float64(sec(exp)) {
		t.Fatalf("exp claim %v, want %d", cl["exp"], sec(exp))
	}
	c.Set(exp.Add(-time.Millisecond))
	if p, err := i.Verify(ctx, tok); err != nil || p.Kind != KindResource || p.ID != "ses_1" {
		t.Fatalf("before context expiry: %+v, %v", p, err)
	}
	c.Set(ctxExp)
	wantUnauthorized(t, i, tok, errExpired)

	// Context already over, or over within the current second: no token.
	c.Set(t0)
	for _, ce := range []time.Time{t0.Add(-time.Minute), t0, t0.Add(400 * time.Millisecond)} {
		if _, _, err := i.IssueResource("ses_1", ce); apperr.CodeOf(err) != apperr.InvalidCredentials {
			t.Errorf("context expiring %v: err %v, want invalid_credentials", ce.Sub(t0), err)
		}
	}
	if _, _, err := i.IssueResource("ses_1", time.Time{}); apperr.CodeOf(err) != apperr.Internal {
		t.Errorf("zero context expiry: %v", err)
	}
}

func TestConfiguredLifetimes(t *testing.T) {
	c := newClock()
	kr, _ := NewKeyring(keyA)
	i, err := NewIssuer(IssuerConfig{Keys: kr, Issuer: testIss, Audience: testAud, Now: c.Now,
		UserTTL: 5 * time.Minute, DeviceTTL: 24 * time.Hour, ResourceTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		issue func() (string, time.Time, error)
		ttl   time.Duration
	}{
		{func() (string, time.Time, error) { return i.IssueUser("usr_a") }, 5 * time.Minute},
		{func() (string, time.Time, error) { return i.IssueDevice("dev_a") }, 24 * time.Hour},
		{func() (string, time.Time, error) { return i.IssueResource("ses_a", t0.Add(time.Hour)) }, time.Minute},
	} {
		_, exp, err := tc.issue()
		if err != nil || !exp.Equal(t0.Add(tc.ttl).Truncate(time.Second)) {
			t.Errorf("ttl %v: exp %v, err %v", tc.ttl, exp, err)
		}
	}
}

func TestClaimShape(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	sign := func(cl map[string]any) string { return craft(t, hs256Header(keyA.ID), cl, sha256.New, secretA) }
	base := with(goodClaims(), "userId", nil, "sub", nil)

	bad := map[string]map[string]any{
		"no kind":              with(base, "sub", "usr_alice"),
		"user and device":      with(base, "sub", "usr_a", "userId", "usr_a", "deviceId", "dev_a"),
		"device and context":   with(base, "sub", "dev_a", "deviceId", "dev_a", "contextId", "ses_a"),
		"all three":            with(base, "sub", "usr_a", "userId", "usr_a", "deviceId", "dev_a", "contextId", "ses_a"),
		"empty userId":         with(base, "sub", "", "userId", ""),
		"empty userId + dev":   with(base, "sub", "dev_a", "userId", "", "deviceId", "dev_a"),
		"prefix only":          with(base, "sub", "usr_", "userId", "usr_"),
		"user with dev_ id":    with(base, "sub", "dev_a", "userId", "dev_a"),
		"device with usr_ id":  with(base, "sub", "usr_a", "deviceId", "usr_a"),
		"context with usr_ id": with(base, "sub", "usr_a", "contextId", "usr_a"),
		"sub mismatch":         with(base, "sub", "usr_b", "userId", "usr_a"),
		"sub missing":          with(base, "userId", "usr_a"),
		"legacy kind claim":    with(base, "sub", "usr_a", "kind", "user"),
	}
	for name, cl := range bad {
		t.Run(name, func(t *testing.T) { wantUnauthorized(t, i, sign(cl), errShape) })
	}
	wantUnauthorized(t, i, sign(with(base, "sub", "usr_a", "userId", 7)), errMalformed)
	// null reads as absent: this is a user token.
	p, err := i.Verify(context.Background(), sign(with(base, "sub", "usr_a", "userId", "usr_a", "deviceId", json.RawMessage("null"))))
	if err != nil || p.Kind != KindUser {
		t.Errorf("null deviceId: %+v, %v", p, err)
	}
}

func TestMalformed(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	good := craft(t, hs256Header(keyA.ID), goodClaims(), sha256.New, secretA)
	parts := strings.Split(good, ".")
	cases := map[string]string{
		"empty":              "",
		"one part":           "abc",
		"two parts":          "abc.def",
		"four parts":         good + ".x",
		"dots only":          "..",
		"padded header":      parts[0] + "=." + parts[1] + "." + parts[2],
		"std base64 sig":     parts[0] + "." + parts[1] + "." + strings.NewReplacer("-", "+", "_", "/").Replace(parts[2]) + "+/",
		"header not json":    b64u([]byte("not json")) + "." + parts[1] + "." + parts[2],
		"claims not json":    parts[0] + "." + b64u([]byte("[1,2]")) + "." + parts[2],
		"bad base64 payload": parts[0] + ".!!!." + parts[2],
		"spaces":             " " + good,
		"bearer prefix":      "Bearer " + good,
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) { wantUnauthorized(t, i, tok, nil) })
	}
	huge := craft(t, hs256Header(keyA.ID), with(goodClaims(), "pad", strings.Repeat("x", MaxTokenLen)), sha256.New, secretA)
	wantUnauthorized(t, i, huge, errMalformed)
}

func TestIssueRejectsBadIDs(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	for _, tc := range []struct {
		name  string
		issue func() (string, time.Time, error)
	}{
		{"empty user", func() (string, time.Time, error) { return i.IssueUser("") }},
		{"bare prefix", func() (string, time.Time, error) { return i.IssueUser("usr_") }},
		{"device id as user", func() (string, time.Time, error) { return i.IssueUser("dev_a") }},
		{"user id as device", func() (string, time.Time, error) { return i.IssueDevice("usr_a") }},
		{"user id as session", func() (string, time.Time, error) { return i.IssueResource("usr_a", t0.Add(time.Hour)) }},
	} {
		if tok, _, err := tc.issue(); apperr.CodeOf(err) != apperr.Internal || tok != "" {
			t.Errorf("%s: token %q, err %v; want internal", tc.name, tok, err)
		}
	}
}

func TestKeyringValidation(t *testing.T) {
	bad := []struct {
		cur  Key
		prev []Key
	}{
		{Key{ID: "k", Secret: make([]byte, 31)}, nil},
		{Key{ID: "", Secret: secretA}, nil},
		{Key{ID: strings.Repeat("k", 65), Secret: secretA}, nil},
		{Key{ID: "k 1", Secret: secretA}, nil},
		{Key{ID: "k\n", Secret: secretA}, nil},
		{keyA, []Key{{ID: keyA.ID, Secret: secretB}}},
		{keyA, []Key{{ID: "old", Secret: []byte("short")}}},
	}
	for _, b := range bad {
		if _, err := NewKeyring(b.cur, b.prev...); err == nil {
			t.Errorf("NewKeyring(%q, %d previous) accepted", b.cur.ID, len(b.prev))
		}
	}

	// The ring keeps its own copy of the secrets.
	secret := bytes.Clone(secretA)
	kr, err := NewKeyring(Key{ID: "k", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	i, _ := NewIssuer(IssuerConfig{Keys: kr, Issuer: testIss, Audience: testAud, Now: c.Now})
	tok, _, _ := i.IssueUser("usr_a")
	secret[0] ^= 0xff
	if _, err := i.Verify(context.Background(), tok); err != nil {
		t.Fatalf("ring affected by caller's buffer: %v", err)
	}
	if kr.CurrentID() != "k" {
		t.Errorf("CurrentID = %q", kr.CurrentID())
	}
}

func TestKeyFromSecret(t *testing.T) {
	a1, a2, b := KeyFromSecret(secretA), KeyFromSecret(bytes.Clone(secretA)), KeyFromSecret(secretB)
	if a1.ID != a2.ID || a1.ID == b.ID || a1.ID == "" {
		t.Fatalf("kids %q %q %q", a1.ID, a2.ID, b.ID)
	}
	if strings.Contains(a1.ID, string(secretA[:4])) {
		t.Fatal("kid contains the secret")
	}
	if _, err := NewKeyring(a1, b); err != nil {
		t.Fatalf("derived keys rejected: %v", err)
	}
}

func TestNewIssuerValidation(t *testing.T) {
	kr, _ := NewKeyring(keyA)
	for _, cfg := range []IssuerConfig{
		{Issuer: testIss, Audience: testAud},
		{Keys: kr, Audience: testAud},
		{Keys: kr, Issuer: testIss},
		{Keys: kr, Issuer: testIss, Audience: testAud, UserTTL: -time.Second},
	} {
		if _, err := NewIssuer(cfg); err == nil {
			t.Errorf("NewIssuer(%+v) accepted", cfg)
		}
	}
	// A nil clock means the real one.
	i, err := NewIssuer(IssuerConfig{Keys: kr, Issuer: testIss, Audience: testAud})
	if err != nil {
		t.Fatal(err)
	}
	tok, exp, err := i.IssueUser("usr_a")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d < 59*time.Minute || d > time.Hour {
		t.Errorf("real-clock exp in %v", d)
	}
	if _, err := i.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentIssueVerify(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyB, keyA)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			tok, _, err := i.IssueUser("usr_a")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := i.Verify(context.Background(), tok); err != nil {
				t.Error(err)
			}
			if _, err := i.Verify(context.Background(), tok+"x"); err == nil {
				t.Error("tampered token accepted")
			}
		})
	}
	wg.Wait()
}

// The principal Verify returns feeds the guards in principal.go unchanged.
func TestVerifiedPrincipalThroughGuards(t *testing.T) {
	i := newIssuer(t, newClock(), keyA)
	tok, _, _ := i.IssueResource("ses_a", t0.Add(time.Hour))
	p, err := i.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithPrincipal(context.Background(), p)
	if err := GuardAny.Err(FromContext(ctx)); err != nil {
		t.Errorf("GuardAny: %v", err)
	}
	if err := GuardRegistered.Err(FromContext(ctx)); apperr.CodeOf(err) != apperr.Forbidden {
		t.Errorf("GuardRegistered with resource token: %v", err)
	}
}

// A token verified once is remembered, and a remembered token is judged
// exactly as a fresh verification would judge it: expiry and "issued in
// the future" are checked on every use, and callers get their own copy.
func TestVerifiedTokensAreRejudgedOnEveryUse(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyA)
	tok, exp, err := i.IssueUser("usr_alice")
	if err != nil {
		t.Fatal(err)
	}
	first, err := i.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := i.verified.get(tok); !ok {
		t.Fatal("a verified token was not remembered")
	}
	first.ID = "usr_mallory" // a caller scribbling on its principal
	again, err := i.Verify(context.Background(), tok)
	if err != nil || again.ID != "usr_alice" || again.Kind != KindUser || !again.ExpiresAt.Equal(exp) {
		t.Fatalf("second verification: %+v, %v", again, err)
	}

	// Back before iat (less the leeway): not yet valid, as when parsed.
	c.Set(t0.Add(-ClockSkew - time.Second))
	wantUnauthorized(t, i, tok, errNotYetValid)
	c.Set(t0.Add(-ClockSkew + time.Second))
	if _, err := i.Verify(context.Background(), tok); err != nil {
		t.Fatalf("within the leeway before iat: %v", err)
	}
	// At exp: expired, although it was remembered.
	c.Set(exp)
	wantUnauthorized(t, i, tok, errExpired)

	// Tampered tokens never match a remembered one and are checked in full.
	c.Set(t0)
	k := len(tok) - 10
	flip := byte('A')
	if tok[k] == 'A' {
		flip = 'B'
	}
	wantUnauthorized(t, i, tok[:k]+string(flip)+tok[k+1:], errSignature)
	// An issuer with other keys (a rotation is a new Issuer) judges afresh.
	other := newIssuer(t, c, keyB)
	wantUnauthorized(t, other, tok, errKeyID)
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	c := newClock()
	i := newIssuer(t, c, keyA)
	for n := 0; n < maxVerified+10; n++ {
		tok, _, err := i.IssueDevice("dev_" + strings.Repeat("x", 1+n%7))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := i.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	i.verified.mu.RLock()
	n := len(i.verified.m)
	i.verified.mu.RUnlock()
	if n > maxVerified {
		t.Fatalf("%d tokens remembered, bound %d", n, maxVerified)
	}
}
