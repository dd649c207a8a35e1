// Package apitime is the API's timestamp: RFC 3339 in UTC with exactly three
// fraction digits ("2026-11-21T19:06:00.000Z") on REST and GraphQL alike.
package apitime

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Layout is the one timestamp format of the API.
const Layout = "2006-01-02T15:04:05.000Z07:00"

// Time marshals as Layout.
type Time time.Time

// From converts t (to UTC).
func From(t time.Time) Time { return Time(t.UTC()) }

// Ptr converts an optional time.
func Ptr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := From(*t)
	return &v
}

// Format renders t in Layout.
func Format(t time.Time) string { return t.UTC().Format(Layout) }

// Std returns the time.Time.
func (t Time) Std() time.Time { return time.Time(t) }

// MarshalJSON writes the timestamp as a JSON string.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(Layout)+2)
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, Layout)
	return append(b, '"'), nil
}

// UnmarshalJSON reads any RFC 3339 timestamp.
func (t *Time) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("timestamp must be an RFC 3339 string")
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("timestamp must be an RFC 3339 string")
	}
	*t = From(v)
	return nil
}

// MarshalGQL writes the timestamp for gqlgen.
func (t Time) MarshalGQL(w io.Writer) {
	_, _ = io.WriteString(w, strconv.Quote(Format(time.Time(t))))
}

// UnmarshalGQL reads a timestamp for gqlgen.
func (t *Time) UnmarshalGQL(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("Time must be an RFC 3339 string")
	}
	return t.UnmarshalJSON([]byte(strconv.Quote(s)))
}

// String is the API form (what templates print).
func (t Time) String() string { return Format(t.Std()) }
