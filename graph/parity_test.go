package graph_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The parity suite: every main voucher scenario runs once through REST and
// once through GraphQL, on fresh callers, and each step must end the same
// way on both doors: the same error code (with REST's status the one the
// code stands for), or the same resulting object, field for field (values
// that differ per run, like ids and times, only need to be present in
// both). A rule changed on one door, or a field shown on one only, fails it.
func TestRESTAndGraphQLParity(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			for _, sc := range parityScenarios {
				t.Run(sc.name, func(t *testing.T) {
					rest := runScenario(t, srv, restDoor{srv}, sc.run)
					gql := runScenario(t, srv, graphDoor{srv}, sc.run)
					if len(rest) != len(gql) {
						t.Fatalf("REST ran %d steps, GraphQL %d", len(rest), len(gql))
					}
					for i := range rest {
						compareStep(t, rest[i], gql[i])
					}
				})
			}
		})
	}
}

// outcome is how one step ended on one door.
type outcome struct {
	step   string
	code   string // error code, "" on success
	status int    // REST's HTTP status (0 on GraphQL)
	value  any    // the result (JSON-decoded), nulls dropped
}

// door is one of the two ways in. Bodies are the REST JSON bodies; the
// GraphQL door passes the same object as the mutation's input, since the
// types use the REST field names.
type door interface {
	reserve(token string, body map[string]any) outcome
	get(token, id string) outcome
	redeem(token, id string, body map[string]any) outcome
	negotiate(token, id string, body map[string]any) outcome
	resolve(token, id string, body map[string]any) outcome
	discard(token, id string) outcome
	interop(token, id string, in map[string]any) outcome
	list(token string) outcome
}

// run is one scenario on one door.
type run struct {
	t                            *testing.T
	d                            door
	steps                        []outcome
	payer, payee, stranger, user testserver.Identity
	code                         string
}

func (r *run) record(name string, o outcome) outcome {
	o.step = name
	r.steps = append(r.steps, o)
	return o
}

func (r *run) ok(name string, o outcome) map[string]any {
	r.t.Helper()
	o = r.record(name, o)
	if o.code != "" {
		r.t.Fatalf("%s: unexpected %s (%v)", name, o.code, o.value)
	}
	m, _ := o.value.(map[string]any)
	return m
}

func runScenario(t *testing.T, srv *testserver.Server, d door, fn func(r *run)) []outcome {
	t.Helper()
	payer := srv.Device(t)
	_, code := srv.Session(t, payer)
	r := &run{t: t, d: d, payer: payer, payee: srv.Resource(t, code), stranger: srv.Device(t), user: srv.User(t), code: code}
	fn(r)
	return r.steps
}

func simpleBody(amount string) map[string]any {
	return map[string]any{"expectedPayment": map[string]any{
		"network": "ethereum", "currency": "USDC", "currencyAddress": e2eUSDC, "amount": amount,
		"wallet": map[string]any{"address": e2eWallet},
	}}
}

func customBody() map[string]any {
	return map[string]any{
		"networks": []any{map[string]any{"network": "ethereum", "type": "evm", "chainId": "1"}},
		"payments": []any{map[string]any{"type": "send_transaction", "input": map[string]any{
			"from": "{payer}", "to": e2eUSDC, "value": "0", "data": "0xa9059cbb",
		}}},
		"extras":    []any{map[string]any{"type": "call_transaction", "input": map[string]any{"to": e2eUSDC, "data": "0x70a08231"}}},
		"payeeInfo": map[string]any{"name": "Corner Shop"},
	}
}

const usdtEth = "0xdAC17F958D2ee523a2206206994597C13D831ec7"

func supplied(network, currency, address string) map[string]any {
	return map[string]any{"suppliedPayment": map[string]any{
		"network": network, "currency": currency, "currencyAddress": address, "amount": "1",
		"wallet": map[string]any{"address": "0x52908400098527886E0F7030069857D2E4169EE7"},
	}}
}

func receipts(ids ...string) map[string]any {
	var rs []any
	for _, id := range ids {
		rs = append(rs, map[string]any{"paymentId": id, "transactionHash": "0x" + strings.Repeat("ab", 32)})
	}
	return map[string]any{"receipts": rs}
}

func str(m map[string]any, path ...string) string {
	var v any = m
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			var i int
			fmt.Sscan(p, &i)
			if i < len(x) {
				v = x[i]
			} else {
				v = nil
			}
		}
	}
	s, _ := v.(string)
	return s
}

