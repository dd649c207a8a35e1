package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// Addresses from the default token registry, and wallets.
const (
	vUSDCEth    = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	vUSDCSol    = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
	vNativeEVM  = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"
	vPayeeEVM   = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	vPayerEVM   = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359"
	vPayeeSol   = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
	vSolNative  = "11111111111111111111111111111111"
	vouchersAPI = "/api/v1/vouchers/"
)

var (
	vSixDigits = regexp.MustCompile(`^[0-9]{6}$`)
	vAPITime   = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
)

// vHarness drives one running voucherd and reads its database directly, to
// show that rejected requests leave the stored voucher byte for byte as it
// was.
type vHarness struct {
	t   *testing.T
	srv *testserver.Server
	db  *storage.DB
}

func startVoucherd(t *testing.T, dialect string, env map[string]string) *vHarness {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	env["VOUCHER_JWT_SECRET"] = testSecret
	srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: env})
	db, err := storage.Open(context.Background(), srv.DatabaseURL, storage.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &vHarness{t: t, srv: srv, db: db}
}

func (h *vHarness) post(path, token string, body any) *testserver.Response {
	h.t.Helper()
	return h.srv.Do(h.t, http.MethodPost, path, token, body)
}

func (h *vHarness) get(path, token string) *testserver.Response {
	h.t.Helper()
	return h.srv.Do(h.t, http.MethodGet, path, token, nil)
}

// ok asserts a 200 and returns the body as an object.
func (h *vHarness) ok(what string, r *testserver.Response) map[string]any {
	h.t.Helper()
	if r.Status != http.StatusOK {
		h.t.Fatalf("%s: %d %s", what, r.Status, r.Body)
	}
	return r.Map(h.t)
}

// fails asserts an error status and code.
func (h *vHarness) fails(what string, r *testserver.Response, status int, code string) {
	h.t.Helper()
	if r.Status != status || r.Code() != code {
		h.t.Fatalf("%s: want %d %s, got %d %s", what, status, code, r.Status, r.Body)
	}
}

// row is the stored voucher, every column as the database returns it.
func (h *vHarness) row(id string) []any {
	h.t.Helper()
	rows, err := h.db.SQL.QueryContext(context.Background(), h.db.Rebind("SELECT * FROM vouchers WHERE id = ?"), id)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return nil
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		h.t.Fatal(err)
	}
	return vals
}

// rejects sends a request that must fail with status and code and must
// leave voucher id's stored row exactly as it was.
func (h *vHarness) rejects(what, id string, send func() *testserver.Response, status int, code string) {
	h.t.Helper()
	before := h.row(id)
	h.fails(what, send(), status, code)
	if after := h.row(id); !reflect.DeepEqual(before, after) {
		h.t.Fatalf("%s changed the stored voucher:\nbefore %v\nafter  %v", what, before, after)
	}
}

func vPath(id, op string) string {
	if op == "" {
		return vouchersAPI + id
	}
	return vouchersAPI + id + "/" + op
}

func simpleRedeem(network, currency, address, amount, wallet string) map[string]any {
	return map[string]any{"expectedPayment": map[string]any{
		"network": network, "currency": currency, "currencyAddress": address, "amount": amount,
		"wallet": map[string]any{"address": wallet},
	}}
}

func customRedeem() map[string]any {
	return map[string]any{
		"networks": []any{map[string]any{"network": "ethereum", "type": "evm", "chainId": "1"}},
		"payments": []any{map[string]any{"type": "send_transaction", "input": map[string]any{
			"from": "{payer}", "to": vUSDCEth, "value": "0", "data": "0xa9059cbb",
		}}},
		"extras":    []any{map[string]any{"type": "call_transaction", "input": map[string]any{"to": vUSDCEth}}},
		"payeeInfo": map[string]any{"name": "Shop"},
	}
}

func supplyPayment(network, currency, address string) map[string]any {
	return map[string]any{"suppliedPayment": map[string]any{
		"network": network, "currency": currency, "currencyAddress": address, "amount": "1",
		"wallet": map[string]any{"address": vPayerEVM},
	}}
}

func str(m map[string]any, path ...string) string {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[p]
	}
	s, _ := v.(string)
	return s
}

// hasOnly fails unless m's keys are exactly keys.
func hasOnly(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
		if _, ok := m[k]; !ok {
			t.Fatalf("%s lacks %q: %v", what, k, m)
		}
	}
	for k := range m {
		if !want[k] {
			t.Fatalf("%s has unexpected %q: %v", what, k, m)
		}
	}
}

