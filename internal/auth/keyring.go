package auth

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// MinSecretLen is the shortest HS256 secret accepted: RFC 7518 §3.2 requires
// a key at least as long as the hash output (32 bytes for SHA-256).
const MinSecretLen = 32

// Key is one HS256 signing secret and the id (the JWT "kid" header) that
// names it in tokens.
type Key struct {
	ID     string
	Secret []byte
}

// KeyFromSecret names secret by a digest of it, so that a deployment
// configured with bare secrets (VOUCHER_JWT_SECRET) still gets stable,
// distinct kids across replicas and restarts without configuring ids. The
// kid reveals nothing useful: anyone holding a token can already test guesses
// of the secret against its signature.
func KeyFromSecret(secret []byte) Key {
	sum := sha256.Sum256(append([]byte("voucherd jwt kid\x00"), secret...))
	return Key{ID: base64.RawURLEncoding.EncodeToString(sum[:9]), Secret: secret}
}

// Keyring is the current signing key plus older keys still accepted for
// verification. Rotation: deploy a ring whose current key is new and whose
// previous keys hold the old one; once every token signed by the old key has
// expired (1 hour), drop it. A Keyring is immutable and safe for concurrent use.
type Keyring struct {
	current Key
	byID    map[string][]byte
}

// NewKeyring checks and copies the keys (a caller reusing its buffers cannot
// change them afterwards).
func NewKeyring(current Key, previous ...Key) (*Keyring, error) {
	kr := &Keyring{byID: make(map[string][]byte, 1+len(previous))}
	for i, k := range append([]Key{current}, previous...) {
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if _, dup := kr.byID[k.ID]; dup {
			return nil, fmt.Errorf("auth: key id %q appears twice", k.ID)
		}
		secret := append([]byte(nil), k.Secret...)
		kr.byID[k.ID] = secret
		if i == 0 {
			kr.current = Key{ID: k.ID, Secret: secret}
		}
	}
	return kr, nil
}

// CurrentID is the kid new tokens are signed with.
func (kr *Keyring) CurrentID() string { return kr.current.ID }

func (kr *Keyring) lookup(kid string) ([]byte, bool) {
	s, ok := kr.byID[kid]
	return s, ok
}

func checkKey(k Key) error {
	if len(k.Secret) < MinSecretLen {
		return fmt.Errorf("auth: key %q: secret is %d bytes, need at least %d", k.ID, len(k.Secret), MinSecretLen)
	}
	if k.ID == "" || len(k.ID) > 64 {
		return errors.New("auth: key id must be 1 to 64 characters")
	}
	// The kid travels in a header and ends up in logs and metrics labels;
	// keep it to a boring alphabet.
	for _, c := range k.ID {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("auth: key id %q: only letters, digits, '-', '_' and '.' allowed", k.ID)
		}
	}
	return nil
}
