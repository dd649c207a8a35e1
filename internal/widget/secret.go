package widget

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// SecretPrefix starts every client secret.
const SecretPrefix = "wcs_"

// newSecret draws a client secret (wcs_ + base64url of 32 random bytes)
// and returns it with the hash that is stored instead of it.
//
// Why SHA-256 and not a password hash (argon2, bcrypt): a slow hash exists
// to make guessing a low-entropy password expensive. A client secret has 256
// bits from crypto/rand; nobody can enumerate 2^256 candidates however fast
// each one is, so a fast hash loses nothing, and it keeps every public
// request (each carries the secret) at microseconds instead of tens of
// milliseconds of CPU. The same holds for checkout tokens (192 bits).
func newSecret() (secret, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, hashOf(secret), nil
}

// hashOf is the stored form of a secret or token: SHA-256, hex.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sameHash compares two stored-form hashes in constant time.
func sameHash(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// wellFormedSecret reports whether s looks like a client secret at all
// (anything else is refused without a database lookup).
func wellFormedSecret(s string) bool {
	if !strings.HasPrefix(s, SecretPrefix) || len(s) != len(SecretPrefix)+43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(SecretPrefix):])
	return err == nil
}

// TokenBytes is a checkout token's randomness: 192 bits.
const TokenBytes = 24

// newToken draws a checkout token (base64url of 24 random bytes) and its
// stored hash.
func newToken() (token, hash string, err error) {
	var b [TokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, hashOf(token), nil
}

// TokenHash is the stored form of a checkout token as a caller presents
// it; "" for something that cannot be a token (refused without a lookup).
func TokenHash(token string) string {
	if len(token) != base64.RawURLEncoding.EncodedLen(TokenBytes) {
		return ""
	}
	if _, err := base64.RawURLEncoding.DecodeString(token); err != nil {
		return ""
	}
	return hashOf(token)
}
