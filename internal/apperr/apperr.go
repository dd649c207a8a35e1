// Package apperr is the service's one error model. Every failure a caller can
// see is an *Error carrying a stable public code (the spec's snake_case codes);
// the code alone decides the HTTP status and how GraphQL reports it, so REST and
// GraphQL can never disagree about the same failure.
package apperr

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Code is a public, stable error code. Its string is what clients see in
// the REST body's "code" and in GraphQL's extensions.code.
type Code string

// Codes of the service's error table (docs/api.md, "Errors").
const (
	ValidationFailed   Code = "validation_failed"
	Unauthorized       Code = "unauthorized"
	Forbidden          Code = "forbidden"
	NotFound           Code = "not_found"
	MethodNotAllowed   Code = "method_not_allowed"
	RateLimit          Code = "rate_limit"
	PayloadTooLarge    Code = "payload_too_large"
	Internal           Code = "internal"
	Unavailable        Code = "unavailable"
	InvalidCredentials Code = "invalid_credentials"
	InvalidType        Code = "invalid_type"
	InvalidCode        Code = "invalid_code"
	AlreadyRedeemed    Code = "already_redeemed"
	NotSimple          Code = "not_simple"
	DifferentNetwork   Code = "different_network"
	NotRedeemed        Code = "not_redeemed"
	AlreadyResolved    Code = "already_resolved"
	Expired            Code = "expired"
	Discarded          Code = "discarded"
	NotRetryable       Code = "not_retryable"
	AlreadyExists      Code = "already_exists"
	BusinessInactive   Code = "business_inactive"
	LastOwner          Code = "last_owner"
	LimitExceeded      Code = "limit_exceeded"
	// IdempotencyKeyReused: an Idempotency-Key came back with another
	// request (422); IdempotencyConflict: its first request is still in
	// flight (409).
	IdempotencyKeyReused Code = "idempotency_key_reused"
	IdempotencyConflict  Code = "idempotency_conflict"
	// RateUnavailable: a negotiation needs a price the service does not
	// have now (a stale or non-positive feed answer, a stale file price).
	RateUnavailable Code = "rate_unavailable"
)

// HTTPStatus is the one table mapping codes to HTTP statuses.
func (c Code) HTTPStatus() int {
	switch c {
	case Unauthorized:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	case NotFound:
		return http.StatusNotFound
	case MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case RateLimit:
		return http.StatusTooManyRequests
	case PayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case IdempotencyKeyReused:
		return http.StatusUnprocessableEntity
	case IdempotencyConflict:
		return http.StatusConflict
	case Internal:
		return http.StatusInternalServerError
	case Unavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusBadRequest
	}
}

// Detail names one offending field, by its JSON path in the request.
type Detail struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Error is a failure with a public code and a client-safe message. Cause is
// for logs only and is never rendered to a client.
type Error struct {
	Code    Code
	Message string
	Details []Detail
	Cause   error
	// RetryAfterSeconds is set on rate_limit errors.
	RetryAfterSeconds int
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	for _, d := range e.Details {
		fmt.Fprintf(&b, " [%s: %s]", d.Field, d.Reason)
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, apperr.New(code, "")) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// New returns an error with the given code and message.
func New(code Code, message string) *Error {
	return &Error{Code: code, Message: message}
}

// Newf is New with a formatted message.
func Newf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a validation_failed error naming one field.
func Invalid(field, reason string) *Error {
	return &Error{Code: ValidationFailed, Message: "invalid request", Details: []Detail{{Field: field, Reason: reason}}}
}

// InternalError wraps an unexpected failure; the cause is logged, never shown.
func InternalError(cause error) *Error {
	return &Error{Code: Internal, Message: "internal error", Cause: cause}
}

// CodeOf returns the public code of err: its own for an *Error, internal for anything else.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// HasCode reports whether err carries code.
func HasCode(err error, code Code) bool { return err != nil && CodeOf(err) == code }

// From converts any error into an *Error: an *Error is returned as is, anything
// else becomes internal (its text kept as the cause, for logs).
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return InternalError(err)
}

// Validator collects field errors so a request reports all its problems at once.
type Validator struct{ details []Detail }

// Add records a problem with field.
func (v *Validator) Add(field, reason string) {
	v.details = append(v.details, Detail{Field: field, Reason: reason})
}

// Check records reason for field when ok is false, and returns ok.
func (v *Validator) Check(ok bool, field, reason string) bool {
	if !ok {
		v.Add(field, reason)
	}
	return ok
}

// Text checks a short text a person reads (a name, a reference): valid
// UTF-8, 1 to max characters (runes, as a person counts them), something
// besides spaces, no control characters. It records the first problem.
func (v *Validator) Text(field, s string, max int) {
	switch n := utf8.RuneCountInString(s); {
	case !utf8.ValidString(s):
		v.Add(field, "must be valid UTF-8")
	case n < 1 || n > max:
		v.Add(field, fmt.Sprintf("must be 1 to %d characters", max))
	case strings.TrimSpace(s) == "":
		v.Add(field, "must not be blank")
	case strings.ContainsFunc(s, unicode.IsControl):
		v.Add(field, "must not contain control characters")
	}
}

// Failed reports whether any problem was recorded.
func (v *Validator) Failed() bool { return len(v.details) > 0 }

// Err returns a validation_failed error with every detail, or nil.
func (v *Validator) Err() error {
	if len(v.details) == 0 {
		return nil
	}
	return &Error{Code: ValidationFailed, Message: "invalid request", Details: v.details}
}
