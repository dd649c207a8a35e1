package password

import (
	"encoding/base64"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func newHasher(t *testing.T, p Params) *Hasher {
	t.Helper()
	h, err := New(p)
	if err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	return h
}

var phc = regexp.MustCompile(`^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$`)

func TestHashFormat(t *testing.T) {
	h := newHasher(t, TestParams)
	enc, err := h.Hash("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	m := phc.FindStringSubmatch(enc)
	if m == nil {
		t.Fatalf("not a PHC argon2id string: %q", enc)
	}
	if m[1] != "64" || m[2] != "1" || m[3] != "1" {
		t.Errorf("params m=%s t=%s p=%s, want 64/1/1", m[1], m[2], m[3])
	}
	salt, err := base64.RawStdEncoding.DecodeString(m[4])
	if err != nil || len(salt) != 16 {
		t.Errorf("salt: %d bytes, err %v; want 16", len(salt), err)
	}
	key, err := base64.RawStdEncoding.DecodeString(m[5])
	if err != nil || len(key) != 32 {
		t.Errorf("key: %d bytes, err %v; want 32", len(key), err)
	}
}

func TestDefaultParamsFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("default parameters cost ~30 ms per hash")
	}
	h := newHasher(t, DefaultParams)
	enc, err := h.Hash("pw-for-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(enc, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("default hash %q does not carry OWASP parameters", enc)
	}
	if ok, err := h.Verify(enc, "pw-for-defaults"); !ok || err != nil {
		t.Errorf("Verify = %v, %v", ok, err)
	}
}

func TestVerify(t *testing.T) {
	h := newHasher(t, TestParams)
	long := strings.Repeat("d", 256)
	for _, pw := range []string{"password", "pässwörd ✓ 密码", long, " leading and trailing spaces "} {
		enc, err := h.Hash(pw)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := h.Verify(enc, pw); !ok || err != nil {
			t.Errorf("Verify(right %q) = %v, %v", pw, ok, err)
		}
		for _, wrong := range []string{pw + "x", pw[:len(pw)-1], strings.ToUpper(pw), strings.TrimSpace(pw), ""} {
			if wrong == pw {
				continue
			}
			if ok, err := h.Verify(enc, wrong); ok || err != nil {
				t.Errorf("Verify(wrong %q) = %v, %v", wrong, ok, err)
			}
		}
	}
}

// The reason the service does not use bcrypt: a difference after byte 72 must count.
func TestVerifyLongPasswordsDifferLate(t *testing.T) {
	h := newHasher(t, TestParams)
	a := strings.Repeat("a", 255) + "b"
	b := strings.Repeat("a", 255) + "c"
	enc, err := h.Hash(a)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := h.Verify(enc, b); ok {
		t.Fatal("passwords differing in the 256th character verified as equal")
	}
}

func TestSaltIsRandom(t *testing.T) {
	h := newHasher(t, TestParams)
	seen := map[string]bool{}
	for range 20 {
		enc, err := h.Hash("same password")
		if err != nil {
			t.Fatal(err)
		}
		salt := strings.Split(enc, "$")[4]
		if seen[salt] {
			t.Fatalf("salt %q repeated", salt)
		}
		seen[salt] = true
	}
}

