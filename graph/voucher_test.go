package graph_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const (
	gvUSDCEth   = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	gvNativeEVM = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"
	gvPayee     = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	gvPayer     = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359"
)

const gvVoucherFields = `id code status type version sessionId businessId
	expectedPayment { id network currency currencyAddress amount wallet { address } }
	suppliedPayment { id network currency currencyAddress amount wallet { address } }
	exchangeRate networks { network type chainId } payments { id type input { from to value data } }
	extras payeeInfo receipts { paymentId transactionHash amount } discardReason expiresAt createdAt updatedAt`

// gvDo runs a GraphQL document and returns its data (nil on errors) and
// the first error's code.
func gvDo(t *testing.T, srv *testserver.Server, token, query string, vars map[string]any) (map[string]any, string) {
	t.Helper()
	g := srv.GraphQL(t, token, query, vars)
	var data map[string]any
	if len(g.Data) > 0 {
		_ = json.Unmarshal(g.Data, &data)
	}
	return data, g.ErrorCode()
}

// gvOK runs a document that must succeed and returns its root field.
func gvOK(t *testing.T, srv *testserver.Server, token, query string, vars map[string]any, field string) map[string]any {
	t.Helper()
	g := srv.GraphQL(t, token, query, vars)
	if len(g.Errors) > 0 {
		t.Fatalf("%s: %+v", field, g.Errors)
	}
	var data map[string]map[string]any
	if err := json.Unmarshal(g.Data, &data); err != nil {
		t.Fatalf("%s: %s", field, g.Data)
	}
	return data[field]
}

func gvFails(t *testing.T, srv *testserver.Server, what, token, query string, vars map[string]any, code string) {
	t.Helper()
	if _, got := gvDo(t, srv, token, query, vars); got != code {
		t.Fatalf("%s: want %s, got %q", what, code, got)
	}
}

func gvStr(m map[string]any, path ...string) string {
	var v any = m
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	s, _ := v.(string)
	return s
}

const (
	gqlReserve   = `mutation($in: ReserveVoucherInput!) { reserveVoucher(input: $in) { ` + gvVoucherFields + ` } }`
	gqlRedeem    = `mutation($id: ID!, $in: RedeemVoucherInput!) { redeemVoucher(id: $id, input: $in) { ` + gvVoucherFields + ` } }`
	gqlNegotiate = `mutation($id: ID!, $in: NegotiateVoucherInput!) { negotiateVoucher(id: $id, input: $in) { ` + gvVoucherFields + ` } }`
	gqlResolve   = `mutation($id: ID!, $in: ResolveVoucherInput!) { resolveVoucher(id: $id, input: $in) { ` + gvVoucherFields + ` } }`
	gqlDiscard   = `mutation($id: ID!) { discardVoucher(id: $id) { ` + gvVoucherFields + ` } }`
	gqlInterop   = `mutation($id: ID!, $in: InteropInitInput!) { interopInit(id: $id, input: $in) { id voucherId paymentIndex signature createdAt } }`
	gqlVoucher   = `query($id: ID!) { voucher(id: $id) { ` + gvVoucherFields + ` } }`
)

func gvSimple(amount string) map[string]any {
	return map[string]any{"expectedPayment": map[string]any{
		"network": "ethereum", "currency": "USDC", "currencyAddress": gvUSDCEth, "amount": amount,
		"wallet": map[string]any{"address": gvPayee},
	}}
}

func gvCustom() map[string]any {
	return map[string]any{
		"networks": []any{map[string]any{"network": "ethereum", "type": "evm", "chainId": "1"}},
		"payments": []any{map[string]any{"type": "send_transaction", "input": map[string]any{
			"from": "{payer}", "to": gvUSDCEth, "value": "0", "data": "0xa9059cbb",
		}}},
		"extras":    []any{map[string]any{"type": "call_transaction"}},
		"payeeInfo": map[string]any{"name": "Shop"},
	}
}

