// Package signing signs webhook deliveries the Standard Webhooks way
// (https://www.standardwebhooks.com), so receivers can verify them with any
// off-the-shelf Standard Webhooks library.
//
// The signed content is "{webhook-id}.{webhook-timestamp}.{body}"; the
// signature is base64(HMAC-SHA256(secret, content)), sent as "v1,<sig>". While
// a rotated-out secret is in its grace period the header carries one
// signature per secret, space-separated, so a receiver still configured with
// the old secret keeps verifying until it switches.
package signing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names defined by Standard Webhooks.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

const (
	// SecretPrefix marks a signing secret, as Standard Webhooks recommends,
	// so a secret pasted in the wrong place is recognisable.
	SecretPrefix = "whsec_"
	// SecretSize is the number of random bytes in secrets we issue.
	SecretSize = 32

	// Standard Webhooks asks for secrets between 24 and 64 bytes; ParseSecret
	// holds stored secrets to that so a truncated or corrupted one is caught
	// rather than used to sign.
	minSecretSize = 24
	maxSecretSize = 64

	signatureVersion = "v1"
)

// ErrInvalidSecret reports a value that is not a whsec_ secret. Its message
// never contains the value.
var ErrInvalidSecret = errors.New("signing: secret must be \"whsec_\" followed by base64 of 24 to 64 bytes")

// NewSecret returns a fresh secret: "whsec_" + base64(32 bytes from
// crypto/rand).
func NewSecret() (string, error) {
	b := make([]byte, SecretSize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("signing: generate secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ParseSecret returns the HMAC key inside a "whsec_" secret. The prefix is
// required: every secret we issue has it, and accepting bare base64 would hide
// a bug that stored the wrong value.
func ParseSecret(s string) ([]byte, error) {
	body, ok := strings.CutPrefix(s, SecretPrefix)
	// The base64 decoder skips CR and LF; refuse them so only the exact
	// canonical text is accepted.
	if !ok || strings.ContainsAny(body, "\r\n") {
		return nil, ErrInvalidSecret
	}
	key, err := base64.StdEncoding.Strict().DecodeString(body)
	if err != nil || len(key) < minSecretSize || len(key) > maxSecretSize {
		return nil, ErrInvalidSecret
	}
	return key, nil
}

// Sign returns the webhook-signature header value for one message: a
// "v1,<base64>" entry per secret, in the order given (current first, then a
// rotated secret in its grace period), separated by single spaces.
//
// Empty secrets are skipped, so callers can pass an absent previous secret
// unconditionally. With no non-empty secret the result is "", which no
// receiver will accept; callers must always have a current secret.
func Sign(msgID string, ts time.Time, body []byte, secrets ...[]byte) string {
	content := signedContent(msgID, ts, body)
	var b strings.Builder
	for _, key := range secrets {
		if len(key) == 0 {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(content)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(signatureVersion)
		b.WriteByte(',')
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// Headers returns the three Standard Webhooks headers for a delivery. msgID
// is the event id and must stay the same across retries so receivers can
// deduplicate; ts is the attempt time (receivers reject stale timestamps, so
// each retry is signed afresh).
//
// The returned header uses canonical key casing (Webhook-Id, ...); header
// names are case-insensitive on the wire.
func Headers(msgID string, ts time.Time, body []byte, secrets ...[]byte) http.Header {
	h := make(http.Header, 3)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(msgID, ts, body, secrets...))
	return h
}

func signedContent(msgID string, ts time.Time, body []byte) []byte {
	unix := strconv.FormatInt(ts.Unix(), 10)
	c := make([]byte, 0, len(msgID)+len(unix)+len(body)+2)
	c = append(c, msgID...)
	c = append(c, '.')
	c = append(c, unix...)
	c = append(c, '.')
	return append(c, body...)
}