// A vector from the reference implementation:
// echo -n password | argon2 somesalt -id -t 2 -m 16 -p 4 -l 32 -e
func TestReferenceVector(t *testing.T) {
	const ref = "$argon2id$v=19$m=65536,t=2,p=4$c29tZXNhbHQ$GpZ3sK/oH9p7VIiV56G/64Zo/8GaUw434IimaPqxwCo"
	h := newHasher(t, TestParams)
	if ok, err := h.Verify(ref, "password"); !ok || err != nil {
		t.Fatalf("reference vector: Verify = %v, %v", ok, err)
	}
	if ok, err := h.Verify(ref, "Password"); ok || err != nil {
		t.Fatalf("reference vector, wrong password: Verify = %v, %v", ok, err)
	}
	if got := encode(Params{Memory: 65536, Time: 2, Threads: 4}, []byte("somesalt"), mustB64(t, "GpZ3sK/oH9p7VIiV56G/64Zo/8GaUw434IimaPqxwCo")); got != ref {
		t.Fatalf("encode = %q, want %q", got, ref)
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Parameters come from the stored hash, so raising them later keeps old hashes valid.
func TestParamsChangeKeepsOldHashes(t *testing.T) {
	oldH := newHasher(t, TestParams)
	stronger := TestParams
	stronger.Memory, stronger.Time, stronger.KeyLen, stronger.SaltLen = 256, 2, 48, 24
	newH := newHasher(t, stronger)

	oldEnc, err := oldH.Hash("pw")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := newH.Verify(oldEnc, "pw"); !ok || err != nil {
		t.Fatalf("new hasher rejects old hash: %v, %v", ok, err)
	}
	if ok, err := newH.Verify(oldEnc, "pX"); ok || err != nil {
		t.Fatalf("new hasher accepts wrong password on old hash: %v, %v", ok, err)
	}
	if r, err := newH.NeedsRehash(oldEnc); !r || err != nil {
		t.Errorf("NeedsRehash(old) = %v, %v; want true", r, err)
	}
	newEnc, _ := newH.Hash("pw")
	if r, err := newH.NeedsRehash(newEnc); r || err != nil {
		t.Errorf("NeedsRehash(current) = %v, %v; want false", r, err)
	}
	if ok, err := oldH.Verify(newEnc, "pw"); !ok || err != nil {
		t.Errorf("old hasher rejects new hash: %v, %v", ok, err)
	}
	if !strings.Contains(newEnc, "$m=256,t=2,p=1$") {
		t.Errorf("new hash %q lacks new params", newEnc)
	}
}

func TestMalformed(t *testing.T) {
	h := newHasher(t, TestParams)
	good, _ := h.Hash("pw")
	parts := strings.Split(good, "$")
	salt, key := parts[4], parts[5]
	with := func(params, s, k string) string { return "$argon2id$v=19$" + params + "$" + s + "$" + k }

	cases := map[string]string{
		"empty":          "",
		"plain text":     "pw",
		"bcrypt":         "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
		"argon2i":        strings.Replace(good, "$argon2id$", "$argon2i$", 1),
		"argon2d":        strings.Replace(good, "$argon2id$", "$argon2d$", 1),
		"version 16":     strings.Replace(good, "$v=19$", "$v=16$", 1),
		"no version":     "$argon2id$m=64,t=1,p=1$" + salt + "$" + key,
		"leading zero v": strings.Replace(good, "$v=19$", "$v=019$", 1),
		"reordered":      with("t=1,m=64,p=1", salt, key),
		"extra param":    with("m=64,t=1,p=1,keyid=x", salt, key),
		"missing param":  with("m=64,t=1", salt, key),
		"leading zero m": with("m=064,t=1,p=1", salt, key),
		"signed m":       with("m=+64,t=1,p=1", salt, key),
		"negative t":     with("m=64,t=-1,p=1", salt, key),
		"zero t":         with("m=64,t=0,p=1", salt, key),
		"zero p":         with("m=64,t=1,p=0", salt, key),
		"p overflow":     with("m=64,t=1,p=256", salt, key),
		"m below 8p":     with("m=8,t=1,p=2", salt, key),
		"m huge (DoS)":   with("m=4194304,t=1,p=1", salt, key),
		"t huge (DoS)":   with("m=64,t=1000,p=1", salt, key),
		"m overflow":     with("m=99999999999,t=1,p=1", salt, key),
		"padded salt":    with("m=64,t=1,p=1", salt+"==", key),
		"bad base64":     with("m=64,t=1,p=1", "!!!!!!!!", key),
		"url base64":     with("m=64,t=1,p=1", strings.NewReplacer("+", "-", "/", "_").Replace(salt+"+/+/"), key),
		"short salt":     with("m=64,t=1,p=1", "c2FsdA", key),
		"empty salt":     with("m=64,t=1,p=1", "", key),
		"short key":      with("m=64,t=1,p=1", salt, key[:10]),
		"empty key":      with("m=64,t=1,p=1", salt, ""),
		"trailing $":     good + "$",
		"leading junk":   "x" + good,
	}
	for name, enc := range cases {
		t.Run(name, func(t *testing.T) {
			ok, err := h.Verify(enc, "pw")
			if ok || !errors.Is(err, ErrMalformedHash) {
				t.Errorf("Verify(%q) = %v, %v; want false, ErrMalformedHash", enc, ok, err)
			}
			if _, err := h.NeedsRehash(enc); !errors.Is(err, ErrMalformedHash) {
				t.Errorf("NeedsRehash(%q) err = %v", enc, err)
			}
		})
	}
	// The base case really is well-formed, so the cases above fail for their own reason.
	if ok, err := h.Verify(with("m=64,t=1,p=1", salt, key), "pw"); !ok || err != nil {
		t.Fatalf("rebuilt good hash: %v, %v", ok, err)
	}
}

func TestTamperedHashFails(t *testing.T) {
	h := newHasher(t, TestParams)
	enc, _ := h.Hash("pw")
	parts := strings.Split(enc, "$")
	key := mustB64(t, parts[5])
	key[0] ^= 1
	parts[5] = base64.RawStdEncoding.EncodeToString(key)
	if ok, err := h.Verify(strings.Join(parts, "$"), "pw"); ok || err != nil {
		t.Fatalf("tampered key: %v, %v", ok, err)
	}
	parts = strings.Split(enc, "$")
	parts[3] = "m=128,t=1,p=1"
	if ok, err := h.Verify(strings.Join(parts, "$"), "pw"); ok || err != nil {
		t.Fatalf("tampered params: %v, %v", ok, err)
	}
}

func TestHashEmpty(t *testing.T) {
	h := newHasher(t, TestParams)
	if _, err := h.Hash(""); !errors.Is(err, ErrEmptyPassword) {
		t.Fatalf("Hash(\"\") err = %v", err)
	}
}

func TestNewRejectsBadParams(t *testing.T) {
	bad := []Params{
		{},
		{Memory: 64, Time: 1, Threads: 0, SaltLen: 16, KeyLen: 32},
		{Memory: 4, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32},
		{Memory: 64, Time: 0, Threads: 1, SaltLen: 16, KeyLen: 32},
		{Memory: 64, Time: 1, Threads: 1, SaltLen: 4, KeyLen: 32},
		{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 8},
		{Memory: 2 << 20, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32},
	}
	for _, p := range bad {
		if _, err := New(p); err == nil {
			t.Errorf("New(%+v) accepted", p)
		}
	}
	for _, p := range []Params{DefaultParams, TestParams} {
		if err := p.validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	if DefaultParams != (Params{Memory: 19456, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}) {
		t.Errorf("DefaultParams changed: %+v (update the rationale in the doc comment)", DefaultParams)
	}
}

func TestDummyVerifyUsesCurrentParams(t *testing.T) {
	p := TestParams
	p.Memory, p.Time = 512, 3
	h := newHasher(t, p)
	if r, err := h.NeedsRehash(h.dummy); r || err != nil {
		t.Fatalf("dummy hash not under current params: %v, %v", r, err)
	}
	// Never panics, whatever the input.
	h.DummyVerify("")
	h.DummyVerify(strings.Repeat("x", 256))
}

// An unknown account (DummyVerify) must cost what a wrong password costs.
// Compared by median over interleaved runs, with generous bounds: the aim is
// to catch a DummyVerify that skips the work, not to measure nanoseconds.
func TestDummyVerifyTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	p := TestParams
	p.Memory = 8 * 1024 // a few ms, large enough to dwarf scheduler noise
	h := newHasher(t, p)
	enc, _ := h.Hash("the real password")
	const n = 15
	var wrong, dummy []time.Duration
	for range n {
		s := time.Now()
		_, _ = h.Verify(enc, "a wrong password")
		wrong = append(wrong, time.Since(s))
		s = time.Now()
		h.DummyVerify("a wrong password")
		dummy = append(dummy, time.Since(s))
	}
	slices.Sort(wrong)
	slices.Sort(dummy)
	mw, md := wrong[n/2], dummy[n/2]
	if ratio := float64(md) / float64(mw); ratio < 0.5 || ratio > 2 {
		t.Errorf("median DummyVerify %v vs wrong-password Verify %v (ratio %.2f)", md, mw, ratio)
	}
}

func TestConcurrentUse(t *testing.T) {
	h := newHasher(t, TestParams)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			pw := strings.Repeat("p", i+1)
			enc, err := h.Hash(pw)
			if err != nil {
				t.Error(err)
				return
			}
			if ok, err := h.Verify(enc, pw); !ok || err != nil {
				t.Errorf("Verify: %v, %v", ok, err)
			}
			h.DummyVerify(pw)
		})
	}
	wg.Wait()
}
