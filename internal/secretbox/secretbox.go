// Package secretbox encrypts small secrets at rest (webhook signing secrets)
// with AES-256-GCM under the service's encryption key.
//
// A sealed value is text so it fits any column type in SQLite and PostgreSQL:
//
//	v1:<base64 std, padded>(nonce(12) || ciphertext || tag(16))
//
// The "v1" tag names the format and algorithm, so a later format (for example
// one that names a key id for rotation) can be told apart from stored v1
// values. Until then a rotation can be done by trying the new key and then the
// old one: GCM authentication tells a wrong key apart from a right one.
//
// Callers pass associated data (the owning row's id) to Seal and Open. It is
// authenticated but not stored, so a ciphertext copied into another row fails
// to open instead of silently yielding another row's secret.
//
// Errors never contain key material, plaintext or ciphertext.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// KeySize is the key length in bytes (AES-256).
const KeySize = 32

const (
	versionV1 = "v1"
	prefixV1  = versionV1 + ":"
	// nonceSize and tagSize are GCM's standard sizes; they set the shortest
	// sealed value we can accept.
	nonceSize = 12
	tagSize   = 16
)

var (
	// ErrInvalidKey reports a key that is not exactly KeySize bytes of
	// base64, or a zero Key that was never parsed or generated.
	ErrInvalidKey = errors.New("secretbox: encryption key must be base64 of exactly 32 bytes")
	// ErrMalformed reports a sealed value that is not in a known text form.
	ErrMalformed = errors.New("secretbox: malformed sealed value")
	// ErrUnsupportedVersion reports a sealed value of a format this build
	// does not know (written by a newer release, say).
	ErrUnsupportedVersion = errors.New("secretbox: unsupported sealed value version")
	// ErrDecrypt reports a value that failed authentication: the wrong key,
	// the wrong associated data, or tampering. These are deliberately not told
	// apart.
	ErrDecrypt = errors.New("secretbox: cannot open sealed value (wrong key, wrong associated data or tampered)")
)

// Key is an AES-256-GCM key. The zero Key is unusable; obtain one from
// ParseKey or GenerateKey. Its String, GoString and LogValue are redacted so
// that a Key that strays into a log line or error does not leak.
type Key struct {
	raw  []byte
	aead cipher.AEAD
}

// ParseKey decodes the configured key: base64 of exactly 32 bytes. Standard
// and URL-safe alphabets, padded or not, are accepted and surrounding
// whitespace is ignored, because keys come from environment variables and
// files written by many tools (openssl rand -base64 32, for one).
func ParseKey(b64 string) (Key, error) {
	s := strings.TrimSpace(b64)
	if s == "" {
		return Key{}, fmt.Errorf("%w (got an empty value)", ErrInvalidKey)
	}
	var raw []byte
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding,
		base64.URLEncoding, base64.RawURLEncoding,
	} {
		if b, err := enc.DecodeString(s); err == nil {
			raw = b
			break
		}
	}
	if raw == nil {
		// The decoder's error names an offset into the key; leave it out.
		return Key{}, fmt.Errorf("%w (value is not valid base64)", ErrInvalidKey)
	}
	if len(raw) != KeySize {
		return Key{}, fmt.Errorf("%w (decoded to %d bytes)", ErrInvalidKey, len(raw))
	}
	return newKey(raw)
}

// GenerateKey returns a fresh random key, for development setups that keep a
// generated key in the database and for tests.
func GenerateKey() (Key, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, fmt.Errorf("secretbox: generate key: %w", err)
	}
	return newKey(raw)
}

func newKey(raw []byte) (Key, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return Key{}, ErrInvalidKey
	}
	// The random-nonce GCM draws a fresh 96-bit nonce from crypto/rand on
	// every Seal and prepends it; random nonces are safe for well under the
	// 2^32 messages per key this mode allows, far beyond a secret store.
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return Key{}, ErrInvalidKey
	}
	return Key{raw: raw, aead: aead}, nil
}

// Base64 returns the key in the form ParseKey accepts (standard, padded), so
// a generated development key can be persisted. Treat the result as a secret.
func (k Key) Base64() string {
	return base64.StdEncoding.EncodeToString(k.raw)
}

// Valid reports whether k was obtained from ParseKey or GenerateKey.
func (k Key) Valid() bool { return k.aead != nil }

// String is redacted.
func (k Key) String() string { return "secretbox.Key(REDACTED)" }

// GoString is redacted, so %#v does not print the key bytes.
func (k Key) GoString() string { return k.String() }

// LogValue is redacted for log/slog.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Seal encrypts plaintext bound to aad and returns the v1 text form. The same
// aad must be given to Open.
func (k Key) Seal(plaintext, aad []byte) (string, error) {
	if k.aead == nil {
		return "", ErrInvalidKey
	}
	sealed := k.aead.Seal(nil, nil, plaintext, additionalData(aad))
	return prefixV1 + base64.StdEncoding.EncodeToString(sealed), nil
}

// Open decrypts a value produced by Seal with the same key and aad.
func (k Key) Open(s string, aad []byte) ([]byte, error) {
	if k.aead == nil {
		return nil, ErrInvalidKey
	}
	version, body, ok := strings.Cut(s, ":")
	if !ok || version == "" {
		return nil, ErrMalformed
	}
	if version != versionV1 {
		return nil, ErrUnsupportedVersion
	}
	sealed, err := base64.StdEncoding.Strict().DecodeString(body)
	if err != nil || len(sealed) < nonceSize+tagSize {
		return nil, ErrMalformed
	}
	plaintext, err := k.aead.Open(nil, nil, sealed, additionalData(aad))
	if err != nil {
		return nil, ErrDecrypt
	}
	return plaintext, nil
}

// additionalData binds the format version in as well as the caller's aad, so
// a future format that reuses this key can never accept a v1 ciphertext as
// its own (or the reverse).
func additionalData(aad []byte) []byte {
	ad := make([]byte, 0, len(prefixV1)+len(aad))
	ad = append(ad, prefixV1...)
	return append(ad, aad...)
}
