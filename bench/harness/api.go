package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/voucherd/voucherd/testsupport/apiclient"
)

// API is the service's client (testsupport/apiclient, the one the
// end-to-end tests use) with the bench's operations on top. Bodies are
// marshalled before timing starts where a scenario cares (see Raw).
type API struct {
	*apiclient.Client
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
	return &API{apiclient.New(base, &http.Client{Transport: tr, Timeout: 60 * time.Second})}
}

// CloseIdle drops kept-alive connections (before a scenario that needs
// every file descriptor).
func (a *API) CloseIdle() { a.HTTP.Transport.(*http.Transport).CloseIdleConnections() }

// StatusError is a non-200 answer.
type StatusError = apiclient.StatusError

// Raw sends a pre-encoded body (nil for none) and returns the response
// body; any status but 200 is a *StatusError.
func (a *API) Raw(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	var b any // a nil body sends nothing
	if body != nil {
		b = body
	}
	r, err := a.Send(ctx, method, path, token, b, nil)
	if err != nil {
		return nil, err
	}
	if err := r.Expect(method, path, http.StatusOK); err != nil {
		return nil, err
	}
	return r.Body, nil
}

// Do marshals body (nil for none), sends it and decodes the answer into out
// (if not nil); any status but 200 is a *StatusError.
func (a *API) Do(ctx context.Context, method, path, token string, body, out any) error {
	return a.Call(ctx, method, path, token, body, out)
}

// Probe reports whether a route exists: without a token an existing guarded
// route answers 401/403 before looking at anything else, an unknown one 404.
func (a *API) Probe(ctx context.Context, method, path string) bool {
	_, err := a.Raw(ctx, method, path, "", []byte("{}"))
	se, ok := err.(*StatusError)
	return ok && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden)
}

// GraphQL posts a document; GraphQL errors become a Go error.
func (a *API) GraphQL(ctx context.Context, token, query string, vars map[string]any, out any) error {
	r, err := a.Client.GraphQL(ctx, token, query, vars)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(r.Data, out)
	}
	return nil
}

// Identity is a signed-in caller.
type Identity = apiclient.Identity

// Session is a payer's context.
type Session = apiclient.Session

// CreateSession opens a voucher session for payer.
func (a *API) CreateSession(ctx context.Context, payer string) (Session, error) {
	return a.Session(ctx, payer)
}

// Resource signs in as a payee with a context code and returns its token.
func (a *API) Resource(ctx context.Context, code string) (string, error) {
	id, err := a.Client.Resource(ctx, code)
	return id.Token, err
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
		"transactionHash": "0x" + "ab" + apiclient.RandomHex(31)}}})
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
