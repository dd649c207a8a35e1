package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// API is a small client for the service's REST and GraphQL doors. Bodies
// are marshalled before timing starts where a scenario cares (see Raw).
type API struct {
	Base string
	HTTP *http.Client
}

// NewAPI returns a client keeping up to conns connections open to base.
func NewAPI(base string, conns int) *API {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &API{Base: base, HTTP: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// CloseIdle drops kept-alive connections (before a scenario that needs
// every file descriptor).
func (a *API) CloseIdle() { a.HTTP.Transport.(*http.Transport).CloseIdleConnections() }

// StatusError is a non-200 answer.
type StatusError struct {
	Method, Path string
	Status       int
	Code         string
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s %s", e.Method, e.Path, e.Status, e.Code, e.Body)
}

// Raw sends a pre-encoded body and returns the response body; any status
// but 200 is a *StatusError.
func (a *API) Raw(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(b, &e)
		if len(b) > 300 {
			b = b[:300]
		}
		return nil, &StatusError{Method: method, Path: path, Status: resp.StatusCode, Code: e.Code, Body: string(b)}
	}
	return b, nil
}

// Do marshals body (nil for none), sends it and decodes the answer into out
// (if not nil).
func (a *API) Do(ctx context.Context, method, path, token string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	b, err := a.Raw(ctx, method, path, token, raw)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %q: %w", method, path, b, err)
		}
	}
	return nil
}

// Probe reports whether a route exists: without a token an existing guarded
// route answers 401/403 before looking at anything else, an unknown one 404.
func (a *API) Probe(ctx context.Context, method, path string) bool {
	_, err := a.Raw(ctx, method, path, "", []byte("{}"))
	se, ok := err.(*StatusError)
	return ok && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden)
}

// GraphQLResponse is a GraphQL answer.
type GraphQLResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
}

// GraphQL posts a document; GraphQL errors become a Go error.
func (a *API) GraphQL(ctx context.Context, token, query string, vars map[string]any, out any) error {
	var r GraphQLResponse
	if err := a.Do(ctx, http.MethodPost, "/graphql", token, map[string]any{"query": query, "variables": vars}, &r); err != nil {
		return err
	}
	if len(r.Errors) > 0 {
		return fmt.Errorf("graphql: %s (%v)", r.Errors[0].Message, r.Errors[0].Extensions["code"])
	}
	if out != nil {
		return json.Unmarshal(r.Data, out)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Identity is a signed-in caller.
type Identity struct {
	ID    string
	Token string
}

type authResult struct {
	Authorization struct {
		Token string `json:"token"`
	} `json:"authorization"`
	User struct {
		ID string `json:"id"`
	} `json:"user"`
}

// Device signs up a new mobile device (a payer's wallet).
func (a *API) Device(ctx context.Context) (Identity, error) {
	var r authResult
	err := a.Do(ctx, http.MethodPost, "/api/v1/auth/sign-up", "", map[string]any{"type": "mobile-device",
		"data": map[string]any{"installationId": randomHex(16), "password": randomHex(20)}}, &r)
	return Identity{ID: r.User.ID, Token: r.Authorization.Token}, err
}

// User signs up a new email-password user.
func (a *API) User(ctx context.Context) (Identity, error) {
	var r authResult
	err := a.Do(ctx, http.MethodPost, "/api/v1/auth/sign-up", "", map[string]any{"type": "email-password",
		"data": map[string]any{"email": "bench-" + randomHex(6) + "@example.com", "password": "pw-" + randomHex(10)}}, &r)
	return Identity{ID: r.User.ID, Token: r.Authorization.Token}, err
}

// Session is a payer's context.
type Session struct {
	ID   string `json:"id"`
	Code string `json:"code"`
}

// CreateSession opens a voucher session for payer.
func (a *API) CreateSession(ctx context.Context, payer string) (Session, error) {
	var s Session
	err := a.Do(ctx, http.MethodPost, "/api/v1/vouchers/sessions/create-session", payer, nil, &s)
	return s, err
}

// Resource signs in as a payee with a context code.
func (a *API) Resource(ctx context.Context, code string) (string, error) {
	var r authResult
	err := a.Do(ctx, http.MethodPost, "/api/v1/auth/sign-in", "", map[string]any{"type": "resource",
		"data": map[string]any{"resource": "voucher::context::code::" + code}}, &r)
	return r.Authorization.Token, err
}

// Voucher is the part of a voucher the bench reads.
type Voucher struct {
	ID              string `json:"id"`
	Code            string `json:"code"`
	Status          string `json:"status"`
	ExpectedPayment *struct {
		ID string `json:"id"`
	} `json:"expectedPayment"`
}

// Reserve reserves a voucher on the session with code (for businessID when
// not empty).
func (a *API) Reserve(ctx context.Context, token, code, businessID string) (Voucher, error) {
	body := map[string]any{"code": code}
	if businessID != "" {
		body["businessId"] = businessID
	}
	var v Voucher
	err := a.Do(ctx, http.MethodPost, "/api/v1/vouchers/reserve-voucher", token, body, &v)
	return v, err
}

// Bodies of the transitions; the addresses are the development registry's
// mainnet USDC and DAI on ethereum, the wallets all-digit (no EIP-55 case).
var (
	redeemBody = mustJSON(map[string]any{"expectedPayment": map[string]any{
		"network": "ethereum", "currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
		"amount": "12.50", "wallet": map[string]any{"address": "0x1111111111111111111111111111111111111111"}}})
	negotiateBody = mustJSON(map[string]any{"suppliedPayment": map[string]any{
		"network": "ethereum", "currency": "DAI", "currencyAddress": "0x6B175474E89094C44Da98b954EedeAC495271d0F",
		"amount": "12.50", "wallet": map[string]any{"address": "0x2222222222222222222222222222222222222222"}}})
)

func resolveBody(paymentID string) []byte {
	return mustJSON(map[string]any{"receipts": []any{map[string]any{"paymentId": paymentID,
		"transactionHash": "0x" + "ab" + randomHex(31)}}})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Redeem redeems voucher id as the payee (SIMPLE, USDC on ethereum).
func (a *API) Redeem(ctx context.Context, token, id string) (Voucher, error) {
	var v Voucher
	b, err := a.Raw(ctx, http.MethodPost, "/api/v1/vouchers/"+id+"/redeem-voucher", token, redeemBody)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, err
	}
	if v.Status != "REDEEMED" {
		return v, fmt.Errorf("redeem %s: status %q", id, v.Status)
	}
	return v, nil
}

// redeemed checks a redeem's answer without decoding all of it.
func redeemed(body []byte, err error) error {
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"status":"REDEEMED"`)) {
		return fmt.Errorf("redeem answered %.200s", body)
	}
	return nil
}

// Negotiate offers DAI for voucher id as the payer.
func (a *API) Negotiate(ctx context.Context, token, id string) error {
	_, err := a.Raw(ctx, http.MethodPost, "/api/v1/vouchers/"+id+"/negotiate-voucher", token, negotiateBody)
	return err
}

// Resolve resolves voucher id with one receipt for paymentID.
func (a *API) Resolve(ctx context.Context, token, id, paymentID string) error {
	var v Voucher
	b, err := a.Raw(ctx, http.MethodPost, "/api/v1/vouchers/"+id+"/resolve-voucher", token, resolveBody(paymentID))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Status != "RESOLVED" {
		return fmt.Errorf("resolve %s: status %q", id, v.Status)
	}
	return nil
}
