package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/services"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// harness serves the GraphQL door in-process over real services and a
// real database, so transport tests can set what the binary does not
// expose (timeouts, token lifetimes, caps). End-to-end tests use the real
// binary (testserver).
type harness struct {
	t          testing.TB
	db         *storage.DB
	issuer     *auth.Issuer
	hub        *pubsub.Hub
	sessions   *session.Service
	vouchers   *voucher.Service
	businesses *business.Service
	srv        *httptest.Server
	ws         string
}

type harnessOptions struct {
	graph graph.Options
	// tokenTTL is the lifetime of user and device tokens (1h when zero).
	tokenTTL time.Duration
}

const (
	usdcEth     = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	payeeWallet = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(t testing.TB, dialect string, o harnessOptions) *harness {
	t.Helper()
	ctx := context.Background()
	db, url := testdb.OpenURL(t, dialect)
	if o.tokenTTL == 0 {
		o.tokenTTL = time.Hour
	}
	keys, err := auth.NewKeyring(auth.KeyFromSecret([]byte("graph-harness-secret-0123456789abcdefghij")))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := auth.NewIssuer(auth.IssuerConfig{Keys: keys, Issuer: "voucherd", Audience: "voucherd", UserTTL: o.tokenTTL, DeviceTTL: o.tokenTTL})
	if err != nil {
		t.Fatal(err)
	}
	hub := pubsub.NewHub(pubsub.EntLoader{Client: db.Client}, pubsub.Options{Log: quietLog()})
	t.Cleanup(hub.Close)
	if db.IsPostgres() {
		l, err := pubsub.Listen(ctx, url, hub, pubsub.ListenerOptions{Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	sessions := session.NewService(db, 10*time.Minute, nil)
	fin, err := finance.New(finance.Default())
	if err != nil {
		t.Fatal(err)
	}
	vouchers, err := voucher.NewService(db, voucher.Options{Finance: fin, Sessions: sessions, Publisher: hub, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	businesses := business.NewService(db, nil)
	o.graph.Verifier = issuer
	if o.graph.TimeBudget == 0 {
		// The 1 s production budget is a bound for hostile documents, and
		// TestTimeBudget tests it with its own; ordinary tests' documents
		// must not fail because a loaded CI machine (the race detector,
		// parallel packages) stretched a plain mutation past it.
		o.graph.TimeBudget = 30 * time.Second
	}
	if o.graph.Log == nil {
		o.graph.Log = quietLog()
	}
	h := graph.NewHandler(&graph.Resolver{
		Services: services.Services{Sessions: sessions, Vouchers: vouchers, Businesses: businesses}, Hub: hub,
	}, o.graph)
	srv := httptest.NewServer(auth.Middleware(issuer, h))
	t.Cleanup(srv.Close)
	return &harness{t: t, db: db, issuer: issuer, hub: hub, sessions: sessions, vouchers: vouchers, businesses: businesses, srv: srv, ws: wsURL(srv.URL)}
}

// caller is a principal with its token.
type caller struct {
	p     *auth.Principal
	token string
}

func (c caller) ctx() context.Context { return auth.WithPrincipal(context.Background(), c.p) }

func (h *harness) device() caller {
	h.t.Helper()
	id := ids.New(ids.Device)
	tok, exp, err := h.issuer.IssueDevice(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return caller{&auth.Principal{Kind: auth.KindDevice, ID: id, ExpiresAt: exp}, tok}
}

// user creates an email-password account (a row: memberships need one).
func (h *harness) user() caller {
	h.t.Helper()
	u, err := h.db.User.Create().SetEmail(ids.New("u") + "@example.com").SetPasswordHash("x").Save(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	tok, exp, err := h.issuer.IssueUser(u.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	return caller{&auth.Principal{Kind: auth.KindUser, ID: u.ID, ExpiresAt: exp}, tok}
}

// session opens a context for payer and signs its payee in.
func (h *harness) session(payer caller) (*ent.VoucherSession, caller) {
	h.t.Helper()
	s, err := h.sessions.Create(payer.ctx())
	if err != nil {
		h.t.Fatal(err)
	}
	tok, exp, err := h.issuer.IssueResource(s.ID, s.ExpiresAt)
	if err != nil {
		h.t.Fatal(err)
	}
	return s, caller{&auth.Principal{Kind: auth.KindResource, ID: s.ID, ExpiresAt: exp}, tok}
}

func (h *harness) reserve(payee caller, code string, businessID *string) *ent.Voucher {
	h.t.Helper()
	v, err := h.vouchers.Reserve(payee.ctx(), voucher.ReserveInput{Code: code, BusinessID: businessID})
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func simpleRedeem(amount string) voucher.RedeemInput {
	return voucher.RedeemInput{ExpectedPayment: &voucher.PaymentInput{
		Network: "ethereum", Currency: "USDC", CurrencyAddress: usdcEth, Amount: amount,
		Wallet: &voucher.WalletInput{Address: payeeWallet},
	}}
}

func (h *harness) redeem(payee caller, id, amount string) *ent.Voucher {
	h.t.Helper()
	v, err := h.vouchers.Redeem(payee.ctx(), id, simpleRedeem(amount))
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func (h *harness) resolve(payer caller, v *ent.Voucher) *ent.Voucher {
	h.t.Helper()
	out, err := h.vouchers.Resolve(payer.ctx(), v.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: v.ExpectedPayment.ID}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// post sends a GraphQL request over HTTP POST.
func (h *harness) post(token, query string, vars map[string]any) (int, gqlResult) {
	h.t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return h.do(req)
}

func (h *harness) do(req *http.Request) (int, gqlResult) {
	h.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r gqlResult
	r.raw = b
	_ = json.Unmarshal(b, &r)
	return resp.StatusCode, r
}

type gqlResult struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Code string `json:"code"` // REST-style error body
	raw  []byte
}

func (r gqlResult) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}