// A payer device and a payee resource token walk SIMPLE and CUSTOM vouchers
// through every state over REST, on both databases, provoking every error
// code of the voucher routes on the way; rejected requests never change
// the stored voucher.
func TestVoucherLifecycleEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			h := startVoucherd(t, dialect, nil)
			t.Run("simple", func(t *testing.T) { testSimpleVoucher(t, h) })
			t.Run("custom", func(t *testing.T) { testCustomVoucher(t, h) })
			t.Run("reserve errors", func(t *testing.T) { testReserveErrors(t, h) })
			t.Run("business", func(t *testing.T) { testBusinessVoucher(t, h) })
			t.Run("query", func(t *testing.T) { testVoucherQuery(t, h) })
			t.Run("finance", func(t *testing.T) { testFinanceRoutes(t, h) })
		})
	}
}

func testSimpleVoucher(t *testing.T, h *vHarness) {
	h.t = t
	srv := h.srv
	payer := srv.Device(t)
	sesID, code := srv.Session(t, payer)
	payee := srv.Resource(t, code)
	stranger := srv.Device(t)

	v := h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code}))
	id := str(v, "id")
	hasOnly(t, "reserved voucher", v, "id", "code", "status", "version", "sessionId", "expiresAt", "createdAt", "updatedAt")
	if !strings.HasPrefix(id, "vch_") || !vSixDigits.MatchString(str(v, "code")) || v["status"] != "RESERVED" ||
		v["sessionId"] != sesID || v["version"] != 1.0 || !vAPITime.MatchString(str(v, "expiresAt")) {
		t.Fatalf("reserved %v", v)
	}
	if exp, _ := time.Parse(time.RFC3339, str(v, "expiresAt")); time.Until(exp) < 14*time.Minute || time.Until(exp) > 16*time.Minute {
		t.Fatalf("expiresAt %s is not 15 minutes out", str(v, "expiresAt"))
	}

	// get: payee and payer see it; anyone else is told it does not exist.
	if got := h.ok("payer get", h.get(vPath(id, ""), payer.Token)); got["status"] != "RESERVED" {
		t.Fatalf("payer sees %v", got)
	}
	h.ok("payee get", h.get(vPath(id, ""), payee.Token))
	h.fails("stranger get", h.get(vPath(id, ""), stranger.Token), 404, "not_found")
	h.fails("anonymous get", h.get(vPath(id, ""), ""), 401, "unauthorized")
	h.fails("bad token get", h.get(vPath(id, ""), "not.a.token"), 401, "unauthorized")
	h.fails("unknown get", h.get(vPath("vch_01m7zzzzzzzzzzzzzzzzzzzzzz", ""), payer.Token), 404, "not_found")

	// resolve before redeem: not_redeemed, whatever paymentId it names.
	h.rejects("resolve reserved", id, func() *testserver.Response {
		return h.post(vPath(id, "resolve-voucher"), payer.Token, map[string]any{"receipts": []any{map[string]any{"paymentId": "pmt_x"}}})
	}, 400, "not_redeemed")
	h.rejects("negotiate reserved", id, func() *testserver.Response {
		return h.post(vPath(id, "negotiate-voucher"), payer.Token, supplyPayment("ethereum", "ETH", vNativeEVM))
	}, 400, "not_redeemed")

	redeem := simpleRedeem("ethereum", "USDC", strings.ToLower(vUSDCEth), "12.50", vPayeeEVM)
	for _, c := range []struct {
		what   string
		token  string
		body   any
		status int
		code   string
	}{
		{"anonymous redeem", "", redeem, 401, "unauthorized"},
		{"stranger redeem", stranger.Token, redeem, 404, "not_found"},
		{"stranger redeem, bad body", stranger.Token, `{"nope":1}`, 404, "not_found"},
		{"payer redeem", payer.Token, redeem, 404, "not_found"},
		{"both forms", payee.Token, func() map[string]any { b := customRedeem(); b["expectedPayment"] = redeem["expectedPayment"]; return b }(), 400, "validation_failed"},
		{"neither form", payee.Token, map[string]any{}, 400, "validation_failed"},
		{"unknown field", payee.Token, map[string]any{"expectedPayment": redeem["expectedPayment"], "tip": "1"}, 400, "validation_failed"},
		{"amount as a JSON number", payee.Token, `{"expectedPayment":{"network":"ethereum","currency":"USDC","currencyAddress":"` + vUSDCEth + `","amount":12.5,"wallet":{"address":"` + vPayeeEVM + `"}}}`, 400, "validation_failed"},
		{"too many decimals", payee.Token, simpleRedeem("ethereum", "USDC", vUSDCEth, "1.0000001", vPayeeEVM), 400, "validation_failed"},
		{"bad checksum", payee.Token, simpleRedeem("ethereum", "USDC", vUSDCEth, "1", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"), 400, "validation_failed"},
		{"currency not on the network", payee.Token, simpleRedeem("solana", "ETH", vNativeEVM, "1", vPayeeSol), 400, "validation_failed"},
		{"two JSON values", payee.Token, `{} {}`, 400, "validation_failed"},
		{"not JSON", payee.Token, `{"expectedPayment":`, 400, "validation_failed"},
		{"empty body", payee.Token, ``, 400, "validation_failed"},
		{"over 1 MiB", payee.Token, `{"payeeInfo":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "payload_too_large"},
	} {
		h.rejects(c.what, id, func() *testserver.Response { return h.post(vPath(id, "redeem-voucher"), c.token, c.body) }, c.status, c.code)
	}
	before := time.Now()
	redeemed := h.post(vPath(id, "redeem-voucher"), payee.Token, redeem)
	after := time.Now()
	// The answer says when the change committed (Server-Timing commit;
	// desc="<Unix ns>"), which the bench measures subscribers from.
	var ns int64
	if _, err := fmt.Sscanf(redeemed.Header.Get("Server-Timing"), `commit;desc="%d"`, &ns); err != nil ||
		time.Unix(0, ns).Before(before) || time.Unix(0, ns).After(after) {
		t.Fatalf("redeem's Server-Timing %q (%v) is not a commit instant between %v and %v", redeemed.Header.Get("Server-Timing"), err, before, after)
	}
	r := h.ok("redeem", redeemed)
	exp, _ := r["expectedPayment"].(map[string]any)
	pid := str(r, "expectedPayment", "id")
	if r["status"] != "REDEEMED" || r["type"] != "SIMPLE" || r["version"] != 2.0 || !strings.HasPrefix(pid, "pmt_") ||
		str(exp, "amount") != "12.5" || str(exp, "currencyAddress") != vUSDCEth || str(exp, "wallet", "address") != vPayeeEVM {
		t.Fatalf("redeemed %v", r)
	}
	for _, absent := range []string{"networks", "payments", "extras", "suppliedPayment", "exchangeRate", "receipts", "discardReason", "businessId"} {
		if _, ok := r[absent]; ok {
			t.Fatalf("SIMPLE voucher shows %q: %v", absent, r)
		}
	}
	h.rejects("redeem twice", id, func() *testserver.Response {
		resp := h.post(vPath(id, "redeem-voucher"), payee.Token, redeem)
		if st := resp.Header.Get("Server-Timing"); st != "" {
			t.Fatalf("a redeem that changed nothing says it committed: %q", st)
		}
		return resp
	}, 400, "already_redeemed")
	h.rejects("redeem twice as CUSTOM", id, func() *testserver.Response {
		return h.post(vPath(id, "redeem-voucher"), payee.Token, customRedeem())
	}, 400, "already_redeemed")

	// negotiate: payer only, same network, exact FX.
	eth := supplyPayment("ethereum", "ETH", vNativeEVM)
	h.rejects("payee negotiates", id, func() *testserver.Response { return h.post(vPath(id, "negotiate-voucher"), payee.Token, eth) }, 404, "not_found")
	h.rejects("anonymous negotiate", id, func() *testserver.Response { return h.post(vPath(id, "negotiate-voucher"), "", eth) }, 401, "unauthorized")
	h.rejects("other network", id, func() *testserver.Response {
		return h.post(vPath(id, "negotiate-voucher"), payer.Token, supplyPayment("polygon", "POL", vNativeEVM))
	}, 400, "different_network")
	h.rejects("bad supplied payment", id, func() *testserver.Response {
		return h.post(vPath(id, "negotiate-voucher"), payer.Token, map[string]any{"suppliedPayment": map[string]any{}})
	}, 400, "validation_failed")
	n := h.ok("negotiate", h.post(vPath(id, "negotiate-voucher"), payer.Token, eth))
	// 12.5 USDC at 1 USD, ETH at 3000 USD: 12.5/3000 = 0.0041666..., rounded up at 18 decimals.
	if str(n, "suppliedPayment", "amount") != "0.004166666666666667" || str(n, "exchangeRate") != "0.000333333333333333333" ||
		str(n, "suppliedPayment", "id") != pid || str(n, "suppliedPayment", "wallet", "address") != vPayerEVM ||
		!reflect.DeepEqual(n["expectedPayment"], r["expectedPayment"]) || n["version"] != 3.0 {
		t.Fatalf("negotiated %v", n)
	}
	n = h.ok("negotiate again", h.post(vPath(id, "negotiate-voucher"), payer.Token, supplyPayment("ethereum", "USDC", vUSDCEth)))
	if str(n, "suppliedPayment", "currency") != "USDC" || str(n, "suppliedPayment", "amount") != "12.5" || str(n, "exchangeRate") != "1" {
		t.Fatalf("renegotiated %v", n)
	}

	// resolve: registered payer only, receipts naming the payment.
	receipts := map[string]any{"receipts": []any{map[string]any{"paymentId": pid, "transactionHash": "0xabc", "amount": "12.5"}}}
	h.rejects("resource resolves", id, func() *testserver.Response { return h.post(vPath(id, "resolve-voucher"), payee.Token, receipts) }, 403, "forbidden")
	h.rejects("anonymous resolve", id, func() *testserver.Response { return h.post(vPath(id, "resolve-voucher"), "", receipts) }, 401, "unauthorized")
	h.rejects("stranger resolves", id, func() *testserver.Response { return h.post(vPath(id, "resolve-voucher"), stranger.Token, receipts) }, 404, "not_found")
	h.rejects("unknown paymentId", id, func() *testserver.Response {
		return h.post(vPath(id, "resolve-voucher"), payer.Token, map[string]any{"receipts": []any{map[string]any{"paymentId": "pmt_other"}}})
	}, 400, "validation_failed")
	h.rejects("no receipts", id, func() *testserver.Response {
		return h.post(vPath(id, "resolve-voucher"), payer.Token, map[string]any{"receipts": []any{}})
	}, 400, "validation_failed")
	six := []any{}
	for i := 0; i < 6; i++ {
		six = append(six, map[string]any{"paymentId": pid})
	}
	h.rejects("six receipts", id, func() *testserver.Response {
		return h.post(vPath(id, "resolve-voucher"), payer.Token, map[string]any{"receipts": six})
	}, 400, "validation_failed")
	res := h.ok("resolve", h.post(vPath(id, "resolve-voucher"), payer.Token, receipts))
	if res["status"] != "RESOLVED" || res["version"] != 5.0 {
		t.Fatalf("resolved %v", res)
	}
	// The payee polls the outcome.
	polled := h.ok("payee polls", h.get(vPath(id, ""), payee.Token))
	rec, _ := polled["receipts"].([]any)
	if polled["status"] != "RESOLVED" || len(rec) != 1 || str(rec[0].(map[string]any), "transactionHash") != "0xabc" {
		t.Fatalf("polled %v", polled)
	}
	// ethereum has no chain in this configuration (development): the
	// receipts are trusted and the settlement says so.
	if st, _ := polled["settlement"].(map[string]any); st == nil || st["verified"] != false || st["status"] != "CONFIRMED" ||
		st["paidAmount"] != "12.5" || st["currency"] != "USDC" {
		t.Fatalf("settlement %v", polled["settlement"])
	}
	h.rejects("resolve twice", id, func() *testserver.Response { return h.post(vPath(id, "resolve-voucher"), payer.Token, receipts) }, 400, "already_resolved")
	h.rejects("negotiate resolved", id, func() *testserver.Response { return h.post(vPath(id, "negotiate-voucher"), payer.Token, eth) }, 400, "already_resolved")
	h.rejects("discard resolved", id, func() *testserver.Response { return h.post(vPath(id, "discard-voucher"), payer.Token, nil) }, 400, "already_resolved")
	h.rejects("redeem resolved", id, func() *testserver.Response { return h.post(vPath(id, "redeem-voucher"), payee.Token, redeem) }, 400, "already_redeemed")
}

func testCustomVoucher(t *testing.T, h *vHarness) {
	h.t = t
	srv := h.srv
	payer := srv.Device(t)
	_, code := srv.Session(t, payer)
	payee := srv.Resource(t, code)
	stranger := srv.Device(t)

	id := str(h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code})), "id")
	bad := customRedeem()
	bad["payments"] = []any{map[string]any{"type": "send_transaction", "input": map[string]any{"from": vPayeeEVM, "to": vUSDCEth, "value": "-1", "data": "0xabc"}}}
	h.rejects("bad custom parts", id, func() *testserver.Response { return h.post(vPath(id, "redeem-voucher"), payee.Token, bad) }, 400, "validation_failed")
	r := h.post(vPath(id, "redeem-voucher"), payee.Token, bad)
	body := string(r.Body)
	for _, field := range []string{"payments[0].input.from", "payments[0].input.value", "payments[0].input.data"} {
		if !strings.Contains(body, field) {
			t.Fatalf("error does not name %s: %s", field, body)
		}
	}
	four := customRedeem()
	four["networks"] = []any{
		map[string]any{"network": "ethereum", "type": "evm", "chainId": "1"}, map[string]any{"network": "polygon", "type": "evm", "chainId": "137"},
		map[string]any{"network": "base", "type": "evm", "chainId": "8453"}, map[string]any{"network": "arbitrum", "type": "evm", "chainId": "42161"},
	}
	h.rejects("four networks", id, func() *testserver.Response { return h.post(vPath(id, "redeem-voucher"), payee.Token, four) }, 400, "validation_failed")

	c := h.ok("redeem CUSTOM", h.post(vPath(id, "redeem-voucher"), payee.Token, customRedeem()))
	pays, _ := c["payments"].([]any)
	if c["type"] != "CUSTOM" || len(pays) != 1 || c["extras"] == nil || c["networks"] == nil || c["payeeInfo"] == nil {
		t.Fatalf("CUSTOM %v", c)
	}
	if _, ok := c["expectedPayment"]; ok {
		t.Fatalf("CUSTOM shows expectedPayment: %v", c)
	}
	pid := str(pays[0].(map[string]any), "id")
	h.rejects("negotiate CUSTOM", id, func() *testserver.Response {
		return h.post(vPath(id, "negotiate-voucher"), payer.Token, supplyPayment("ethereum", "ETH", vNativeEVM))
	}, 400, "not_simple")

	// interop-init: the payer's signature for one payment.
	interop := func(token, query string, body any) *testserver.Response {
		return h.post(vPath(id, "submit/interop-init")+query, token, body)
	}
	sub := h.ok("interop-init", interop(payer.Token, "?id=sig-1&paymentIndex=0", map[string]any{"signature": "0xfeed"}))
	hasOnly(t, "submission", sub, "id", "voucherId", "paymentIndex", "signature", "createdAt")
	if sub["id"] != "sig-1" || sub["voucherId"] != id || sub["paymentIndex"] != 0.0 || sub["signature"] != "0xfeed" || !vAPITime.MatchString(str(sub, "createdAt")) {
		t.Fatalf("submission %v", sub)
	}
	again := h.ok("interop-init replay", interop(payer.Token, "?id=sig-1&paymentIndex=0", map[string]any{"signature": "0xfeed"}))
	if !reflect.DeepEqual(again, sub) {
		t.Fatalf("replay %v, first %v", again, sub)
	}
	h.ok("interop-init without body", interop(payer.Token, "?id=sig-2", nil))
	h.fails("interop-init other content", interop(payer.Token, "?id=sig-1", map[string]any{"signature": "0xbeef"}), 400, "already_exists")
	h.fails("interop-init anonymous", interop("", "?id=x", nil), 401, "unauthorized")
	h.fails("interop-init payee", interop(payee.Token, "?id=x", nil), 404, "not_found")
	h.fails("interop-init stranger", interop(stranger.Token, "?id=x", nil), 404, "not_found")
	h.fails("interop-init unknown vid", interop(payer.Token, "?id=x&vid=vch_01m7zzzzzzzzzzzzzzzzzzzzzz", nil), 404, "not_found")
	h.fails("interop-init no id", interop(payer.Token, "", nil), 400, "validation_failed")
	h.fails("interop-init index 11", interop(payer.Token, "?id=x&paymentIndex=11", nil), 400, "validation_failed")
	h.fails("interop-init index not a number", interop(payer.Token, "?id=x&paymentIndex=one", nil), 400, "validation_failed")
	h.fails("interop-init index past the payments", interop(payer.Token, "?id=x&paymentIndex=1", nil), 400, "validation_failed")
	h.fails("interop-init long signature", interop(payer.Token, "?id=x", map[string]any{"signature": strings.Repeat("a", 257)}), 400, "validation_failed")
	h.fails("interop-init empty signature", interop(payer.Token, "?id=x", map[string]any{"signature": ""}), 400, "validation_failed")

	// discard by the payee; every later transition is discarded.
	h.fails("stranger discards", h.post(vPath(id, "discard-voucher"), stranger.Token, nil), 404, "not_found")
	d := h.ok("discard", h.post(vPath(id, "discard-voucher"), payee.Token, nil))
	if d["status"] != "DISCARDED" || d["discardReason"] != "discarded" {
		t.Fatalf("discarded %v", d)
	}
	h.rejects("discard twice", id, func() *testserver.Response {
		return h.post(vPath(id, "discard-voucher"), payer.Token, map[string]any{})
	}, 400, "discarded")
	h.rejects("redeem discarded", id, func() *testserver.Response { return h.post(vPath(id, "redeem-voucher"), payee.Token, customRedeem()) }, 400, "discarded")
	h.rejects("resolve discarded", id, func() *testserver.Response {
		return h.post(vPath(id, "resolve-voucher"), payer.Token, map[string]any{"receipts": []any{map[string]any{"paymentId": pid}}})
	}, 400, "discarded")
	h.rejects("discard with a body", id, func() *testserver.Response {
		return h.post(vPath(id, "discard-voucher"), payer.Token, map[string]any{"reason": "x"})
	}, 400, "validation_failed")
}

func testReserveErrors(t *testing.T, h *vHarness) {
	h.t = t
	srv := h.srv
	payer := srv.Device(t)
	_, code := srv.Session(t, payer)
	payee := srv.Resource(t, code)
	otherOwner := srv.Device(t)
	otherSes, otherCode := srv.Session(t, otherOwner)
	user := srv.User(t)
	reserve := func(token string, body any) *testserver.Response {
		return h.post(vouchersAPI+"reserve-voucher", token, body)
	}
	h.fails("anonymous", reserve("", map[string]any{"code": code}), 401, "unauthorized")
	h.fails("missing code", reserve(user.Token, map[string]any{}), 400, "validation_failed")
	h.fails("code as a number", reserve(user.Token, `{"code": 123456}`), 400, "validation_failed")
	h.fails("malformed code", reserve(user.Token, map[string]any{"code": "AB"}), 400, "invalid_code")
	h.fails("unknown code", reserve(user.Token, map[string]any{"code": "ZZZZZZ"}), 404, "not_found")
	h.fails("resource on another context", reserve(payee.Token, map[string]any{"code": otherCode}), 404, "not_found")
	h.ok("close a context", h.post("/api/v1/vouchers/sessions/"+otherSes+"/close-session", otherOwner.Token, nil))
	h.fails("closed context", reserve(user.Token, map[string]any{"code": otherCode}), 400, "invalid_code")
	// A registered user reserves as the payee; the context's owner is the payer.
	v := h.ok("user reserve", reserve(user.Token, map[string]any{"code": strings.ToLower(code)}))
	h.ok("payer sees it", h.get(vPath(str(v, "id"), ""), payer.Token))
	h.fails("the resource does not", h.get(vPath(str(v, "id"), ""), payee.Token), 404, "not_found")
}

func testBusinessVoucher(t *testing.T, h *vHarness) {
	h.t = t
	srv := h.srv
	payer := srv.Device(t)
	_, code := srv.Session(t, payer)
	owner := srv.User(t)
	outsider := srv.User(t)
	biz := h.ok("create business", h.post("/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Shop"}))
	bizID := str(biz, "id")

	h.fails("outsider reserves for it", h.post(vouchersAPI+"reserve-voucher", outsider.Token, map[string]any{"code": code, "businessId": bizID}), 404, "not_found")
	h.fails("device reserves for it", h.post(vouchersAPI+"reserve-voucher", payer.Token, map[string]any{"code": code, "businessId": bizID}), 404, "not_found")
	v := h.ok("reserve for the business", h.post(vouchersAPI+"reserve-voucher", owner.Token, map[string]any{"code": code, "businessId": bizID}))
	id := str(v, "id")
	if v["businessId"] != bizID {
		t.Fatalf("business voucher %v", v)
	}
	h.ok("redeem a deposit", h.post(vPath(id, "redeem-voucher"), owner.Token, simpleRedeem("solana", "USDC", vUSDCSol, "1", vPayeeSol)))
	n := h.ok("negotiate a deposit", h.post(vPath(id, "negotiate-voucher"), payer.Token, map[string]any{"suppliedPayment": map[string]any{
		"network": "solana", "currency": "SOL", "currencyAddress": vSolNative, "amount": "1", "wallet": map[string]any{"address": vPayeeSol},
	}}))
	// 1 USDC at 1 USD in SOL at 150 USD: 1/150 = 0.00666..., up at 9 decimals.
	if str(n, "suppliedPayment", "amount") != "0.006666667" {
		t.Fatalf("negotiated deposit %v", n)
	}
	h.fails("outsider reads it", h.get(vPath(id, ""), outsider.Token), 404, "not_found")
	var listed []map[string]any
	h.get("/api/v1/vouchers?code="+str(v, "code"), owner.Token).JSON(t, &listed)
	if len(listed) != 1 || listed[0]["id"] != id || listed[0]["businessId"] != bizID {
		t.Fatalf("the owner's query lists %v", listed)
	}

	if r := h.post("/api/v1/businesses/"+bizID+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}); r.Status != 200 {
		t.Fatalf("deactivate: %d %s", r.Status, r.Body)
	}
	h.fails("reserve for an inactive business", h.post(vouchersAPI+"reserve-voucher", owner.Token, map[string]any{"code": code, "businessId": bizID}), 400, "business_inactive")
	h.ok("an inactive business keeps its reads", h.get(vPath(id, ""), owner.Token))
}

func testVoucherQuery(t *testing.T, h *vHarness) {
	h.t = t
	srv := h.srv
	payer := srv.Device(t)
	sesID, code := srv.Session(t, payer)
	payee := srv.Resource(t, code)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, str(h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code})), "id"))
	}
	h.ok("redeem", h.post(vPath(ids[1], "redeem-voucher"), payee.Token, simpleRedeem("ethereum", "USDC", vUSDCEth, "1", vPayeeEVM)))
	first := h.ok("get", h.get(vPath(ids[0], ""), payer.Token))

	query := func(token, q string) []any {
		t.Helper()
		r := h.get("/api/v1/vouchers"+q, token)
		if r.Status != 200 {
			t.Fatalf("query %s: %d %s", q, r.Status, r.Body)
		}
		var out []any
		r.JSON(t, &out)
		return out
	}
	idsOf := func(list []any) string {
		var out []string
		for _, v := range list {
			out = append(out, str(v.(map[string]any), "id"))
		}
		return strings.Join(out, ",")
	}
	if got := idsOf(query(payer.Token, "?code="+str(first, "code"))); got != ids[0] {
		t.Fatalf("by code: %s", got)
	}
	if got := idsOf(query(payer.Token, "?sessionId="+sesID)); got != ids[2]+","+ids[1]+","+ids[0] {
		t.Fatalf("newest first: %s", got)
	}
	if got := idsOf(query(payer.Token, "?sessionId="+sesID+"&status=REDEEMED")); got != ids[1] {
		t.Fatalf("by status: %s", got)
	}
	if got := idsOf(query(payer.Token, "?sessionId="+sesID+"&limit=1&offset=1")); got != ids[1] {
		t.Fatalf("paged: %s", got)
	}
	if got := query(srv.Device(t).Token, ""); len(got) != 0 {
		t.Fatalf("a stranger lists %v", got)
	}
	if r := h.get("/api/v1/vouchers?sessionId=ses_none", payer.Token); string(r.Body) != "[]" {
		t.Fatalf("empty list renders %q", r.Body)
	}
	h.fails("query anonymous", h.get("/api/v1/vouchers", ""), 401, "unauthorized")
	h.fails("query bad limit", h.get("/api/v1/vouchers?limit=0", payer.Token), 400, "validation_failed")
	h.fails("query limit not a number", h.get("/api/v1/vouchers?limit=x", payer.Token), 400, "validation_failed")
	h.fails("query bad status", h.get("/api/v1/vouchers?status=EXPIRED", payer.Token), 400, "validation_failed")
	h.fails("query bad code", h.get("/api/v1/vouchers?code=12", payer.Token), 400, "validation_failed")
}

func testFinanceRoutes(t *testing.T, h *vHarness) {
	h.t = t
	r := h.get("/api/v1/finance/currencies", "")
	if r.Status != 200 {
		t.Fatalf("currencies: %d %s", r.Status, r.Body)
	}
	var all []map[string]any
	r.JSON(t, &all)
	found := false
	for _, c := range all {
		if c["network"] == "ethereum" && c["currency"] == "USDC" && c["currencyAddress"] == vUSDCEth && c["decimals"] == 6.0 && c["native"] == false {
			found = true
		}
	}
	if !found || len(all) < 10 {
		t.Fatalf("currencies %v", all)
	}
	var sol []map[string]any
	h.get("/api/v1/finance/currencies?network=solana", "").JSON(t, &sol)
	for _, c := range sol {
		if c["network"] != "solana" {
			t.Fatalf("solana list has %v", c)
		}
	}
	if len(sol) != 3 {
		t.Fatalf("solana currencies %v", sol)
	}
	h.fails("unknown network", h.get("/api/v1/finance/currencies?network=nope", ""), 400, "validation_failed")
	rates := h.ok("rates", h.get("/api/v1/finance/rates", ""))
	rs, _ := rates["rates"].(map[string]any)
	if rates["base"] != "USD" || rs["ETH"] != "3000" || rs["USDC"] != "1" || rs["POL"] != "0.5" || !vAPITime.MatchString(str(rates, "updatedAt")) {
		t.Fatalf("rates %v", rates)
	}
	if src, _ := rates["sources"].(map[string]any); src == nil || fmt.Sprint(src["ETH"]) != "map[source:file updatedAt:"+str(rates, "updatedAt")+"]" {
		t.Fatalf("rates sources %v", rates["sources"])
	}
}

// Expiry: reads show an expired voucher as DISCARDED at once, transitions
// on it are expired, and the sweeper records it with a new version.
func TestVoucherExpiryEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			h := startVoucherd(t, dialect, map[string]string{"VOUCHER_VOUCHER_TTL": "1s", "VOUCHER_SWEEP_INTERVAL": "300ms"})
			srv := h.srv
			payer := srv.Device(t)
			_, code := srv.Session(t, payer)
			payee := srv.Resource(t, code)
			reserved := str(h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code})), "id")
			redeemed := str(h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code})), "id")
			h.ok("redeem", h.post(vPath(redeemed, "redeem-voucher"), payee.Token, simpleRedeem("ethereum", "USDC", vUSDCEth, "1", vPayeeEVM)))
			time.Sleep(1100 * time.Millisecond)

			for _, id := range []string{reserved, redeemed} {
				v := h.ok("expired read", h.get(vPath(id, ""), payer.Token))
				if v["status"] != "DISCARDED" || v["discardReason"] != "expired" {
					t.Fatalf("expired voucher reads %v", v)
				}
			}
			h.fails("redeem expired", h.post(vPath(reserved, "redeem-voucher"), payee.Token, simpleRedeem("ethereum", "USDC", vUSDCEth, "1", vPayeeEVM)), 400, "expired")
			h.fails("discard expired", h.post(vPath(redeemed, "discard-voucher"), payee.Token, nil), 400, "expired")
			h.fails("resolve expired", h.post(vPath(redeemed, "resolve-voucher"), payer.Token, map[string]any{"receipts": []any{map[string]any{"paymentId": "pmt_x"}}}), 400, "expired")
			h.fails("negotiate expired", h.post(vPath(redeemed, "negotiate-voucher"), payer.Token, supplyPayment("ethereum", "ETH", vNativeEVM)), 400, "expired")

			deadline := time.Now().Add(10 * time.Second)
			for {
				var status string
				var version int
				err := h.db.SQL.QueryRow(h.db.Rebind("SELECT status, version FROM vouchers WHERE id = ?"), redeemed).Scan(&status, &version)
				if err != nil {
					t.Fatal(err)
				}
				if status == "DISCARDED" {
					if version != 3 {
						t.Fatalf("swept version %d", version)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the sweeper never recorded the expiry (status %s)", status)
				}
				time.Sleep(100 * time.Millisecond)
			}
			v := h.ok("swept read", h.get(vPath(redeemed, ""), payee.Token))
			if v["status"] != "DISCARDED" || v["discardReason"] != "expired" || v["version"] != 3.0 {
				t.Fatalf("swept voucher %v", v)
			}
		})
	}
}

// Fifty payees' redeems of one voucher race over HTTP against the real
// binary: one wins, the rest are told it is already redeemed.
func TestConcurrentRedeemEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			h := startVoucherd(t, dialect, nil)
			payer := h.srv.Device(t)
			_, code := h.srv.Session(t, payer)
			payee := h.srv.Resource(t, code)
			id := str(h.ok("reserve", h.post(vouchersAPI+"reserve-voucher", payee.Token, map[string]any{"code": code})), "id")
			body := simpleRedeem("ethereum", "USDC", vUSDCEth, "1", vPayeeEVM)
			raw, _ := json.Marshal(body)
			results := make(chan string, 50)
			for i := 0; i < 50; i++ {
				go func() {
					req, _ := http.NewRequest(http.MethodPost, h.srv.URL+vPath(id, "redeem-voucher"), bytes.NewReader(raw))
					req.Header.Set("Authorization", "Bearer "+payee.Token)
					resp, err := h.srv.Client.Do(req)
					if err != nil {
						results <- err.Error()
						return
					}
					defer resp.Body.Close()
					var e struct{ Code string }
					if resp.StatusCode != http.StatusOK {
						_ = json.NewDecoder(resp.Body).Decode(&e)
					}
					results <- fmt.Sprintf("%d %s", resp.StatusCode, e.Code)
				}()
			}
			counts := map[string]int{}
			for i := 0; i < 50; i++ {
				counts[<-results]++
			}
			if counts["200 "] != 1 || counts["400 already_redeemed"] != 49 {
				t.Fatalf("outcomes %v", counts)
			}
		})
	}
}
