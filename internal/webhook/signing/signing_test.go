package signing_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/webhook/signing"
)

var body = []byte(`{"id":"evt_1","type":"deposit.confirmed","createdAt":"2026-11-21T19:06:00.000Z","data":{}}`)

func newSecret(t *testing.T) (string, []byte) {
	t.Helper()
	s, err := signing.NewSecret()
	if err != nil {
		t.Fatalf("NewSecret: %v", err)
	}
	key, err := signing.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(NewSecret()): %v", err)
	}
	return s, key
}

func verifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	return wh
}

// TestSpecVector pins the Standard Webhooks reference vector, so a change in
// what is signed (separator, timestamp form) cannot slip through.
func TestSpecVector(t *testing.T) {
	key, err := signing.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := signing.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`), key)
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestMatchesLibrarySign(t *testing.T) {
	secret, key := newSecret(t)
	ts := time.Unix(1_800_000_000, 123_000_000) // sub-second part must be dropped
	want, err := verifier(t, secret).Sign("evt_abc", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := signing.Sign("evt_abc", ts, body, key); got != want {
		t.Fatalf("Sign = %q, library = %q", got, want)
	}
}

func TestLibraryVerifies(t *testing.T) {
	secret, key := newSecret(t)
	h := signing.Headers("evt_1", time.Now(), body, key)
	if err := verifier(t, secret).Verify(body, h); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestRotationBothSecretsVerify(t *testing.T) {
	curSecret, cur := newSecret(t)
	oldSecret, old := newSecret(t)
	_, other := newSecret(t)
	otherSecret := signing.SecretPrefix + base64.StdEncoding.EncodeToString(other)

	h := signing.Headers("evt_rot", time.Now(), body, cur, old)
	sig := h.Get(signing.HeaderSignature)
	parts := strings.Split(sig, " ")
	if len(parts) != 2 {
		t.Fatalf("signature header %q: want 2 space-separated entries", sig)
	}
	for _, p := range parts {
		if !strings.HasPrefix(p, "v1,") {
			t.Fatalf("entry %q lacks v1, prefix", p)
		}
	}
	// Current first: a receiver that only checks the first entry still works
	// once it has switched to the new secret.
	if parts[0] != signing.Sign("evt_rot", mustUnix(t, h), body, cur) {
		t.Fatal("first entry is not the current secret's signature")
	}

	for name, s := range map[string]string{"current": curSecret, "previous": oldSecret} {
		if err := verifier(t, s).Verify(body, h); err != nil {
			t.Errorf("%s secret: Verify: %v", name, err)
		}
	}
	err := verifier(t, otherSecret).Verify(body, h)
	if !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("unrelated secret: err = %v, want ErrNoMatchingSignature", err)
	}
}

func TestTamperedBodyFails(t *testing.T) {
	secret, key := newSecret(t)
	h := signing.Headers("evt_1", time.Now(), body, key)
	wh := verifier(t, secret)
	tampered := []byte(strings.Replace(string(body), "confirmed", "overpaid", 1))
	if err := wh.Verify(tampered, h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("tampered body: err = %v, want ErrNoMatchingSignature", err)
	}
	// Neither the id nor the timestamp may be swapped either.
	h2 := h.Clone()
	h2.Set(signing.HeaderID, "evt_2")
	if err := wh.Verify(body, h2); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("changed id: err = %v, want ErrNoMatchingSignature", err)
	}
	h3 := h.Clone()
	h3.Set(signing.HeaderTimestamp, strconv.FormatInt(mustUnix(t, h).Unix()+1, 10))
	if err := wh.Verify(body, h3); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("changed timestamp: err = %v, want ErrNoMatchingSignature", err)
	}
}

func TestStaleTimestampFails(t *testing.T) {
	secret, key := newSecret(t)
	wh := verifier(t, secret)

	stale := time.Now().Add(-10 * time.Minute)
	h := signing.Headers("evt_1", stale, body, key)
	if err := wh.Verify(body, h); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Fatalf("stale: err = %v, want ErrMessageTooOld", err)
	}
	// The signature itself is good: only the age is wrong.
	if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
		t.Fatalf("stale, ignoring timestamp: %v", err)
	}

	future := time.Now().Add(10 * time.Minute)
	h = signing.Headers("evt_1", future, body, key)
	if err := wh.Verify(body, h); !errors.Is(err, standardwebhooks.ErrMessageTooNew) {
		t.Fatalf("future: err = %v, want ErrMessageTooNew", err)
	}
}

func TestHeaders(t *testing.T) {
	_, key := newSecret(t)
	ts := time.Unix(1_800_000_000, 999_999_999)
	h := signing.Headers("evt_xyz", ts, body, key)
	if got := h.Get("webhook-id"); got != "evt_xyz" {
		t.Errorf("webhook-id = %q", got)
	}
	if got := h.Get("webhook-timestamp"); got != "1800000000" {
		t.Errorf("webhook-timestamp = %q, want unix seconds", got)
	}
	if got := h.Get("webhook-signature"); got != signing.Sign("evt_xyz", ts, body, key) {
		t.Errorf("webhook-signature = %q", got)
	}
	if len(h) != 3 {
		t.Errorf("want exactly 3 headers, got %v", h)
	}
	// Headers are meant to be copied onto a request.
	req, _ := http.NewRequest(http.MethodPost, "https://example.com/hook", nil)
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Webhook-Signature") == "" {
		t.Error("signature not carried onto request")
	}
}

func TestSignSkipsEmptySecrets(t *testing.T) {
	_, key := newSecret(t)
	ts := time.Unix(1_800_000_000, 0)
	one := signing.Sign("evt_1", ts, body, key)
	if got := signing.Sign("evt_1", ts, body, key, nil); got != one {
		t.Errorf("nil previous secret: %q, want %q", got, one)
	}
	if got := signing.Sign("evt_1", ts, body, nil, key, []byte{}); got != one {
		t.Errorf("empty secrets around: %q, want %q", got, one)
	}
	if got := signing.Sign("evt_1", ts, body); got != "" {
		t.Errorf("no secrets: %q, want empty", got)
	}
}

func TestSignDeterministicAndKeyed(t *testing.T) {
	_, k1 := newSecret(t)
	_, k2 := newSecret(t)
	ts := time.Unix(1_800_000_000, 0)
	first, second := signing.Sign("evt_1", ts, body, k1), signing.Sign("evt_1", ts, body, k1)
	if first != second {
		t.Error("Sign is not deterministic")
	}
	if signing.Sign("evt_1", ts, body, k1) == signing.Sign("evt_1", ts, body, k2) {
		t.Error("different secrets give the same signature")
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		s, key := newSecret(t)
		if !strings.HasPrefix(s, "whsec_") {
			t.Fatalf("%q lacks whsec_", s)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(raw) != 32 {
			t.Fatalf("secret body: %d bytes, err %v", len(raw), err)
		}
		if string(raw) != string(key) {
			t.Fatal("ParseSecret does not return the random bytes")
		}
		if seen[s] {
			t.Fatal("NewSecret repeated a value")
		}
		seen[s] = true
	}
}

func TestParseSecretErrors(t *testing.T) {
	b := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for _, in := range []string{
		"",
		"whsec_",
		b(32),                   // prefix missing
		"WHSEC_" + b(32),        // prefix is case-sensitive
		"whsec_" + b(23),        // too short
		"whsec_" + b(65),        // too long
		"whsec_!!notbase64!!",   // not base64
		"whsec_" + b(32)[:43],   // padding stripped
		"whsec_" + b(32) + "\n", // trailing newline
		" whsec_" + b(32),       // leading space
		"whsec_" + strings.ReplaceAll(b(32), "A", "-"), // URL alphabet
	} {
		if _, err := signing.ParseSecret(in); !errors.Is(err, signing.ErrInvalidSecret) {
			t.Errorf("ParseSecret(%q) err = %v, want ErrInvalidSecret", in, err)
		}
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdefghij!!"))
	_, err := signing.ParseSecret(secret)
	if err == nil || strings.Contains(err.Error(), strings.TrimPrefix(secret, "whsec_")) {
		t.Errorf("error %v must exist and not echo the secret", err)
	}
	for _, n := range []int{24, 32, 64} {
		if _, err := signing.ParseSecret("whsec_" + b(n)); err != nil {
			t.Errorf("%d-byte secret refused: %v", n, err)
		}
	}
}

func mustUnix(t *testing.T, h http.Header) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(h.Get(signing.HeaderTimestamp), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(n, 0)
}
