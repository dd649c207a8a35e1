package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/secretbox"
)

func mustKey(t *testing.T) secretbox.Key {
	t.Helper()
	k, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := mustKey(t)
	aad := []byte("whe_123")
	for _, pt := range [][]byte{
		[]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwaaaaaaaaaaa="),
		{},
		bytes.Repeat([]byte{0xff}, 4096),
	} {
		s, err := k.Seal(pt, aad)
		if err != nil {
			t.Fatalf("Seal: %v", err)
		}
		if !strings.HasPrefix(s, "v1:") {
			t.Fatalf("sealed value %q lacks v1: prefix", s)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "v1:"))
		if err != nil {
			t.Fatalf("sealed body is not std base64: %v", err)
		}
		if want := 12 + len(pt) + 16; len(raw) != want {
			t.Fatalf("sealed length = %d, want nonce+ct+tag = %d", len(raw), want)
		}
		got, err := k.Open(s, aad)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !bytes.Equal(got, pt) {
			t.Fatalf("Open = %x, want %x", got, pt)
		}
	}
}

func TestSealUsesFreshNonce(t *testing.T) {
	k := mustKey(t)
	seen := map[string]bool{}
	nonces := map[string]bool{}
	for range 100 {
		s, err := k.Seal([]byte("same secret"), []byte("whe_1"))
		if err != nil {
			t.Fatal(err)
		}
		if seen[s] {
			t.Fatal("two seals of the same plaintext produced the same output")
		}
		seen[s] = true
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "v1:"))
		n := string(raw[:12])
		if nonces[n] {
			t.Fatal("nonce reused")
		}
		nonces[n] = true
	}
}

func TestOpenRejectsWrongAAD(t *testing.T) {
	k := mustKey(t)
	s, _ := k.Seal([]byte("secret"), []byte("whe_A"))
	for _, aad := range [][]byte{[]byte("whe_B"), nil, []byte("whe_A "), []byte("whe_")} {
		if _, err := k.Open(s, aad); !errors.Is(err, secretbox.ErrDecrypt) {
			t.Errorf("Open with aad %q: err = %v, want ErrDecrypt", aad, err)
		}
	}
}

func TestOpenRejectsWrongKey(t *testing.T) {
	k1, k2 := mustKey(t), mustKey(t)
	s, _ := k1.Seal([]byte("secret"), []byte("whe_A"))
	if _, err := k2.Open(s, []byte("whe_A")); !errors.Is(err, secretbox.ErrDecrypt) {
		t.Fatalf("err = %v, want ErrDecrypt", err)
	}
}

func TestOpenRejectsTampering(t *testing.T) {
	k := mustKey(t)
	aad := []byte("whe_A")
	s, _ := k.Seal([]byte("secret value"), aad)
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "v1:"))
	for i := range raw {
		mod := bytes.Clone(raw)
		mod[i] ^= 0x01
		ts := "v1:" + base64.StdEncoding.EncodeToString(mod)
		if _, err := k.Open(ts, aad); !errors.Is(err, secretbox.ErrDecrypt) {
			t.Fatalf("flipping byte %d: err = %v, want ErrDecrypt", i, err)
		}
	}
	// Truncation of the tag.
	short := "v1:" + base64.StdEncoding.EncodeToString(raw[:len(raw)-1])
	if _, err := k.Open(short, aad); !errors.Is(err, secretbox.ErrDecrypt) {
		t.Fatalf("truncated: err = %v, want ErrDecrypt", err)
	}
}

