package apperr

import (
	"strings"
	"testing"
)

func TestValidatorText(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"Acme", ""},
		{strings.Repeat("é", 8), ""},
		{strings.Repeat("é", 9), "must be 1 to 8 characters"},
		{"", "must be 1 to 8 characters"},
		{"   ", "must not be blank"},
		{"a\tb", "must not contain control characters"},
		{"a\x00", "must not contain control characters"},
		{"\xff", "must be valid UTF-8"},
	} {
		var v Validator
		v.Text("name", c.in, 8)
		var got string
		if v.Failed() {
			d := v.Err().(*Error).Details
			if len(d) != 1 || d[0].Field != "name" {
				t.Fatalf("%q: details %+v", c.in, d)
			}
			got = d[0].Reason
		}
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}
