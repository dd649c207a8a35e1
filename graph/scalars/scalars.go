// Package scalars holds the GraphQL custom scalars: Decimal (money as a
// string, never a float) and JSON (opaque objects the spec leaves open).
package scalars

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/internal/apitime"
)

// MarshalDecimal writes a decimal string as a JSON string.
func MarshalDecimal(s string) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) { writeQuoted(w, s) })
}

// writeQuoted writes strconv.Quote(s) to w. gqlgen renders an answer into
// a *bytes.Buffer: there the quoted string is appended in the buffer's
// spare room instead of being built first (one allocation less per value).
func writeQuoted(w io.Writer, s string) {
	if b, ok := w.(*bytes.Buffer); ok {
		_, _ = b.Write(strconv.AppendQuote(b.AvailableBuffer(), s))
		return
	}
	_, _ = io.WriteString(w, strconv.Quote(s))
}

// UnmarshalDecimal accepts only a JSON string: a number literal would already
// have passed through a float in some clients.
func UnmarshalDecimal(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		//lint:ignore ST1005 clients see this message; it starts with the GraphQL type's name
		return "", fmt.Errorf("Decimal must be a string, like \"12.50\"")
	}
	return s, nil
}

// MarshalJSON writes raw JSON as is.
func MarshalJSON(raw json.RawMessage) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		if len(raw) == 0 {
			_, _ = io.WriteString(w, "null")
			return
		}
		_, _ = w.Write(raw)
	})
}

// UnmarshalJSON re-encodes a GraphQL input value as raw JSON.
func UnmarshalJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("JSON: %w", err)
	}
	return b, nil
}

// MarshalTime writes t in the API's timestamp format (internal/apitime).
func MarshalTime(t time.Time) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		// apitime.Format, formatted on the stack.
		var a [48]byte
		writeQuoted(w, string(t.UTC().AppendFormat(a[:0], apitime.Layout)))
	})
}

// UnmarshalTime reads an RFC 3339 timestamp.
func UnmarshalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		//lint:ignore ST1005 clients see this message; it starts with the GraphQL type's name
		return time.Time{}, fmt.Errorf("Time must be an RFC 3339 string")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		//lint:ignore ST1005 clients see this message; it starts with the GraphQL type's name
		return time.Time{}, fmt.Errorf("Time must be an RFC 3339 string")
	}
	return t.UTC(), nil
}
