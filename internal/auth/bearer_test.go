package auth

import (
	"strings"
	"testing"
)

func TestBearerToken(t *testing.T) {
	const jwtLike = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c3JfYSJ9.c2lnbmF0dXJl"
	ok := map[string]string{
		"Bearer " + jwtLike:            jwtLike,
		"bearer " + jwtLike:            jwtLike,
		"BEARER " + jwtLike:            jwtLike,
		"BeArEr " + jwtLike:            jwtLike,
		"  Bearer   " + jwtLike + "  ": jwtLike,
		"Bearer\t" + jwtLike:           jwtLike,
		"Bearer abc~+/==":              "abc~+/==",
		"Bearer a":                     "a",
	}
	for in, want := range ok {
		got, found := BearerToken(in)
		if !found || got != want {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", in, got, found, want)
		}
	}
	bad := []string{
		"",
		" ",
		"Bearer",
		"Bearer ",
		"Bearer    ",
		jwtLike,
		"Basic dXNlcjpwYXNz",
		"Token " + jwtLike,
		"Bearer: " + jwtLike,
		"Bearer" + jwtLike,
		"Bearerx " + jwtLike,
		"Bearer " + jwtLike + " extra",
		"Bearer " + jwtLike + ",Bearer " + jwtLike,
		"Bearer ==",
		"Bearer a=b",
		"Bearer tok\nInjected: header",
		"Bearer tök",
		"Bearer \"" + jwtLike + "\"",
		"Bearer " + strings.Repeat("a", MaxTokenLen+1),
	}
	for _, in := range bad {
		if got, found := BearerToken(in); found || got != "" {
			t.Errorf("BearerToken(%q) = %q, %v; want rejection", in, got, found)
		}
	}
}