// The voucher lifecycle as GraphQL mutations against the real binary, on
// both databases, with the same codes the REST door gives.
func TestVoucherMutationsEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			payer := srv.Device(t)
			sesID, code := srv.Session(t, payer)
			payee := srv.Resource(t, code)
			stranger := srv.Device(t)

			v := gvOK(t, srv, payee.Token, gqlReserve, map[string]any{"in": map[string]any{"code": code}}, "reserveVoucher")
			id := gvStr(v, "id")
			if v["status"] != "RESERVED" || v["sessionId"] != sesID || v["version"] != 1.0 || v["type"] != nil || v["expectedPayment"] != nil {
				t.Fatalf("reserved %v", v)
			}
			gvFails(t, srv, "anonymous reserve", "", gqlReserve, map[string]any{"in": map[string]any{"code": code}}, "unauthorized")
			gvFails(t, srv, "malformed code", payee.Token, gqlReserve, map[string]any{"in": map[string]any{"code": "AB"}}, "invalid_code")

			// voucher(id:) is null for anyone who may not see it, as node(id:) is.
			data, _ := gvDo(t, srv, stranger.Token, gqlVoucher, map[string]any{"id": id})
			if data["voucher"] != nil {
				t.Fatalf("a stranger sees %v", data)
			}
			data, _ = gvDo(t, srv, stranger.Token, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": id})
			if data["node"] != nil {
				t.Fatalf("a stranger's node %v", data)
			}
			if got := gvOK(t, srv, payer.Token, gqlVoucher, map[string]any{"id": id}, "voucher"); got["id"] != id {
				t.Fatalf("payer reads %v", got)
			}

			both := gvCustom()
			both["expectedPayment"] = gvSimple("1")["expectedPayment"]
			gvFails(t, srv, "both forms", payee.Token, gqlRedeem, map[string]any{"id": id, "in": both}, "validation_failed")
			gvFails(t, srv, "amount as a number", payee.Token, gqlRedeem, map[string]any{"id": id, "in": map[string]any{"expectedPayment": map[string]any{
				"network": "ethereum", "currency": "USDC", "currencyAddress": gvUSDCEth, "amount": 12.5, "wallet": map[string]any{"address": gvPayee},
			}}}, "validation_failed")
			gvFails(t, srv, "stranger redeems", stranger.Token, gqlRedeem, map[string]any{"id": id, "in": gvSimple("1")}, "not_found")
			r := gvOK(t, srv, payee.Token, gqlRedeem, map[string]any{"id": id, "in": gvSimple("12.50")}, "redeemVoucher")
			pid := gvStr(r, "expectedPayment", "id")
			if r["status"] != "REDEEMED" || r["type"] != "SIMPLE" || gvStr(r, "expectedPayment", "amount") != "12.5" || !strings.HasPrefix(pid, "pmt_") {
				t.Fatalf("redeemed %v", r)
			}
			gvFails(t, srv, "redeem twice", payee.Token, gqlRedeem, map[string]any{"id": id, "in": gvSimple("1")}, "already_redeemed")
			// The REST door says the same.
			if rr := srv.Do(t, http.MethodPost, "/api/v1/vouchers/"+id+"/redeem-voucher", payee.Token, gvSimple("1")); rr.Code() != "already_redeemed" {
				t.Fatalf("REST twin: %d %s", rr.Status, rr.Body)
			}

			eth := map[string]any{"suppliedPayment": map[string]any{
				"network": "ethereum", "currency": "ETH", "currencyAddress": gvNativeEVM, "amount": "1", "wallet": map[string]any{"address": gvPayer},
			}}
			gvFails(t, srv, "payee negotiates", payee.Token, gqlNegotiate, map[string]any{"id": id, "in": eth}, "not_found")
			n := gvOK(t, srv, payer.Token, gqlNegotiate, map[string]any{"id": id, "in": eth}, "negotiateVoucher")
			if gvStr(n, "suppliedPayment", "amount") != "0.004166666666666667" || n["exchangeRate"] != "0.000333333333333333333" ||
				gvStr(n, "expectedPayment", "amount") != "12.5" {
				t.Fatalf("negotiated %v", n)
			}

			in := map[string]any{"receipts": []any{map[string]any{"paymentId": pid, "transactionHash": "0xabc"}}}
			gvFails(t, srv, "resource resolves", payee.Token, gqlResolve, map[string]any{"id": id, "in": in}, "forbidden")
			gvFails(t, srv, "unknown payment", payer.Token, gqlResolve, map[string]any{"id": id, "in": map[string]any{"receipts": []any{map[string]any{"paymentId": "pmt_x"}}}}, "validation_failed")
			res := gvOK(t, srv, payer.Token, gqlResolve, map[string]any{"id": id, "in": in}, "resolveVoucher")
			rec, _ := res["receipts"].([]any)
			if res["status"] != "RESOLVED" || len(rec) != 1 || res["version"] != 4.0 {
				t.Fatalf("resolved %v", res)
			}
			gvFails(t, srv, "resolve twice", payer.Token, gqlResolve, map[string]any{"id": id, "in": in}, "already_resolved")

			c := gvOK(t, srv, payee.Token, gqlReserve, map[string]any{"in": map[string]any{"code": code}}, "reserveVoucher")
			cid := gvStr(c, "id")
			c = gvOK(t, srv, payee.Token, gqlRedeem, map[string]any{"id": cid, "in": gvCustom()}, "redeemVoucher")
			extras, _ := c["extras"].([]any)
			if c["type"] != "CUSTOM" || len(extras) != 1 || gvStr(c, "payeeInfo", "name") != "Shop" || c["expectedPayment"] != nil {
				t.Fatalf("CUSTOM %v", c)
			}
			gvFails(t, srv, "negotiate CUSTOM", payer.Token, gqlNegotiate, map[string]any{"id": cid, "in": eth}, "not_simple")
			sub := gvOK(t, srv, payer.Token, gqlInterop, map[string]any{"id": cid, "in": map[string]any{"id": "sig-1", "paymentIndex": 0, "signature": "0xfeed"}}, "interopInit")
			if sub["id"] != "sig-1" || sub["voucherId"] != cid || sub["paymentIndex"] != 0.0 || sub["signature"] != "0xfeed" {
				t.Fatalf("submission %v", sub)
			}
			gvFails(t, srv, "interop index 11", payer.Token, gqlInterop, map[string]any{"id": cid, "in": map[string]any{"id": "x", "paymentIndex": 11}}, "validation_failed")
			d := gvOK(t, srv, payer.Token, gqlDiscard, map[string]any{"id": cid}, "discardVoucher")
			if d["status"] != "DISCARDED" || d["discardReason"] != "discarded" {
				t.Fatalf("discarded %v", d)
			}
			gvFails(t, srv, "discard twice", payee.Token, gqlDiscard, map[string]any{"id": cid}, "discarded")

			cur, _ := gvDo(t, srv, "", `{ currencies(network: "solana") { network currency currencyAddress decimals native } rates { base rates updatedAt } }`, nil)
			list, _ := cur["currencies"].([]any)
			rates, _ := cur["rates"].(map[string]any)
			rs, _ := rates["rates"].(map[string]any)
			if len(list) != 3 || gvStr(list[0].(map[string]any), "network") != "solana" || rates["base"] != "USD" || rs["SOL"] != "150" ||
				!strings.HasSuffix(gvStr(rates, "updatedAt"), "Z") {
				t.Fatalf("finance %v", cur)
			}
			gvFails(t, srv, "unknown network", "", `{ currencies(network: "nope") { currency } }`, nil, "validation_failed")
		})
	}
}
