package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Validator checks real exchanges against a document with kin-openapi
// (openapi3filter, JSON Schema 2020-12 for a 3.1 document).
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// Load parses and validates a document (its structure and every example
// against its schema) and builds its router.
func Load(document []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("openapi: load: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi: invalid document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: router: %w", err)
	}
	return &Validator{doc: doc, router: router}, nil
}

// Doc is the loaded document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Exchange checks one request and its answer:
//   - a path or method the document does not have must have been answered
//     404 not_found or 405 method_not_allowed with the Error body;
//   - a request the document refuses must have been refused (4xx): the
//     document may never be stricter than the service;
//   - the answer's status must be documented for the operation, and its
//     headers and body must match it.
//
// req's body is not read; body is what was sent.
func (v *Validator) Exchange(req *http.Request, body []byte, status int, header http.Header, respBody []byte) error {
	ctx := context.Background()
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The service reads every body as JSON whatever its Content-Type says
	// (docs/api.md); a request without the header is checked as JSON.
	if len(body) > 0 && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("no operation in the document (%v), yet the service answered %d", err, status)
		}
		return v.errorBody(respBody)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && (status < 400 || status >= 500) {
		return fmt.Errorf("the document refuses this request, but the service answered %d: %v", status, err)
	}
	// The answer is checked against the operation whatever the request was.
	r.Body = io.NopCloser(bytes.NewReader(body))
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("answer %d does not match %s %s: %v", status, route.Method, route.Path, err)
	}
	return nil
}

// errorBody checks an answer against the Error schema.
func (v *Validator) errorBody(b []byte) error {
	ref := v.doc.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		return errors.New("the document has no Error schema")
	}
	var val any
	if err := json.Unmarshal(b, &val); err != nil {
		return fmt.Errorf("an error answer is not JSON: %q", b)
	}
	if err := ref.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("an error answer does not match the Error schema: %v", err)
	}
	return nil
}

// Transport validates every exchange under /api/v1/ that passes through
// it and reports mismatches to report (a test's Errorf).
type Transport struct {
	Base      http.RoundTripper
	Validator *Validator
	Report    func(format string, args ...any)
}

// RoundTrip sends req and validates the exchange.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !strings.HasPrefix(req.URL.Path, "/api/v1/") && req.URL.Path != "/api/v1" {
		return base.RoundTrip(req)
	}
	var sent []byte
	if req.Body != nil && req.GetBody != nil {
		rc, err := req.GetBody()
		if err == nil {
			sent, _ = io.ReadAll(rc)
			rc.Close()
		}
	} else if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		sent = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(got))
	if err != nil {
		return resp, nil // the caller meets the same failure reading it
	}
	if verr := t.Validator.Exchange(req, sent, resp.StatusCode, resp.Header, got); verr != nil {
		t.Report("openapi: %s %s: %v\nrequest body: %s\nanswer: %s", req.Method, req.URL.RequestURI(), verr, clip(sent), clip(got))
	}
	return resp, nil
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