func TestOpenMalformed(t *testing.T) {
	k := mustKey(t)
	tooShort := "v1:" + base64.StdEncoding.EncodeToString(make([]byte, 27))
	cases := []struct {
		in   string
		want error
	}{
		{"", secretbox.ErrMalformed},
		{"nocolon", secretbox.ErrMalformed},
		{":abc", secretbox.ErrMalformed},
		{"v1:", secretbox.ErrMalformed},
		{"v1:!!!not-base64!!!", secretbox.ErrMalformed},
		{"v1:" + base64.RawStdEncoding.EncodeToString(make([]byte, 40)) + "=", secretbox.ErrMalformed},
		{tooShort, secretbox.ErrMalformed},
		{"v2:" + base64.StdEncoding.EncodeToString(make([]byte, 40)), secretbox.ErrUnsupportedVersion},
		{"V1:" + base64.StdEncoding.EncodeToString(make([]byte, 40)), secretbox.ErrUnsupportedVersion},
	}
	for _, c := range cases {
		if _, err := k.Open(c.in, nil); !errors.Is(err, c.want) {
			t.Errorf("Open(%q) err = %v, want %v", c.in, err, c.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb, 0xef, 0x01}, 11)[:32]
	forms := map[string]string{
		"std":         base64.StdEncoding.EncodeToString(raw),
		"raw std":     base64.RawStdEncoding.EncodeToString(raw),
		"url":         base64.URLEncoding.EncodeToString(raw),
		"raw url":     base64.RawURLEncoding.EncodeToString(raw),
		"trailing nl": base64.StdEncoding.EncodeToString(raw) + "\n",
		"spaces":      "  " + base64.StdEncoding.EncodeToString(raw) + " ",
	}
	var sealed string
	for name, s := range forms {
		k, err := secretbox.ParseKey(s)
		if err != nil {
			t.Fatalf("%s: ParseKey: %v", name, err)
		}
		if !k.Valid() {
			t.Fatalf("%s: key not valid", name)
		}
		if k.Base64() != base64.StdEncoding.EncodeToString(raw) {
			t.Fatalf("%s: Base64 does not round-trip", name)
		}
		// Every form is the same key: a value sealed under one opens under all.
		if sealed == "" {
			sealed, _ = k.Seal([]byte("x"), []byte("id"))
		} else if _, err := k.Open(sealed, []byte("id")); err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
	}
}

func TestParseKeyErrors(t *testing.T) {
	secretish := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("S"), 31))
	cases := []string{
		"",
		"   ",
		"not base64 at all!",
		secretish, // 31 bytes
		base64.StdEncoding.EncodeToString(make([]byte, 33)),
		base64.StdEncoding.EncodeToString(make([]byte, 16)),
		base64.StdEncoding.EncodeToString(make([]byte, 24)),
	}
	for _, in := range cases {
		k, err := secretbox.ParseKey(in)
		if !errors.Is(err, secretbox.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) err = %v, want ErrInvalidKey", in, err)
			continue
		}
		if k.Valid() {
			t.Errorf("ParseKey(%q) returned a valid key with an error", in)
		}
		if strings.TrimSpace(in) != "" && strings.Contains(err.Error(), strings.TrimSpace(in)) {
			t.Errorf("error %q echoes the key material", err)
		}
		if !strings.Contains(err.Error(), "32 bytes") {
			t.Errorf("error %q does not say what is expected", err)
		}
	}
	_, err := secretbox.ParseKey(secretish)
	if !strings.Contains(err.Error(), "31 bytes") {
		t.Errorf("error %q should say the decoded length", err)
	}
}

func TestZeroKeyIsUnusable(t *testing.T) {
	var k secretbox.Key
	if k.Valid() {
		t.Fatal("zero key reports valid")
	}
	if _, err := k.Seal([]byte("x"), nil); !errors.Is(err, secretbox.ErrInvalidKey) {
		t.Fatalf("Seal err = %v", err)
	}
	if _, err := k.Open("v1:AAAA", nil); !errors.Is(err, secretbox.ErrInvalidKey) {
		t.Fatalf("Open err = %v", err)
	}
}

func TestKeyIsRedacted(t *testing.T) {
	k := mustKey(t)
	enc := k.Base64()
	var logBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("cfg", "key", k)
	for _, out := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v", k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k),
		//lint:ignore S1025 the test is about what fmt's verbs print, %s included
		fmt.Sprintf("%s", k),
		logBuf.String(),
	} {
		if !strings.Contains(out, "REDACTED") || strings.Contains(out, enc) {
			t.Errorf("formatted key leaks or is not redacted: %q", out)
		}
	}
}

func TestErrorsDoNotLeak(t *testing.T) {
	k := mustKey(t)
	plaintext := "whsec_TOPSECRETVALUE"
	s, _ := k.Seal([]byte(plaintext), []byte("whe_A"))
	_, err := k.Open(s, []byte("whe_B"))
	if err == nil {
		t.Fatal("expected error")
	}
	for _, bad := range []string{plaintext, s, strings.TrimPrefix(s, "v1:"), k.Base64(), "whe_A", "whe_B"} {
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("error %q contains sensitive %q", err, bad)
		}
	}
}

func TestGenerateKeyDistinct(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	if a.Base64() == b.Base64() {
		t.Fatal("two generated keys are equal")
	}
	if _, err := secretbox.ParseKey(a.Base64()); err != nil {
		t.Fatalf("generated key does not parse: %v", err)
	}
}
