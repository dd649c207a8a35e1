package rest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const (
	payeeEVM    = "0x52908400098527886E0F7030069857D2E4169EE7"
	payeeSolana = "7v91N7iZ9mNicL8WfG6cgSCKyRXydQjLh6UYBWwm6y1Q"
	usdcEth     = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	ethTxHash   = "0x1111111111111111111111111111111111111111111111111111111111111111"
)

// doSecret sends a request with an X-Client-Secret header (and a bearer
// token when token is set).
func doSecret(t *testing.T, srv *testserver.Server, method, path, secret, token string, body any) *testserver.Response {
	t.Helper()
	h := http.Header{}
	if secret != "" {
		h.Set("X-Client-Secret", secret)
	}
	return srv.DoWith(t, method, path, token, body, h)
}

func widgetBody(name string) map[string]any {
	return map[string]any{
		"name": name,
		"accepts": []map[string]any{
			{"network": "ethereum", "currency": "USDC"},
			{"network": "ethereum", "currency": "ETH"},
			{"network": "solana", "currency": "USDC"},
		},
		"wallets": []map[string]any{
			{"network": "ethereum", "address": strings.ToLower(payeeEVM)},
			{"network": "solana", "address": payeeSolana},
		},
	}
}

// The checks over HTTP against the binary on both databases: the
// business routes with their roles and errors, the client secret shown once
// and refused once rotated, the public routes' errors, a checkout that is a
// business voucher with its reference, and the checkout capability.
func TestWidgetsEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner, member, stranger := srv.User(t), srv.User(t), srv.User(t)
			r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"})
			biz := r.Map(t)["id"].(string)
			r = srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"})
			if r.Status != 200 {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			base := "/api/v1/businesses/" + biz + "/widgets"

			// Validation: every problem at once, nothing stored.
			bad := map[string]any{
				"name":    "",
				"accepts": []map[string]any{{"network": "ethereum", "currency": "XYZ"}, {"network": "nowhere", "currency": "USDC"}},
				"wallets": []map[string]any{{"network": "ethereum", "address": "0x123"}},
			}
			r = srv.Do(t, "POST", base+"/create-widget", owner.Token, bad)
			wantError(t, "bad widget", r, 400, "validation_failed")
			for _, f := range []string{"name", "accepts[0].currency", "accepts[1].network", "wallets[0].address"} {
				if !strings.Contains(string(r.Body), `"`+f+`"`) {
					t.Fatalf("bad widget: no detail for %s in %s", f, r.Body)
				}
			}
			missing := widgetBody("No solana wallet")
			missing["wallets"] = []map[string]any{{"network": "ethereum", "address": payeeEVM}}
			wantError(t, "wallet missing", srv.Do(t, "POST", base+"/create-widget", owner.Token, missing), 400, "validation_failed")
			many := widgetBody("Too many")
			var acc []map[string]any
			for _, n := range []string{"ethereum", "polygon", "base", "arbitrum"} {
				for _, c := range []string{"USDC", "USDT", "DAI", "ETH", "POL"} {
					acc = append(acc, map[string]any{"network": n, "currency": c})
				}
			}
			many["accepts"] = append(acc, map[string]any{"network": "solana", "currency": "SOL"})
			wantError(t, "21 accepts", srv.Do(t, "POST", base+"/create-widget", owner.Token, many), 400, "validation_failed")
			wantError(t, "member writes", srv.Do(t, "POST", base+"/create-widget", member.Token, widgetBody("x")), 403, "forbidden")
			wantError(t, "stranger writes", srv.Do(t, "POST", base+"/create-widget", stranger.Token, widgetBody("x")), 404, "not_found")
			if got := list(t, srv.Do(t, "GET", base, owner.Token, nil)); len(got) != 0 {
				t.Fatalf("refused creates stored widgets: %v", got)
			}

			// Create: the secret once, the wallet in checksum form.
			r = srv.Do(t, "POST", base+"/create-widget", owner.Token, widgetBody("Shop"))
			if r.Status != 200 {
				t.Fatalf("create-widget: %d %s", r.Status, r.Body)
			}
			w := r.Map(t)
			exactly(t, "create-widget", w, "id", "businessId", "name", "status", "accepts", "wallets", "createdAt", "updatedAt", "clientSecret")
			wid, secret := w["id"].(string), w["clientSecret"].(string)
			if !strings.HasPrefix(wid, "wgt_") || !strings.HasPrefix(secret, "wcs_") || len(secret) != 4+43 || w["status"] != "ACTIVE" {
				t.Fatalf("create-widget: %s", r.Body)
			}
			if ws := w["wallets"].([]any); ws[0].(map[string]any)["address"] != payeeEVM {
				t.Fatalf("wallet not in checksum form: %v", ws)
			}
			if strings.Contains(srv.Logs(), secret) {
				t.Fatal("the client secret reached the log")
			}

			// Reads: members yes (no secret), strangers not_found.
			got := list(t, srv.Do(t, "GET", base, member.Token, nil))
			if len(got) != 1 || got[0]["id"] != wid || got[0]["clientSecret"] != nil {
				t.Fatalf("list: %v", got)
			}
			r = srv.Do(t, "GET", base+"/"+wid, member.Token, nil)
			exactly(t, "get-widget", r.Map(t), "id", "businessId", "name", "status", "accepts", "wallets", "createdAt", "updatedAt")
			wantError(t, "stranger get", srv.Do(t, "GET", base+"/"+wid, stranger.Token, nil), 404, "not_found")
			wantError(t, "stranger list", srv.Do(t, "GET", base, stranger.Token, nil), 404, "not_found")
			wantError(t, "no token", srv.Do(t, "GET", base, "", nil), 401, "unauthorized")

			// Update.
			r = srv.Do(t, "POST", base+"/"+wid+"/update-widget", owner.Token, map[string]any{"name": "Shop 2"})
			if r.Status != 200 || r.Map(t)["name"] != "Shop 2" {
				t.Fatalf("update: %d %s", r.Status, r.Body)
			}
			wantError(t, "update drops a wallet", srv.Do(t, "POST", base+"/"+wid+"/update-widget", owner.Token,
				map[string]any{"wallets": []map[string]any{{"network": "ethereum", "address": payeeEVM}}}), 400, "validation_failed")
			wantError(t, "member update", srv.Do(t, "POST", base+"/"+wid+"/update-widget", member.Token, map[string]any{"name": "x"}), 403, "forbidden")

			// A second widget, for "another widget's secret".
			r = srv.Do(t, "POST", base+"/create-widget", owner.Token, widgetBody("Other"))
			other := r.Map(t)
			otherSecret := other["clientSecret"].(string)

			cfgPath := "/api/v1/widgets/" + wid + "/config"
			r = doSecret(t, srv, "GET", cfgPath, secret, "", nil)
			if r.Status != 200 {
				t.Fatalf("config: %d %s", r.Status, r.Body)
			}
			cfg := r.Map(t)
			exactly(t, "config", cfg, "id", "name", "businessName", "status", "accepts")
			a0 := cfg["accepts"].([]any)[0].(map[string]any)
			if cfg["businessName"] != "Acme Coffee" || a0["currencyAddress"] != usdcEth || a0["decimals"] != float64(6) || a0["chainId"] != "1" {
				t.Fatalf("config: %s", r.Body)
			}
			wantError(t, "no secret", doSecret(t, srv, "GET", cfgPath, "", "", nil), 401, "unauthorized")
			wantError(t, "wrong secret", doSecret(t, srv, "GET", cfgPath, "wcs_"+strings.Repeat("A", 43), "", nil), 401, "unauthorized")
			wantError(t, "garbage secret", doSecret(t, srv, "GET", cfgPath, "nonsense", "", nil), 401, "unauthorized")
			wantError(t, "other widget's secret", doSecret(t, srv, "GET", cfgPath, otherSecret, "", nil), 404, "not_found")
			if r := doSecret(t, srv, "GET", cfgPath, "", member.Token, nil); r.Status != 200 {
				t.Fatalf("member token on config: %d %s", r.Status, r.Body)
			}
			wantError(t, "stranger token", doSecret(t, srv, "GET", cfgPath, "", stranger.Token, nil), 404, "not_found")

			// create-checkout.
			coPath := "/api/v1/widgets/" + wid + "/create-checkout"
			order := map[string]any{"network": "ethereum", "currency": "USDC", "amount": "12.5", "reference": "order-1001"}
			wantError(t, "checkout without secret", doSecret(t, srv, "POST", coPath, "", "", order), 401, "unauthorized")
			wantError(t, "checkout other secret", doSecret(t, srv, "POST", coPath, otherSecret, "", order), 404, "not_found")
			wantError(t, "pair not accepted", doSecret(t, srv, "POST", coPath, secret, "",
				map[string]any{"network": "polygon", "currency": "USDC", "amount": "1"}), 400, "validation_failed")
			wantError(t, "too precise", doSecret(t, srv, "POST", coPath, secret, "",
				map[string]any{"network": "ethereum", "currency": "USDC", "amount": "1.0000001"}), 400, "validation_failed")
			wantError(t, "zero", doSecret(t, srv, "POST", coPath, secret, "",
				map[string]any{"network": "ethereum", "currency": "USDC", "amount": "0"}), 400, "validation_failed")
			wantError(t, "long reference", doSecret(t, srv, "POST", coPath, secret, "",
				map[string]any{"network": "ethereum", "currency": "USDC", "amount": "1", "reference": strings.Repeat("r", 129)}), 400, "validation_failed")

			r = doSecret(t, srv, "POST", coPath, secret, "", order)
			if r.Status != 200 {
				t.Fatalf("create-checkout: %d %s", r.Status, r.Body)
			}
			co := r.Map(t)
			exactly(t, "create-checkout", co, "id", "checkoutUrl", "status", "expiresAt", "expectedPayment", "reference")
			url := co["checkoutUrl"].(string)
			if !strings.HasPrefix(url, srv.URL+"/checkout/") || co["status"] != "REDEEMED" || co["reference"] != "order-1001" {
				t.Fatalf("create-checkout: %s", r.Body)
			}
			token := strings.TrimPrefix(url, srv.URL+"/checkout/")
			if len(token) < 22 {
				t.Fatalf("checkout token too short for 128 bits: %q", token)
			}
			ep := co["expectedPayment"].(map[string]any)
			if ep["amount"] != "12.5" || ep["wallet"].(map[string]any)["address"] != payeeEVM || ep["currencyAddress"] != usdcEth {
				t.Fatalf("expectedPayment: %v", ep)
			}
			if strings.Contains(srv.Logs(), token) {
				t.Fatal("the checkout token reached the log")
			}

			// The checkout is a business voucher in the dashboard's lists.
			vs := list(t, srv.Do(t, "GET", "/api/v1/vouchers", member.Token, nil))
			found := false
			for _, v := range vs {
				if v["id"] == co["id"] {
					found = v["reference"] == "order-1001" && v["status"] == "REDEEMED" && v["type"] == "SIMPLE" && v["businessId"] == biz && v["widgetId"] == wid
				}
			}
			if !found {
				t.Fatalf("checkout not in the member's voucher list with its reference: %v", vs)
			}
			wantError(t, "stranger sees checkout voucher", srv.Do(t, "GET", "/api/v1/vouchers/"+co["id"].(string), stranger.Token, nil), 404, "not_found")
			// A member's token creates checkouts too.
			if r := doSecret(t, srv, "POST", coPath, "", owner.Token, map[string]any{"network": "ethereum", "currency": "ETH", "amount": "0.01"}); r.Status != 200 {
				t.Fatalf("member checkout: %d %s", r.Status, r.Body)
			}

			// The capability.
			r = srv.Do(t, "GET", "/api/v1/checkout/"+token, "", nil)
			if r.Status != 200 {
				t.Fatalf("get checkout: %d %s", r.Status, r.Body)
			}
			pub := r.Map(t)
			wantURI := "ethereum:" + usdcEth + "@1/transfer?address=" + payeeEVM + "&uint256=12500000"
			if pub["paymentUri"] != wantURI || pub["status"] != "awaiting_payment" || pub["businessName"] != "Acme Coffee" || pub["payeeAddress"] != payeeEVM {
				t.Fatalf("public checkout: %s", r.Body)
			}
			wantError(t, "unknown token", srv.Do(t, "GET", "/api/v1/checkout/"+strings.Repeat("A", 32), "", nil), 404, "not_found")
			wantError(t, "malformed token", srv.Do(t, "GET", "/api/v1/checkout/nope", "", nil), 404, "not_found")
			wantError(t, "submit unknown", srv.Do(t, "POST", "/api/v1/checkout/"+strings.Repeat("A", 32)+"/submit-payment", "", map[string]any{"transactionHash": ethTxHash}), 404, "not_found")
			wantError(t, "submit bad hash", srv.Do(t, "POST", "/api/v1/checkout/"+token+"/submit-payment", "", map[string]any{"transactionHash": "0x12"}), 400, "validation_failed")
			wantError(t, "submit no body", srv.Do(t, "POST", "/api/v1/checkout/"+token+"/submit-payment", "", "{}"), 400, "validation_failed")
			r = srv.Do(t, "POST", "/api/v1/checkout/"+token+"/submit-payment", "", map[string]any{"transactionHash": ethTxHash})
			// The development finance file has no rpcUrl: the network is
			// trusted (settlement.verified false), so the receipt stands at
			// once. Verified networks: the browser test on a real chain.
			sub := r.Map(t)
			st, _ := sub["settlement"].(map[string]any)
			if r.Status != 200 || sub["status"] != "confirmed" || sub["transactionHash"] != ethTxHash || st == nil || st["verified"] != false {
				t.Fatalf("submit-payment: %d %s", r.Status, r.Body)
			}
			r = srv.Do(t, "GET", "/api/v1/vouchers/"+co["id"].(string), owner.Token, nil)
			if v := r.Map(t); v["status"] != "RESOLVED" {
				t.Fatalf("voucher after submit: %s", r.Body)
			}
			wantError(t, "submit twice", srv.Do(t, "POST", "/api/v1/checkout/"+token+"/submit-payment", "", map[string]any{"transactionHash": ethTxHash}), 400, "already_resolved")

			// Rotation ends the old secret at once.
			r = srv.Do(t, "POST", base+"/"+wid+"/rotate-secret", owner.Token, nil)
			if r.Status != 200 {
				t.Fatalf("rotate: %d %s", r.Status, r.Body)
			}
			newSecret := r.Map(t)["clientSecret"].(string)
			if newSecret == secret {
				t.Fatal("rotation kept the secret")
			}
			wantError(t, "rotated secret", doSecret(t, srv, "GET", cfgPath, secret, "", nil), 401, "unauthorized")
			if r := doSecret(t, srv, "GET", cfgPath, newSecret, "", nil); r.Status != 200 {
				t.Fatalf("new secret: %d %s", r.Status, r.Body)
			}

			// Inactive widget, then inactive business: business_inactive.
			srv.Do(t, "POST", base+"/"+wid+"/update-widget", owner.Token, map[string]any{"status": "INACTIVE"})
			wantError(t, "inactive widget", doSecret(t, srv, "POST", coPath, newSecret, "", order), 400, "business_inactive")
			srv.Do(t, "POST", base+"/"+wid+"/update-widget", owner.Token, map[string]any{"status": "ACTIVE"})
			srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"})
			wantError(t, "inactive business", doSecret(t, srv, "POST", coPath, newSecret, "", order), 400, "business_inactive")
			srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/update-status", owner.Token, map[string]any{"status": "ACTIVE"})

			// Delete: the secret stops working, the widget is gone.
			wantError(t, "member delete", srv.Do(t, "POST", base+"/"+wid+"/delete-widget", member.Token, nil), 403, "forbidden")
			wantEmpty(t, "delete", srv.Do(t, "POST", base+"/"+wid+"/delete-widget", owner.Token, nil))
			wantError(t, "deleted get", srv.Do(t, "GET", base+"/"+wid, owner.Token, nil), 404, "not_found")
			wantError(t, "deleted widget's secret", doSecret(t, srv, "GET", cfgPath, newSecret, "", nil), 401, "unauthorized")
			// Its checkout's page still works: the customer may be paying.
			if r := srv.Do(t, "GET", "/api/v1/checkout/"+token, "", nil); r.Status != 200 {
				t.Fatalf("checkout after widget delete: %d %s", r.Status, r.Body)
			}
		})
	}
}

