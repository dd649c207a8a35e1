package scalars

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apitime"
)

// The marshalers write what strconv.Quote of the value's text writes,
// whichever writer they are given (gqlgen's *bytes.Buffer, with or
// without spare room, or any other).
func TestMarshalersQuoteAsBefore(t *testing.T) {
	type writer interface {
		Write([]byte) (int, error)
		String() string
	}
	writers := map[string]func() writer{
		"empty buffer":   func() writer { return &bytes.Buffer{} },
		"roomy buffer":   func() writer { b := &bytes.Buffer{}; b.Grow(1 << 10); return b },
		"other writer":   func() writer { return &strings.Builder{} },
		"started writer": func() writer { b := &bytes.Buffer{}; b.WriteString(`{"a":`); return b },
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", -5*3600-30*60), time.FixedZone("y", 14*3600)}
	for name, mk := range writers {
		for _, d := range []string{"12.50", "-0.000000000000000001", "", "é\"\\\n\u2028\x00", strings.Repeat("9", 300)} {
			w := mk()
			prefix := w.String()
			MarshalDecimal(d).MarshalGQL(w)
			if got, want := w.String(), prefix+strconv.Quote(d); got != want {
				t.Errorf("%s: Decimal %q: %q, want %q", name, d, got, want)
			}
		}
		for _, z := range zones {
			for _, tm := range []time.Time{time.Unix(0, 0), time.Date(2026, 11, 27, 23, 59, 59, 999999999, z), time.Date(1, 1, 1, 0, 0, 0, 0, z), time.Date(9999, 12, 31, 1, 2, 3, 4000000, z)} {
				w := mk()
				prefix := w.String()
				MarshalTime(tm).MarshalGQL(w)
				if got, want := w.String(), prefix+strconv.Quote(apitime.Format(tm)); got != want {
					t.Errorf("%s: Time %v: %q, want %q", name, tm, got, want)
				}
			}
		}
	}
}

func TestMarshalTimeAllocations(t *testing.T) {
	tm := time.Date(2026, 11, 27, 23, 59, 59, 999999999, time.UTC)
	var b bytes.Buffer
	b.Grow(1 << 10)
	m := MarshalTime(tm)
	if n := testing.AllocsPerRun(100, func() { b.Reset(); m.MarshalGQL(&b) }); n != 0 {
		t.Fatalf("%v allocations per rendering into a buffer with room", n)
	}
}
