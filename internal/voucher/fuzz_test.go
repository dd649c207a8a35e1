package voucher

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
)

// FuzzRedeemBody feeds arbitrary bytes through what a redeem body goes
// through before it can touch a voucher: the strict JSON decoder both doors'
// REST side uses, then the redeem validation. Whatever comes in, it must
// not panic, must fail only with validation_failed (or payload/JSON errors
// from the decoder, which are validation_failed too), and anything it
// accepts must be exactly one well-formed form, ready to store.
func FuzzRedeemBody(f *testing.F) {
	for _, seed := range []string{
		`{"expectedPayment":{"network":"ethereum","currency":"USDC","currencyAddress":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48","amount":"12.5","wallet":{"address":"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"}}}`,
		`{"expectedPayment":{"network":"solana","currency":"SOL","currencyAddress":"11111111111111111111111111111111","amount":"0.000000001","wallet":{"address":"9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"}}}`,
		`{"networks":[{"network":"ethereum","type":"evm","chainId":"1"}],"payments":[{"type":"send_transaction","input":{"from":"{payer}","to":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48","value":"0","data":"0xa9059cbb"}}],"extras":[{"type":"call_transaction"}],"payeeInfo":{"name":"x"}}`,
		`{"networks":[{"network":"solana","type":"solana","chainId":"mainnet-beta"},{"network":"base","type":"evm","chainId":"8453"}],"payments":[{"type":"send_transaction","input":{"from":"{payer}","to":"9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM","value":"115792089237316195423570985008687907853269984665640564039457584007913129639935","data":"0x"}}]}`,
		`{"expectedPayment":{"amount":12.5}}`,
		`{"expectedPayment":null,"networks":[]}`,
		`{"expectedPayment":{},"payments":[]}`,
		`{"extras":[1,"x",{"type":""}]}`,
		`{"payeeInfo":null}`,
		`{"unknown":1}`,
		`{} {}`,
		`[]`,
		`null`,
		`{"expectedPayment":{"network":"ethereum","currency":"USDC","currencyAddress":"0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48","amount":"01","wallet":{"address":"0x"}}}`,
	} {
		f.Add([]byte(seed))
	}
	fin, err := finance.New(finance.Default())
	if err != nil {
		f.Fatal(err)
	}
	reg := fin.Registry()
	f.Fuzz(func(t *testing.T, body []byte) {
		var in RedeemInput
		if err := httpx.DecodeBytes(body, &in); err != nil {
			if apperr.CodeOf(err) != apperr.ValidationFailed {
				t.Fatalf("decode error %v", err)
			}
			return
		}
		r, err := parseRedeem(reg, in)
		if err != nil {
			if apperr.CodeOf(err) != apperr.ValidationFailed || len(apperr.From(err).Details) == 0 {
				t.Fatalf("redeem error %v", err)
			}
			return
		}
		switch r.typ {
		case payment.TypeSimple:
			checkSimple(t, reg, r)
		case payment.TypeCustom:
			checkCustom(t, reg, r)
		default:
			t.Fatalf("type %q", r.typ)
		}
		// What is stored must encode (and so can be written and read back).
		for _, v := range []any{r.expected, r.networks, r.payments, r.extras, r.payeeInfo} {
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("encode %T: %v", v, err)
			}
		}
	})
}

func checkSimple(t *testing.T, reg *finance.Registry, r *redemption) {
	e := r.expected
	if e == nil || r.networks != nil || r.payments != nil || r.extras != nil || r.payeeInfo != nil {
		t.Fatalf("SIMPLE with CUSTOM parts: %+v", r)
	}
	tok, ok := reg.Token(e.Network, e.Currency)
	if !ok || tok.CurrencyAddress != e.CurrencyAddress || !ids.HasPrefix(e.ID, ids.Payment) {
		t.Fatalf("expected payment %+v", e)
	}
	d, err := money.Parse(e.Amount, tok.Decimals)
	if err != nil || money.Format(d) != e.Amount {
		t.Fatalf("amount %q is not canonical: %v", e.Amount, err)
	}
	n, _ := reg.Network(e.Network)
	if err := chain.ValidateAddress(n.Type, e.Wallet.Address); err != nil {
		t.Fatalf("wallet %q: %v", e.Wallet.Address, err)
	}
}

func checkCustom(t *testing.T, reg *finance.Registry, r *redemption) {
	if r.expected != nil || len(r.networks) < 1 || len(r.networks) > MaxNetworks || len(r.payments) != 1 || len(r.extras) > MaxExtras {
		t.Fatalf("CUSTOM shape: %+v", r)
	}
	for _, n := range r.networks {
		if known, ok := reg.Network(n.Network); !ok || known.Type != n.Type || known.ChainID != n.ChainID {
			t.Fatalf("network %+v", n)
		}
	}
	p := r.payments[0]
	if p.Type != sendTransaction || p.Input.From != payerPlaceholder || !ids.HasPrefix(p.ID, ids.Payment) ||
		money.CheckInteger(p.Input.Value) != nil || money.CheckHexData(p.Input.Data) != nil || !strings.HasPrefix(p.Input.Data, "0x") {
		t.Fatalf("payment %+v", p)
	}
	for _, e := range r.extras {
		if !isObject(e) {
			t.Fatalf("extra %s", e)
		}
	}
	if r.payeeInfo != nil && !isObject(r.payeeInfo) {
		t.Fatalf("payeeInfo %s", r.payeeInfo)
	}
}
