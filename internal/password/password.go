// Package password hashes account and device passwords with argon2id and
// stores them as PHC strings:
//
//	$argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>
//
// salt and key are unpadded standard base64, as the PHC format prescribes.
// The parameters travel in the string, so they can be raised later without
// invalidating stored hashes; NeedsRehash tells sign-in when to upgrade one.
//
// argon2id rather than bcrypt because device passwords run to 256 characters
// and bcrypt silently ignores everything after the 72nd byte.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id cost parameters.
type Params struct {
	// Memory is in KiB.
	Memory uint32
	// Time is the number of passes over the memory.
	Time uint32
	// Threads is the degree of parallelism (the PHC "p").
	Threads uint8
	// SaltLen and KeyLen are in bytes.
	SaltLen uint32
	KeyLen  uint32
}

// DefaultParams are OWASP's first argon2id recommendation (19 MiB, 2 passes,
// 1 lane), about 30 ms on one core of a current server.
//
// Why not 64 MiB: the service must stay responsive on 2 cores, and memory is
// paid per concurrent sign-in. 19 MiB x 2 passes is, by OWASP's table, as
// strong as 46 MiB x 1 pass while needing a third of the memory; sign-in is
// also rate-limited, so online guessing is bounded elsewhere and these
// parameters only have to make an offline attack on a leaked table costly.
// p=1 because on 2 cores two sign-ins running side by side is worth more than
// one sign-in finishing faster.
var DefaultParams = Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// TestParams are deliberately weak (well under a millisecond) for tests of
// code that hashes passwords. Never use them in production.
var TestParams = Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// Bounds accepted both for configured Params and for parameters read back from
// a stored hash. The upper bounds exist because a stored hash is data: a
// corrupted or planted row must not make one sign-in allocate gigabytes or
// spin for minutes.
const (
	maxMemory  = 1 << 20 // 1 GiB in KiB
	maxTime    = 16
	minSaltLen = 8
	maxSaltLen = 64
	minKeyLen  = 16
	maxKeyLen  = 64
)

// ErrMalformedHash is returned by Verify and NeedsRehash for a stored value
// that is not an argon2id PHC string this package can read.
var ErrMalformedHash = errors.New("password: malformed argon2id hash")

// ErrEmptyPassword is returned by Hash for an empty password: request
// validation should have rejected it, so hashing one is a bug upstream.
var ErrEmptyPassword = errors.New("password: empty password")

func (p Params) validate() error {
	switch {
	case p.Threads < 1:
		return errors.New("password: threads must be at least 1")
	case p.Memory < 8*uint32(p.Threads) || p.Memory > maxMemory:
		// argon2 needs at least 8 KiB per lane.
		return fmt.Errorf("password: memory must be between %d and %d KiB", 8*uint32(p.Threads), maxMemory)
	case p.Time < 1 || p.Time > maxTime:
		return fmt.Errorf("password: time must be between 1 and %d", maxTime)
	case p.SaltLen < minSaltLen || p.SaltLen > maxSaltLen:
		return fmt.Errorf("password: salt length must be between %d and %d bytes", minSaltLen, maxSaltLen)
	case p.KeyLen < minKeyLen || p.KeyLen > maxKeyLen:
		return fmt.Errorf("password: key length must be between %d and %d bytes", minKeyLen, maxKeyLen)
	}
	return nil
}

// Hasher hashes and verifies passwords. It is safe for concurrent use.
type Hasher struct {
	params Params
	// dummy is a hash of a random password under params, verified against
	// when the account does not exist so that path costs what a wrong
	// password costs.
	dummy string
	// sem caps concurrent argon2 runs. Each run holds Memory KiB for its
	// whole duration; a burst of sign-ins beyond the core count gains no
	// throughput by running at once, it only multiplies peak memory.
	sem chan struct{}
}

