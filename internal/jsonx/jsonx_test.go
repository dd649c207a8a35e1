package jsonx_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/jsonx"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/view"
)

// fullVoucher sets every field a voucher's row can carry, with text in
// each string field that encoding/json escapes (HTML, line separators,
// control characters) or must repair (invalid UTF-8).
func fullVoucher(s func(string) string) *ent.Voucher {
	typ := entvoucher.TypeSIMPLE
	str := func(x string) *string { x = s(x); return &x }
	block := int64(123456789)
	at := time.Date(2026, 11, 27, 20, 0, 0, 123456789, time.UTC)
	deadline := at.Add(time.Hour)
	pay := func(id string) *payment.Payment {
		return &payment.Payment{ID: s(id), Network: s("ethereum"), Currency: s("USDC"), CurrencyAddress: s("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
			Amount: s("12.500001"), Wallet: payment.Wallet{Address: s("0x52908400098527886E0F7030069857D2E4169EE7")}}
	}
	return &ent.Voucher{
		ID: s("vch_01JDQ4Z8K2M3N4P5Q6R7S8T9V0"), CreatedAt: at, UpdatedAt: at.Add(time.Second), Code: s("123456"), LiveCode: str("654321"),
		Status: entvoucher.StatusREDEEMED, Type: &typ, Version: 7, SessionID: s("ses_1"), PayerID: s("dev_1"), PayeeID: s("ses_2"),
		BusinessID: str("biz_1"), ExpectedPayment: pay("pmt_1"), SuppliedPayment: pay("pmt_2"), ExchangeRate: str("1.0002"),
		Networks:      []payment.Network{{Network: s("ethereum"), Type: s("EVM"), ChainID: s("1")}},
		Payments:      []payment.CustomPayment{{ID: s("pmt_3"), Type: s("TRANSACTION"), Input: payment.TransactionInput{From: s("0x1"), To: s("0x2"), Value: s("0"), Data: s("0xdeadbeef")}}},
		Extras:        []json.RawMessage{json.RawMessage(`{"note":"<b>&amp;</b>","n":1.50}`), json.RawMessage(`[1,2,3]`)},
		PayeeInfo:     json.RawMessage(`{"name":"Shop \u2028 <one>","logo":null}`),
		Receipts:      []payment.Receipt{{PaymentID: s("pmt_1"), TransactionHash: s("0xab"), Amount: s("12.5")}},
		DiscardReason: str("changed my mind"), WidgetID: str("wdg_1"), Reference: str("order <1> & \"2\""), ExpiresAt: deadline,
		Settlement: &payment.Settlement{Status: s("CONFIRMED"), Verified: true, RequiredConfirmations: 2, Confirmations: 3, PaidAmount: s("12.5"),
			Currency: s("USDC"), Network: s("ethereum"), Deadline: &deadline, Events: []string{s("deposit.confirmed")},
			Transactions: []payment.SettlementTransaction{{TransactionHash: s("0xab"), Status: s("CONFIRMED"), BlockNumber: &block, Confirmations: 3,
				Amount: s("12.5"), Detected: true, Late: true, BlockHash: s("0xcd")}}},
		SettlementNetwork: str("ethereum"),
		Deposit: &payment.Deposit{Address: s("0x01"), PayoutAddress: s("0x02"), Factory: s("0x03"),
			Sweep: payment.Sweep{Status: s("DONE"), TransactionHash: s("0xef"), Amount: s("1.5"), Attempts: 2, Swept: s("1.5"), InFlight: s("0x99"), Target: s("1.5")}},
	}
}

// awkward are strings encoding/json treats specially.
var awkward = []string{
	"", "plain", `<script>alert("x")</script>`, "a & b", "line\u2028sep\u2029para", "tab\tnew\nline\rcr",
	"\x00\x01\x1f\x7f", "caf\u00e9 \U0001F600", "bad \xff\xfe utf-8", "half \xe2\x82", `back\slash "quote"`, "\u00a0nbsp",
}

// randomText is a string of runes and bytes chosen to hit escaping.
func randomText(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(24) {
		switch r.IntN(6) {
		case 0:
			b.WriteByte(byte(r.IntN(0x20)))
		case 1:
			b.WriteByte(byte(0x80 + r.IntN(0x80))) // a stray continuation or lead byte
		case 2:
			b.WriteString(string(`<>&"\`[r.IntN(5)]))
		case 3:
			b.WriteRune([]rune{'\u2028', '\u2029', '\ufffd', 'é', '😀', '\u007f'}[r.IntN(6)])
		default:
			b.WriteByte(byte('a' + r.IntN(26)))
		}
	}
	return b.String()
}

// The service's own values encode to encoding/json's bytes, whatever their
// strings hold.
func TestMarshalIsEncodingJSON(t *testing.T) {
	check := func(name string, v any) {
		t.Helper()
		want, werr := json.Marshal(v)
		got, gerr := jsonx.Marshal(v)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%s: encoding/json error %v, jsonx error %v", name, werr, gerr)
		}
		if string(got) != string(want) {
			t.Fatalf("%s:\njsonx         %q\nencoding/json %q", name, got, want)
		}
		// Append writes the same bytes after what the buffer holds.
		prefix := []byte(`{"k":1}` + "\n")
		app, aerr := jsonx.Append(append(make([]byte, 0, 16), prefix...), v)
		if (werr != nil) != (aerr != nil) || (werr == nil && string(app) != string(prefix)+string(want)) {
			t.Fatalf("%s: Append gave %q (%v), want %q then %q", name, app, aerr, prefix, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	texts := append([]string(nil), awkward...)
	for range 300 {
		texts = append(texts, randomText(r))
	}
	for i, x := range texts {
		same := func(string) string { return x }
		v := fullVoucher(same)
		check("voucher row", v)
		check("REST voucher", view.OfVoucher(v))
		check("error body", httpx.ErrorBody{Code: "validation_failed", Message: x})
		check("map", map[string]any{x: x, "n": 1.5, "k" + x: []any{nil, true, x}})
		if i == 0 {
			check("empty voucher", &ent.Voucher{})
			check("empty REST voucher", view.OfVoucher(&ent.Voucher{}))
		}
	}
	// Only the fixed strings vary: every string at once.
	i := 0
	check("mixed", fullVoucher(func(string) string { i++; return texts[i%len(texts)] }))
}

// What jsonx decodes is what encoding/json decodes, and it owns its bytes:
// raw JSON kept in a value does not change with the input buffer.
func TestUnmarshalIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	inputs := [][]byte{
		[]byte(`{"id":"vch_1","unknown":{"deep":[1,2,{"x":null}]},"version":3,"payee_info":null,"extras":null,"type":null}`),
		[]byte(`{"id":"\u0076ch_\ud83d\ude00","expected_payment":{"amount":"1.50","wallet":{"address":"0x\u003c"}},"receipts":[]}`),
		[]byte(`{"ID":"case-insensitive","Version":4,"STATUS":"REDEEMED"}`),
		// PostgreSQL's row_to_json, as a voucher statement's pg_notify sent it.
		[]byte(`{"id":"vch_2","created_at":"2026-11-21T20:59:15.500218+01:00","updated_at":"2026-11-21T20:59:16+01:00","expires_at":"2026-11-21T21:59:15.5-05:30",` +
			`"business_id":null,"payee_info":{"a":[1,2.50,"x"]},"networks":[{"network":"solana","type":"SOLANA","chainId":""}],"version":12}`),
	}
	for _, x := range append(awkward, randomText(r), randomText(r), randomText(r)) {
		b, err := json.Marshal(fullVoucher(func(string) string { return x }))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		var want, got ent.Voucher
		werr := json.Unmarshal(in, &want)
		buf := append([]byte(nil), in...)
		gerr := jsonx.Unmarshal(buf, &got)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%s: encoding/json error %v, jsonx error %v", in, werr, gerr)
		}
		for i := range buf {
			buf[i] = 'x' // the caller reuses its buffer
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\njsonx         %+v\nencoding/json %+v", in, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `{"version":"seven"}`, `{"id":1}`, `[]`, `{"id":"a",}`, `{"id":"a"} x`} {
		var v ent.Voucher
		if err := jsonx.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The voucher's row and its payments take the fast codec; a type with an
// omitzero field anywhere in it (the REST views) takes encoding/json.
func TestFastCodecOnlyWhereExact(t *testing.T) {
	for _, c := range []struct {
		v    any
		fast bool
	}{
		{&ent.Voucher{}, true}, {ent.Voucher{}, true}, {&payment.Payment{}, true}, {[]payment.Network{}, true},
		{&payment.Settlement{}, true}, {map[string]string{}, true}, {nil, true},
		{map[string]any{}, false}, {struct{ V any }{}, false},
		{struct {
			v any
			W int `json:"-"`
		}{}, true},
		{view.OfVoucher(&ent.Voucher{}), false}, {[]*view.Voucher{}, false}, {map[string]view.Voucher{}, false},
		{struct {
			A struct {
				B []struct {
					C int `json:"c,omitempty,omitzero"`
				}
			}
		}{}, false},
	} {
		if got := jsonx.Exact(reflect.TypeOf(c.v)); got != c.fast {
			t.Errorf("%T: fast codec %v, want %v", c.v, got, c.fast)
		}
	}
}

// BenchmarkRow is a voucher's row through encoding/json and through jsonx.
//
//	go test ./internal/jsonx -run '^$' -bench Row -benchmem
func BenchmarkRow(b *testing.B) {
	v := fullVoucher(func(s string) string { return s })
	row, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		m    func(any) ([]byte, error)
		u    func([]byte, any) error
	}{{"encoding-json", json.Marshal, json.Unmarshal}, {"jsonx", jsonx.Marshal, jsonx.Unmarshal}} {
		b.Run(c.name+"/marshal", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := c.m(v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				var x ent.Voucher
				if err := c.u(row, &x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
