package rest_test

import (
	"encoding/json"
	"html"
	"net/url"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const usdcSol = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"

// A checkout on a Solana network carries a fresh Solana Pay reference key
// in its paymentUri (as the transfer-request spec's reference parameter),
// its public view (REST and the hosted page) and its voucher (REST and
// GraphQL); an EVM checkout has none. Through the binary, on both
// databases.
func TestSolanaPayReference(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner := srv.User(t)
			biz := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"}).Map(t)["id"].(string)
			body := widgetBody("Shop")
			body["accepts"] = append(body["accepts"].([]map[string]any), map[string]any{"network": "solana", "currency": "SOL"})
			r := srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", owner.Token, body)
			if r.Status != 200 {
				t.Fatalf("create-widget: %d %s", r.Status, r.Body)
			}
			w := r.Map(t)
			coPath := "/api/v1/widgets/" + w["id"].(string) + "/create-checkout"
			secret := w["clientSecret"].(string)

			type checkout struct{ id, token string }
			create := func(network, currency, amount string) checkout {
				t.Helper()
				r := doSecret(t, srv, "POST", coPath, secret, "", map[string]any{"network": network, "currency": currency, "amount": amount})
				if r.Status != 200 {
					t.Fatalf("create-checkout %s %s: %d %s", network, currency, r.Status, r.Body)
				}
				co := r.Map(t)
				return checkout{co["id"].(string), strings.TrimPrefix(co["checkoutUrl"].(string), srv.URL+"/checkout/")}
			}
			public := func(c checkout) map[string]any {
				t.Helper()
				r := srv.Do(t, "GET", "/api/v1/checkout/"+c.token, "", nil)
				if r.Status != 200 {
					t.Fatalf("public view: %d %s", r.Status, r.Body)
				}
				return r.Map(t)
			}
			voucher := func(c checkout) map[string]any {
				t.Helper()
				r := srv.Do(t, "GET", "/api/v1/vouchers/"+c.id, owner.Token, nil)
				if r.Status != 200 {
					t.Fatalf("voucher: %d %s", r.Status, r.Body)
				}
				return r.Map(t)
			}

			usdc1, usdc2, sol := create("solana", "USDC", "12.5"), create("solana", "USDC", "12.5"), create("solana", "SOL", "0.25")
			refs := map[string]bool{}
			for _, tc := range []struct {
				c    checkout
				want func(ref string) string
			}{
				{usdc1, func(ref string) string {
					return "solana:" + payeeSolana + "?amount=12.5&spl-token=" + usdcSol + "&reference=" + ref
				}},
				{usdc2, func(ref string) string {
					return "solana:" + payeeSolana + "?amount=12.5&spl-token=" + usdcSol + "&reference=" + ref
				}},
				{sol, func(ref string) string { return "solana:" + payeeSolana + "?amount=0.25&reference=" + ref }},
			} {
				pub := public(tc.c)
				ref, _ := pub["solanaPayReference"].(string)
				if b, err := chain.DecodeBase58(ref); err != nil || len(b) != 32 {
					t.Fatalf("solanaPayReference %q is not base58 of 32 bytes (%v): %v", ref, err, pub)
				}
				if refs[ref] {
					t.Fatalf("two checkouts share the reference %s", ref)
				}
				refs[ref] = true
				if pub["paymentUri"] != tc.want(ref) || pub["payeeAddress"] != payeeSolana {
					t.Fatalf("public view: paymentUri %v, want %s", pub["paymentUri"], tc.want(ref))
				}
				// The URI parses as a transfer request with one reference.
				u, err := url.Parse(pub["paymentUri"].(string))
				if err != nil || u.Scheme != "solana" || u.Opaque != payeeSolana || len(u.Query()["reference"]) != 1 || u.Query().Get("reference") != ref {
					t.Fatalf("paymentUri %v does not parse as a transfer request: %v", pub["paymentUri"], err)
				}
				// The voucher, REST and GraphQL.
				if v := voucher(tc.c); v["solanaPayReference"] != ref {
					t.Fatalf("voucher: solanaPayReference %v, want %s", v["solanaPayReference"], ref)
				}
				g := srv.GraphQL(t, owner.Token, `query($id: ID!) { node(id: $id) { ... on Voucher { solanaPayReference } } }`, map[string]any{"id": tc.c.id})
				var data struct {
					Node struct {
						SolanaPayReference *string `json:"solanaPayReference"`
					} `json:"node"`
				}
				if len(g.Errors) > 0 || json.Unmarshal(g.Data, &data) != nil || data.Node.SolanaPayReference == nil || *data.Node.SolanaPayReference != ref {
					t.Fatalf("GraphQL: %s %v", g.Data, g.Errors)
				}
				// The hosted page shows it and puts it in the QR code's URI.
				page := srv.Do(t, "GET", "/checkout/"+tc.c.token, "", nil)
				if page.Status != 200 {
					t.Fatalf("page: %d", page.Status)
				}
				s := string(page.Body)
				if !strings.Contains(s, `data-reference="`+ref+`"`) || !strings.Contains(s, `data-payment-uri="`+html.EscapeString(tc.want(ref))+`"`) {
					t.Fatalf("the page does not show reference %s in its hooks:\n%s", ref, s)
				}
			}

			// An EVM checkout has no reference, anywhere.
			evm := create("ethereum", "USDC", "12.5")
			if pub := public(evm); pub["solanaPayReference"] != nil || strings.Contains(pub["paymentUri"].(string), "reference") {
				t.Fatalf("EVM public view: %v", pub)
			}
			if v := voucher(evm); v["solanaPayReference"] != nil {
				t.Fatalf("EVM voucher: %v", v)
			}
			if page := srv.Do(t, "GET", "/checkout/"+evm.token, "", nil); strings.Contains(string(page.Body), "data-reference") {
				t.Fatal("the EVM page shows a Solana Pay reference")
			}
		})
	}
}
