package paging

import (
	"errors"
	"strings"
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

func TestRuleCheck(t *testing.T) {
	n := func(i int) *int { return &i }
	cases := []struct {
		rule          Rule
		limit, offset *int
		want          Window
		bad           []string
	}{
		{VoucherRows, nil, nil, Window{Limit: 20}, nil},
		{WebhookRows, nil, nil, Window{Limit: 100}, nil},
		{VoucherRows, n(1), n(0), Window{Limit: 1}, nil},
		{VoucherRows, n(100), n(7), Window{Limit: 100, Offset: 7}, nil},
		{VoucherRows, n(0), nil, Window{}, []string{"limit"}},
		{VoucherRows, n(101), n(-1), Window{}, []string{"limit", "offset"}},
		{WebhookRows, n(101), nil, Window{}, []string{"limit"}},
		{WebhookRows, nil, n(-1), Window{}, []string{"offset"}},
	}
	for _, c := range cases {
		var v apperr.Validator
		got := c.rule.Check(&v, c.limit, c.offset)
		err := v.Err()
		if c.bad == nil {
			if err != nil || got != c.want {
				t.Fatalf("%+v.Check(%v, %v) = %+v, %v; want %+v", c.rule, c.limit, c.offset, got, err, c.want)
			}
			continue
		}
		var fields []string
		for _, d := range details(err) {
			fields = append(fields, d.Field)
		}
		if apperr.CodeOf(err) != apperr.ValidationFailed || strings.Join(fields, ",") != strings.Join(c.bad, ",") {
			t.Fatalf("%+v.Check(%v, %v): %v, fields %v; want %v", c.rule, c.limit, c.offset, err, fields, c.bad)
		}
	}
	// The published wordings.
	var v apperr.Validator
	VoucherRows.Check(&v, n(0), n(-1))
	WebhookRows.Check(&v, n(0), n(-1))
	var msgs []string
	for _, d := range details(v.Err()) {
		msgs = append(msgs, d.Reason)
	}
	want := []string{"must be an integer from 1 to 100", "must be a non-negative integer", "must be between 1 and 100", "must not be negative"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("messages %q, want %q", msgs, want)
	}
}

func details(err error) []apperr.Detail {
	var e *apperr.Error
	if !errors.As(err, &e) {
		return nil
	}
	return e.Details
}
