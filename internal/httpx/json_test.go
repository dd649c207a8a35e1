package httpx

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/apperr"
)

// WriteJSON's body is json.Marshal's, byte for byte (HTML escaped, no
// trailing newline), answer after answer from its pooled buffers.
func TestWriteJSONIsMarshal(t *testing.T) {
	values := []any{
		map[string]any{"a": "<b>&</b>", "n": 1, "s": strings.Repeat("x", 3000)},
		struct {
			Name string          `json:"name"`
			Raw  json.RawMessage `json:"raw"`
		}{"é\u2028", json.RawMessage(`{"k": [1, 2]}`)},
		[]int{},
		"short",
	}
	for round := 0; round < 3; round++ {
		for _, v := range values {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			WriteJSON(rec, http.StatusCreated, v)
			if rec.Code != http.StatusCreated || rec.Body.String() != string(want) {
				t.Fatalf("WriteJSON(%T) = %d %q, want 201 %q", v, rec.Code, rec.Body.String(), want)
			}
			if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(want)) {
				t.Fatalf("Content-Length %s, want %d", got, len(want))
			}
		}
	}
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, func() {})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"internal"`) {
		t.Fatalf("unencodable: %d %s", rec.Code, rec.Body.String())
	}
}

// What DecodeJSON decodes owns its bytes: a later request's body, read
// into the same pooled buffer, does not change it.
func TestDecodeJSONKeepsNothingOfTheBody(t *testing.T) {
	type body struct {
		Name string          `json:"name"`
		Raw  json.RawMessage `json:"raw"`
	}
	decode := func(s string) body {
		t.Helper()
		var b body
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(s))
		if err := DecodeJSON(r, &b, false); err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := decode(`{"name":"first-name","raw":{"a":"first"}}`)
	for i := 0; i < 20; i++ {
		decode(`{"name":"XXXXXXXXXX","raw":{"a":"XXXXX"}}`)
	}
	if first.Name != "first-name" || string(first.Raw) != `{"a":"first"}` {
		t.Fatalf("first body changed: %+v", first)
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat(" ", MaxBodyBytes+1)))
	var b body
	var ae *apperr.Error
	if err := DecodeJSON(r, &b, false); !errors.As(err, &ae) || ae.Code != apperr.PayloadTooLarge {
		t.Fatalf("over-large body: %v, want payload_too_large", err)
	}
}
