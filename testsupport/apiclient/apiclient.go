// Package apiclient is the small HTTP client of the service's REST and
// GraphQL doors that the end-to-end tests (testsupport/testserver, which
// adds a testing.TB on top) and the bench harness (bench/harness) share:
// sending a request with a bearer token, posting a GraphQL document, and
// the usual callers (a device, an email-password user, a voucher session,
// a payee signed in with its context code). It takes contexts and returns
// errors; it knows nothing of testing, so the bench binary can use it.
package apiclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client sends requests to the service at Base through HTTP.
type Client struct {
	Base string
	HTTP *http.Client
}

// New returns a client of the service at base; hc nil means
// http.DefaultClient.
func New(base string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{Base: base, HTTP: hc}
}

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Code returns the error body's code ("" when absent).
func (r *Response) Code() string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Code
}

// StatusError is an answer with another status than the one expected.
type StatusError struct {
	Method, Path string
	Status       int
	Code         string
	// Body is the start of the answer (at most 300 bytes).
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s %s", e.Method, e.Path, e.Status, e.Code, e.Body)
}

// Expect returns a *StatusError unless r has status want.
func (r *Response) Expect(method, path string, want int) error {
	if r.Status == want {
		return nil
	}
	b := r.Body
	if len(b) > 300 {
		b = b[:300]
	}
	return &StatusError{Method: method, Path: path, Status: r.Status, Code: r.Code(), Body: string(b)}
}

// Send sends a request and reads the whole answer, whatever its status.
// body is sent as is when it is a string or []byte, marshalled as JSON
// otherwise, and nothing when nil; header adds request headers.
func (c *Client) Send(ctx context.Context, method, path, token string, body any, header http.Header) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Call sends a request that must answer 200 and decodes the answer into
// out (when not nil); another status is a *StatusError.
func (c *Client) Call(ctx context.Context, method, path, token string, body, out any) error {
	r, err := c.Send(ctx, method, path, token, body, nil)
	if err != nil {
		return err
	}
	if err := r.Expect(method, path, http.StatusOK); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return fmt.Errorf("%s %s: decode %.300q: %w", method, path, r.Body, err)
		}
	}
	return nil
}

// GraphQLResult is a GraphQL response.
type GraphQLResult struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Path       []any          `json:"path"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
}

// ErrorCode returns the first error's extensions.code ("" when none).
func (g *GraphQLResult) ErrorCode() string {
	if len(g.Errors) == 0 {
		return ""
	}
	c, _ := g.Errors[0].Extensions["code"].(string)
	return c
}

// Err is the first GraphQL error as a Go error (nil when none).
func (g *GraphQLResult) Err() error {
	if len(g.Errors) == 0 {
		return nil
	}
	return fmt.Errorf("graphql: %s (%v)", g.Errors[0].Message, g.Errors[0].Extensions["code"])
}

// GraphQL posts a document to /graphql and decodes the answer, whatever
// its status (GraphQL errors are in the result).
func (c *Client) GraphQL(ctx context.Context, token, query string, vars map[string]any) (*GraphQLResult, error) {
	r, err := c.Send(ctx, http.MethodPost, "/graphql", token, map[string]any{"query": query, "variables": vars}, nil)
	if err != nil {
		return nil, err
	}
	var g GraphQLResult
	if err := json.Unmarshal(r.Body, &g); err != nil {
		return nil, fmt.Errorf("graphql response %d %.300s: %w", r.Status, r.Body, err)
	}
	return &g, nil
}

// RandomHex returns n random bytes as hex, for unique identities.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Identity is a signed-in caller.
type Identity struct {
	ID    string
	Token string
	// Email and Password for email-password users; InstallationID for devices.
	Email, Password, InstallationID string
}

func (c *Client) signUp(ctx context.Context, body map[string]any) (Identity, error) {
	var out struct {
		Authorization struct{ Token string } `json:"authorization"`
		User          struct{ ID string }    `json:"user"`
	}
	if err := c.Call(ctx, http.MethodPost, "/api/v1/auth/sign-up", "", body, &out); err != nil {
		return Identity{}, err
	}
	return Identity{ID: out.User.ID, Token: out.Authorization.Token}, nil
}

// Device signs up a new mobile device (a payer's wallet).
func (c *Client) Device(ctx context.Context) (Identity, error) {
	inst, pw := RandomHex(16), RandomHex(20)
	id, err := c.signUp(ctx, map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": inst, "password": pw}})
	id.InstallationID, id.Password = inst, pw
	return id, err
}

// User signs up a new email-password user.
func (c *Client) User(ctx context.Context) (Identity, error) {
	email, pw := "u"+RandomHex(6)+"@example.com", "pw-"+RandomHex(8)
	id, err := c.signUp(ctx, map[string]any{"type": "email-password", "data": map[string]any{"email": email, "password": pw}})
	id.Email, id.Password = email, pw
	return id, err
}

// Session is a payer's voucher session (its context).
type Session struct {
	ID   string `json:"id"`
	Code string `json:"code"`
}

// Session opens a voucher session for the payer whose token is given.
func (c *Client) Session(ctx context.Context, payerToken string) (Session, error) {
	var s Session
	err := c.Call(ctx, http.MethodPost, "/api/v1/vouchers/sessions/create-session", payerToken, nil, &s)
	return s, err
}

// Resource signs in as a payee with a context code.
func (c *Client) Resource(ctx context.Context, code string) (Identity, error) {
	var out struct {
		Authorization struct{ Token string } `json:"authorization"`
	}
	err := c.Call(ctx, http.MethodPost, "/api/v1/auth/sign-in", "", map[string]any{"type": "resource", "data": map[string]any{"resource": "voucher::context::code::" + code}}, &out)
	return Identity{Token: out.Authorization.Token}, err
}

// ErrExited says the process behind a service ended while WaitReady waited.
var ErrExited = errors.New("exited during start")

// WaitReady polls GET base+path until it answers 200 (the service is
// ready), exited closes (the process ended: ErrExited) or timeout passes.
func WaitReady(base, path string, exited <-chan struct{}, timeout time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return ErrExited
		default:
		}
		resp, err := c.Get(base + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
