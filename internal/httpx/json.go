// Package httpx is the HTTP plumbing both doors share: strict JSON decoding,
// the error body, request ids, access logs, metrics and panic recovery.
package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/voucherd/voucherd/internal/apperr"
)

// MaxBodyBytes is the largest request body accepted (1 MiB).
const MaxBodyBytes = 1 << 20

// DecodeJSON decodes r's body into dst strictly: unknown fields, wrong JSON
// types, trailing values and text-rule breaks (NUL, invalid UTF-8, a
// repeated key: CheckJSON) are validation_failed; an over-large body is
// payload_too_large. An empty body decodes as {} when allowEmpty.
func DecodeJSON(r *http.Request, dst any, allowEmpty bool) error {
	buf := getBuffer()
	defer putBuffer(buf)
	_, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	body := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apperr.New(apperr.PayloadTooLarge, "request body exceeds 1 MiB")
		}
		return apperr.New(apperr.ValidationFailed, "could not read request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			body = []byte("{}")
		} else {
			return apperr.New(apperr.ValidationFailed, "request body must be a JSON object")
		}
	}
	return DecodeBytes(body, dst)
}

// DecodeBytes is DecodeJSON's strict decoding of a body already read. The
// body must also keep the text rules (CheckJSON): no NUL, no invalid
// UTF-8, no repeated key.
func DecodeBytes(body []byte, dst any) error {
	if err := CheckJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.New(apperr.ValidationFailed, "request body must hold exactly one JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return apperr.New(apperr.ValidationFailed, "request body is not valid JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return apperr.New(apperr.ValidationFailed, "request body must be a JSON object")
		}
		return &apperr.Error{Code: apperr.ValidationFailed, Message: "invalid request",
			Details: []apperr.Detail{{Field: field, Reason: "must be " + jsonKind(typ.Type.Kind().String())}}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &apperr.Error{Code: apperr.ValidationFailed, Message: "invalid request",
			Details: []apperr.Detail{{Field: name, Reason: "unknown field"}}}
	default:
		return apperr.New(apperr.ValidationFailed, "request body is not valid")
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	default:
		return "of another type"
	}
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	buf := getBuffer()
	defer putBuffer(buf)
	// json.Marshal's bytes (the Encoder escapes HTML as Marshal does)
	// without its copy of them: the answer is encoded into a pooled
	// buffer, written, and the buffer reused.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		WriteRawJSON(w, http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`))
		return
	}
	body := buf.Bytes()
	WriteRawJSON(w, status, body[:len(body)-1]) // without Encode's newline
}

// buffers hold request bodies being decoded and answers being written:
// neither outlives its call (decoding copies what it keeps; a
// ResponseWriter's Write has taken the bytes when it returns), so a
// request's JSON is not garbage each time. A buffer grown past
// maxPooled (a large body or answer) is left to the collector.
var buffers = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 2048)) }}

const maxPooled = 64 << 10

func getBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooled {
		return
	}
	b.Reset()
	buffers.Put(b)
}

// WriteRawJSON writes an already serialized JSON body.
func WriteRawJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteEmpty writes status with a zero-length body ("200, empty body").
func WriteEmpty(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(status)
}

// ErrorBody is the REST error body.
type ErrorBody struct {
	Code    apperr.Code     `json:"code"`
	Message string          `json:"message"`
	Details []apperr.Detail `json:"details,omitempty"`
}

// WriteError renders err as the REST error body. Internal causes are logged
// with the request id and never shown.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	e := apperr.From(err)
	status := e.Code.HTTPStatus()
	if status >= 500 && log != nil {
		log.ErrorContext(r.Context(), "request failed", "err", err.Error(), "route", r.Pattern)
	}
	if e.Code == apperr.RateLimit && e.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds))
	}
	msg := e.Message
	if msg == "" {
		msg = string(e.Code)
	}
	WriteJSON(w, status, ErrorBody{Code: e.Code, Message: msg, Details: e.Details})
}

// NotFound answers unknown routes with the JSON error body.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, nil, apperr.New(apperr.NotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)))
}