// rateLimitLeft reads r (remaining) and t (seconds to the window's end)
// from a response's RateLimit field for group.
func rateLimitLeft(t *testing.T, resp *testserver.Response, group string) (left, reset int) {
	t.Helper()
	f := resp.Header.Get("RateLimit")
	if _, err := fmt.Sscanf(f, `"`+group+`";r=%d;t=%d`, &left, &reset); err != nil {
		t.Fatalf("RateLimit %q: %v", f, err)
	}
	return left, reset
}

// Widgets public is 5 per 300 s counted per widget (and per operation),
// whoever calls: widget A's exhausted budget leaves widget B's whole, over
// HTTP against the binary with the spec's limits.
func TestWidgetsPublicRateLimitIsPerWidget(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{"VOUCHER_RATE_LIMITS": "spec"}})
	owner := srv.User(t)
	r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(t)["id"].(string)
	widget := func(name string) (id, secret string) {
		r := srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", owner.Token, widgetBody(name))
		if r.Status != 200 {
			t.Fatalf("create-widget: %d %s", r.Status, r.Body)
		}
		w := r.Map(t)
		return w["id"].(string), w["clientSecret"].(string)
	}
	a, secretA := widget("A")
	b, secretB := widget("B")
	config := func(id, secret string) *testserver.Response {
		return doSecret(t, srv, "GET", "/api/v1/widgets/"+id+"/config", secret, "", nil)
	}

	// Windows are fixed (aligned to the epoch): start in a window with
	// room for the whole test, so its end cannot refill A's budget midway.
	first := config(a, secretA)
	if first.Status != 200 {
		t.Fatalf("config A: %d %s", first.Status, first.Body)
	}
	if left, reset := rateLimitLeft(t, first, "widgets-public"); reset < 20 {
		time.Sleep(time.Duration(reset+1) * time.Second)
		first = config(a, secretA)
		if left, _ = rateLimitLeft(t, first, "widgets-public"); left != 4 {
			t.Fatalf("config A in a new window: %d left, want 4", left)
		}
	} else if left != 4 {
		t.Fatalf("config A: %d left, want 4 (5 per window)", left)
	}
	if p := first.Header.Get("RateLimit-Policy"); p != `"widgets-public";q=5;w=300` {
		t.Fatalf("RateLimit-Policy %q", p)
	}
	for i := 3; i >= 0; i-- {
		r := config(a, secretA)
		if left, _ := rateLimitLeft(t, r, "widgets-public"); r.Status != 200 || left != i {
			t.Fatalf("config A, %d left expected: %d %s (RateLimit %q)", i, r.Status, r.Body, r.Header.Get("RateLimit"))
		}
	}
	r = config(a, secretA)
	if r.Status != 429 || r.Code() != "rate_limit" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("config A, sixth call: %d %s", r.Status, r.Body)
	}
	// Counted per widget, whoever calls: a member's token on A is refused too.
	r = doSecret(t, srv, "GET", "/api/v1/widgets/"+a+"/config", "", owner.Token, nil)
	if r.Status != 429 {
		t.Fatalf("config A with a member's token: %d %s", r.Status, r.Body)
	}
	// B's budget is whole.
	for i := 4; i >= 0; i-- {
		r := config(b, secretB)
		if left, _ := rateLimitLeft(t, r, "widgets-public"); r.Status != 200 || left != i {
			t.Fatalf("config B, %d left expected: %d %s (RateLimit %q)", i, r.Status, r.Body, r.Header.Get("RateLimit"))
		}
	}
	if r := config(b, secretB); r.Status != 429 {
		t.Fatalf("config B, sixth call: %d %s", r.Status, r.Body)
	}
	// Per operation: A's create-checkout has a budget of its own.
	r = doSecret(t, srv, "POST", "/api/v1/widgets/"+a+"/create-checkout", secretA, "",
		map[string]any{"network": "ethereum", "currency": "USDC", "amount": "1"})
	if left, _ := rateLimitLeft(t, r, "widgets-public"); r.Status != 200 || left != 4 {
		t.Fatalf("create-checkout on A: %d %s (RateLimit %q)", r.Status, r.Body, r.Header.Get("RateLimit"))
	}
}