var parityScenarios = []struct {
	name string
	run  func(r *run)
}{
	{"simple lifecycle", func(r *run) {
		v := r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": r.code}))
		id := str(v, "id")
		r.ok("payee gets", r.d.get(r.payee.Token, id))
		v = r.ok("redeem", r.d.redeem(r.payee.Token, id, simpleBody("12.50")))
		r.ok("negotiate", r.d.negotiate(r.payer.Token, id, supplied("ethereum", "USDT", usdtEth)))
		r.ok("payer gets", r.d.get(r.payer.Token, id))
		r.ok("resolve", r.d.resolve(r.payer.Token, id, receipts(str(v, "expectedPayment", "id"))))
		r.ok("payee gets the outcome", r.d.get(r.payee.Token, id))
	}},
	{"custom lifecycle", func(r *run) {
		id := str(r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": strings.ToLower(r.code)})), "id")
		v := r.ok("redeem", r.d.redeem(r.payee.Token, id, customBody()))
		r.record("negotiate", r.d.negotiate(r.payer.Token, id, supplied("ethereum", "USDT", usdtEth)))
		r.record("interop-init", r.d.interop(r.payer.Token, id, map[string]any{"id": "sub-1", "paymentIndex": 0, "signature": "0xabc"}))
		r.record("interop-init again", r.d.interop(r.payer.Token, id, map[string]any{"id": "sub-1", "paymentIndex": 0, "signature": "0xabc"}))
		r.record("interop-init past the payments", r.d.interop(r.payer.Token, id, map[string]any{"id": "sub-2", "paymentIndex": 5}))
		r.ok("resolve", r.d.resolve(r.payer.Token, id, receipts(str(v, "payments", "0", "id"))))
		r.ok("get", r.d.get(r.payee.Token, id))
	}},
	{"transition errors", func(r *run) {
		id := str(r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": r.code})), "id")
		r.record("resolve a reserved voucher", r.d.resolve(r.payer.Token, id, receipts("pmt_unknown")))
		r.record("negotiate a reserved voucher", r.d.negotiate(r.payer.Token, id, supplied("ethereum", "USDT", usdtEth)))
		both := simpleBody("5")
		for k, v := range customBody() {
			both[k] = v
		}
		r.record("redeem with both forms", r.d.redeem(r.payee.Token, id, both))
		r.record("redeem a bad amount", r.d.redeem(r.payee.Token, id, simpleBody("1.2345678")))
		r.record("redeem an unknown network", r.d.redeem(r.payee.Token, id, map[string]any{"expectedPayment": map[string]any{
			"network": "dogechain", "currency": "USDC", "currencyAddress": e2eUSDC, "amount": "1", "wallet": map[string]any{"address": e2eWallet},
		}}))
		v := r.ok("redeem", r.d.redeem(r.payee.Token, id, simpleBody("7")))
		r.record("redeem again", r.d.redeem(r.payee.Token, id, simpleBody("7")))
		r.record("negotiate on another network", r.d.negotiate(r.payer.Token, id, supplied("polygon", "USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359")))
		r.record("resolve an unknown payment", r.d.resolve(r.payer.Token, id, receipts("pmt_unknown")))
		r.record("resolve without receipts", r.d.resolve(r.payer.Token, id, map[string]any{"receipts": []any{}}))
		r.ok("resolve", r.d.resolve(r.payer.Token, id, receipts(str(v, "expectedPayment", "id"))))
		r.record("resolve again", r.d.resolve(r.payer.Token, id, receipts(str(v, "expectedPayment", "id"))))
		r.record("discard a resolved voucher", r.d.discard(r.payer.Token, id))
	}},
	{"discard", func(r *run) {
		id := str(r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": r.code})), "id")
		r.ok("discard", r.d.discard(r.payee.Token, id))
		r.record("redeem a discarded voucher", r.d.redeem(r.payee.Token, id, simpleBody("1")))
		r.ok("get", r.d.get(r.payer.Token, id))
	}},
	{"who may do what", func(r *run) {
		id := str(r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": r.code})), "id")
		r.record("stranger gets", r.d.get(r.stranger.Token, id))
		r.record("anonymous gets", r.d.get("", id))
		r.record("payer redeems", r.d.redeem(r.payer.Token, id, simpleBody("1")))
		r.record("stranger redeems", r.d.redeem(r.stranger.Token, id, simpleBody("1")))
		r.ok("redeem", r.d.redeem(r.payee.Token, id, simpleBody("1")))
		r.record("payee resolves", r.d.resolve(r.payee.Token, id, receipts("pmt_x")))
		r.record("stranger discards", r.d.discard(r.stranger.Token, id))
		r.record("reserve an unknown code", r.d.reserve(r.payee.Token, map[string]any{"code": "ZZZZZZ"}))
		r.record("reserve a malformed code", r.d.reserve(r.payee.Token, map[string]any{"code": "12"}))
		r.record("reserve anonymously", r.d.reserve("", map[string]any{"code": r.code}))
		r.record("reserve for a business of which not a member", r.d.reserve(r.user.Token, map[string]any{"code": r.code, "businessId": "biz_none"}))
	}},
	{"voucher query", func(r *run) {
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, str(r.ok("reserve", r.d.reserve(r.payee.Token, map[string]any{"code": r.code})), "id"))
		}
		r.record("payer lists", ranked(r.d.list(r.payer.Token), ids))
		r.record("payee lists", ranked(r.d.list(r.payee.Token), ids))
		r.record("stranger lists", ranked(r.d.list(r.stranger.Token), ids))
	}},
}

// ranked labels each voucher of a list with the order in which the run
// reserved it, so the doors' orders can be compared although ids differ.
func ranked(o outcome, ids []string) outcome {
	list, _ := o.value.([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		for i, id := range ids {
			if m != nil && m["id"] == id {
				m["reserved"] = float64(i)
			}
		}
	}
	return o
}

// volatile are fields whose values differ between two runs of a scenario:
// both doors must show them, with any value.
var volatile = map[string]bool{"id": true, "code": true, "sessionId": true, "paymentId": true, "voucherId": true,
	"createdAt": true, "updatedAt": true, "expiresAt": true}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if e == nil {
				continue // GraphQL's null is REST's absent field
			}
			if s, ok := e.(string); ok && volatile[k] && s != "" {
				out[k] = "<" + k + ">"
				continue
			}
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

func compareStep(t *testing.T, rest, gql outcome) {
	t.Helper()
	if rest.code != gql.code {
		t.Errorf("%s: REST %q (%d), GraphQL %q", rest.step, rest.code, rest.status, gql.code)
		return
	}
	want := 200
	if rest.code != "" {
		want = apperr.Code(rest.code).HTTPStatus()
	}
	if rest.status != want {
		t.Errorf("%s: REST status %d for %q, want %d", rest.step, rest.status, rest.code, want)
	}
	if rest.code != "" {
		return
	}
	a, b := normalize(rest.value), normalize(gql.value)
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.MarshalIndent(a, "", " ")
		jb, _ := json.MarshalIndent(b, "", " ")
		t.Errorf("%s: the doors disagree:\nREST    %s\nGraphQL %s\nfields only on REST: %v, only on GraphQL: %v", rest.step, ja, jb, keysOnly(a, b), keysOnly(b, a))
	}
}

func keysOnly(a, b any) []string {
	ma, _ := a.(map[string]any)
	mb, _ := b.(map[string]any)
	var out []string
	for k := range ma {
		if _, ok := mb[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// restDoor speaks /api/v1.
type restDoor struct{ srv *testserver.Server }

func (d restDoor) call(method, path, token string, body any) outcome {
	t := testingT{}
	r := d.srv.Do(t, method, path, token, body)
	o := outcome{status: r.Status}
	if r.Status != 200 {
		o.code = r.Code()
		return o
	}
	_ = json.Unmarshal(r.Body, &o.value)
	return o
}

func (d restDoor) reserve(tok string, b map[string]any) outcome {
	return d.call("POST", "/api/v1/vouchers/reserve-voucher", tok, b)
}
func (d restDoor) get(tok, id string) outcome { return d.call("GET", "/api/v1/vouchers/"+id, tok, nil) }
func (d restDoor) redeem(tok, id string, b map[string]any) outcome {
	return d.call("POST", "/api/v1/vouchers/"+id+"/redeem-voucher", tok, b)
}
func (d restDoor) negotiate(tok, id string, b map[string]any) outcome {
	return d.call("POST", "/api/v1/vouchers/"+id+"/negotiate-voucher", tok, b)
}
func (d restDoor) resolve(tok, id string, b map[string]any) outcome {
	return d.call("POST", "/api/v1/vouchers/"+id+"/resolve-voucher", tok, b)
}
func (d restDoor) discard(tok, id string) outcome {
	return d.call("POST", "/api/v1/vouchers/"+id+"/discard-voucher", tok, map[string]any{})
}
func (d restDoor) interop(tok, id string, in map[string]any) outcome {
	q := url.Values{}
	q.Set("id", fmt.Sprint(in["id"]))
	if pi, ok := in["paymentIndex"]; ok {
		q.Set("paymentIndex", fmt.Sprint(pi))
	}
	body := map[string]any{}
	if s, ok := in["signature"]; ok {
		body["signature"] = s
	}
	return d.call("POST", "/api/v1/vouchers/"+id+"/submit/interop-init?"+q.Encode(), tok, body)
}
func (d restDoor) list(tok string) outcome {
	return d.call("GET", "/api/v1/vouchers?limit=20", tok, nil)
}

// graphDoor speaks /graphql.
type graphDoor struct{ srv *testserver.Server }

const voucherFields = `fragment V on Voucher { id code status type version sessionId businessId
	expectedPayment { id network currency currencyAddress amount wallet { address } }
	suppliedPayment { id network currency currencyAddress amount wallet { address } }
	exchangeRate networks { network type chainId } payments { id type input { from to value data } }
	extras payeeInfo receipts { paymentId transactionHash amount } discardReason expiresAt createdAt updatedAt
	settlement { status verified requiredConfirmations confirmations paidAmount currency
		transactions { transactionHash status reason blockNumber confirmations amount } } }`

// call runs a document and returns the field's value; a null single-object
// read is not_found, as on REST.
func (d graphDoor) call(token, doc, field string, vars map[string]any) outcome {
	g := d.srv.GraphQL(testingT{}, token, doc, vars)
	if len(g.Errors) > 0 {
		return outcome{code: g.ErrorCode()}
	}
	var data map[string]any
	_ = json.Unmarshal(g.Data, &data)
	v := data[field]
	if v == nil {
		return outcome{code: "not_found"}
	}
	return outcome{value: v}
}

func (d graphDoor) reserve(tok string, b map[string]any) outcome {
	return d.call(tok, `mutation($in: ReserveVoucherInput!) { reserveVoucher(input: $in) { ...V } } `+voucherFields, "reserveVoucher", map[string]any{"in": b})
}
func (d graphDoor) get(tok, id string) outcome {
	return d.call(tok, `query($id: ID!) { voucher(id: $id) { ...V } } `+voucherFields, "voucher", map[string]any{"id": id})
}
func (d graphDoor) redeem(tok, id string, b map[string]any) outcome {
	return d.call(tok, `mutation($id: ID!, $in: RedeemVoucherInput!) { redeemVoucher(id: $id, input: $in) { ...V } } `+voucherFields, "redeemVoucher", map[string]any{"id": id, "in": b})
}
func (d graphDoor) negotiate(tok, id string, b map[string]any) outcome {
	return d.call(tok, `mutation($id: ID!, $in: NegotiateVoucherInput!) { negotiateVoucher(id: $id, input: $in) { ...V } } `+voucherFields, "negotiateVoucher", map[string]any{"id": id, "in": b})
}
func (d graphDoor) resolve(tok, id string, b map[string]any) outcome {
	return d.call(tok, `mutation($id: ID!, $in: ResolveVoucherInput!) { resolveVoucher(id: $id, input: $in) { ...V } } `+voucherFields, "resolveVoucher", map[string]any{"id": id, "in": b})
}
func (d graphDoor) discard(tok, id string) outcome {
	return d.call(tok, `mutation($id: ID!) { discardVoucher(id: $id) { ...V } } `+voucherFields, "discardVoucher", map[string]any{"id": id})
}
func (d graphDoor) interop(tok, id string, in map[string]any) outcome {
	return d.call(tok, `mutation($id: ID!, $in: InteropInitInput!) { interopInit(id: $id, input: $in) { id voucherId paymentIndex signature createdAt } }`, "interopInit", map[string]any{"id": id, "in": in})
}
func (d graphDoor) list(tok string) outcome {
	o := d.call(tok, `{ vouchers(first: 20) { edges { node { ...V } } } } `+voucherFields, "vouchers", nil)
	if o.code != "" {
		return o
	}
	nodes := []any{}
	edges, _ := o.value.(map[string]any)["edges"].([]any)
	for _, e := range edges {
		nodes = append(nodes, e.(map[string]any)["node"])
	}
	return outcome{value: nodes}
}

// testingT lets the doors use testserver's helpers without a *testing.T of
// their own: a failed exchange there is a bug in the test, so it panics.
type testingT struct{ testing.TB }

func (testingT) Helper()                      {}
func (testingT) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (testingT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (testingT) Errorf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