// New returns a Hasher for p. It computes one hash up front (the dummy used by
// DummyVerify), so construction costs one hash's time.
func New(p Params) (*Hasher, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	h := &Hasher{params: p, sem: make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))}
	dummy, err := h.Hash(rand.Text())
	if err != nil {
		return nil, err
	}
	h.dummy = dummy
	return h, nil
}

// Params returns the parameters new hashes are made with.
func (h *Hasher) Params() Params { return h.params }

// Hash returns the PHC string of pw under the Hasher's parameters and a fresh
// random salt.
func (h *Hasher) Hash(pw string) (string, error) {
	if pw == "" {
		return "", ErrEmptyPassword
	}
	p := h.params
	salt := make([]byte, p.SaltLen)
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(salt)
	key := h.derive(pw, salt, p)
	return encode(p, salt, key), nil
}

// Verify reports whether pw matches encoded, a PHC string made by Hash (with
// any parameters within bounds, not only the current ones). A malformed
// encoded is an error, not a mismatch: it means a corrupted row, which should
// be logged rather than reported as a wrong password.
func (h *Hasher) Verify(encoded, pw string) (bool, error) {
	p, salt, key, err := decode(encoded)
	if err != nil {
		return false, err
	}
	got := h.derive(pw, salt, p)
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// DummyVerify spends the time of a Verify against a hash made with the current
// parameters, and always fails. Sign-in calls it when the account does not
// exist, so that an unknown account and a wrong password cannot be told apart
// by response time. (Hashes made under older parameters take their own time;
// NeedsRehash lets sign-in move them to the current ones.)
func (h *Hasher) DummyVerify(pw string) {
	// The dummy's password is random and discarded; a match is impossible in
	// practice, and the result is ignored anyway.
	_, _ = h.Verify(h.dummy, pw)
}

// NeedsRehash reports whether encoded was made with parameters other than the
// current ones, so that sign-in, holding the plain password after a successful
// Verify, can store a fresh hash.
func (h *Hasher) NeedsRehash(encoded string) (bool, error) {
	p, _, _, err := decode(encoded)
	if err != nil {
		return false, err
	}
	return p != h.params, nil
}

func (h *Hasher) derive(pw string, salt []byte, p Params) []byte {
	h.sem <- struct{}{}
	defer func() { <-h.sem }()
	return argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
}

var b64 = base64.RawStdEncoding.Strict()

func encode(p Params, salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// decode parses exactly the form encode writes. It is strict (fixed parameter
// order, no optional PHC fields, canonical numbers and base64) because the
// only legitimate producer is this package.
func decode(encoded string) (Params, []byte, []byte, error) {
	var p Params
	parts := strings.Split(encoded, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, ErrMalformedHash
	}
	v, ok := cutUint(parts[2], "v=", 32)
	if !ok || v != argon2.Version {
		return p, nil, nil, ErrMalformedHash
	}
	ps := strings.Split(parts[3], ",")
	if len(ps) != 3 {
		return p, nil, nil, ErrMalformedHash
	}
	m, okM := cutUint(ps[0], "m=", 32)
	t, okT := cutUint(ps[1], "t=", 32)
	th, okP := cutUint(ps[2], "p=", 8)
	if !okM || !okT || !okP {
		return p, nil, nil, ErrMalformedHash
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	key, err := b64.DecodeString(parts[5])
	if err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	p = Params{Memory: uint32(m), Time: uint32(t), Threads: uint8(th), SaltLen: uint32(len(salt)), KeyLen: uint32(len(key))}
	if p.validate() != nil {
		return Params{}, nil, nil, ErrMalformedHash
	}
	return p, salt, key, nil
}

// cutUint parses "<prefix><decimal>" with no sign and no leading zeros.
func cutUint(s, prefix string, bits int) (uint64, bool) {
	d, ok := strings.CutPrefix(s, prefix)
	if !ok || d == "" || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(d, 10, bits)
	return n, err == nil
}
