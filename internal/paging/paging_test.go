package paging

import (
	"testing"

	"github.com/voucherd/voucherd/internal/apperr"
)

func TestArgs(t *testing.T) {
	n := func(i int) *int { return &i }
	cases := []struct {
		first, last *int
		want        *int
		ok          bool
	}{
		{nil, nil, n(DefaultPageSize), true},
		{n(0), nil, n(0), true},
		{n(100), nil, n(100), true},
		{nil, n(5), nil, true},
		{n(101), nil, nil, false},
		{n(-1), nil, nil, false},
		{nil, n(101), nil, false},
		{n(1), n(1), nil, false},
	}
	for _, c := range cases {
		got, err := Args(c.first, c.last)
		if c.ok != (err == nil) {
			t.Fatalf("Args(%v, %v) error = %v", c.first, c.last, err)
		}
		if !c.ok {
			if apperr.CodeOf(err) != apperr.ValidationFailed {
				t.Fatalf("code %v", err)
			}
			continue
		}
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Fatalf("Args(%v, %v) = %v, want %v", c.first, c.last, got, c.want)
		}
	}
}
