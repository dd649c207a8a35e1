package voucher_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// redeemCases are bodies the payee may not redeem with, and the field each
// one is refused for.
func redeemCases() []struct {
	name  string
	body  func() voucher.RedeemInput
	field string
} {
	simple := func(mod func(p *voucher.PaymentInput)) func() voucher.RedeemInput {
		return func() voucher.RedeemInput {
			b := simpleBody("12.5")
			mod(b.ExpectedPayment)
			return b
		}
	}
	custom := func(mod func(b *voucher.RedeemInput)) func() voucher.RedeemInput {
		return func() voucher.RedeemInput {
			b := customBody()
			mod(&b)
			return b
		}
	}
	tx := func(mod func(x *voucher.TransactionInputInput)) func() voucher.RedeemInput {
		return custom(func(b *voucher.RedeemInput) { mod(b.Payments[0].Input) })
	}
	extras := func(n int) []json.RawMessage {
		out := make([]json.RawMessage, n)
		for i := range out {
			out[i] = json.RawMessage(`{"type":"call_transaction"}`)
		}
		return out
	}
	return []struct {
		name  string
		body  func() voucher.RedeemInput
		field string
	}{
		{"neither form", func() voucher.RedeemInput { return voucher.RedeemInput{} }, "expectedPayment"},
		{"both forms", custom(func(b *voucher.RedeemInput) { b.ExpectedPayment = simpleBody("1").ExpectedPayment }), "expectedPayment"},
		{"payeeInfo with SIMPLE", func() voucher.RedeemInput {
			b := simpleBody("1")
			b.PayeeInfo = json.RawMessage(`{"name":"x"}`)
			return b
		}, "payeeInfo"},
		{"missing network", simple(func(p *voucher.PaymentInput) { p.Network = "" }), "expectedPayment.network"},
		{"unknown network", simple(func(p *voucher.PaymentInput) { p.Network = "dogechain" }), "expectedPayment.network"},
		{"unknown currency", simple(func(p *voucher.PaymentInput) { p.Currency = "DOGE" }), "expectedPayment.currency"},
		{"currency on another network", simple(func(p *voucher.PaymentInput) { p.Currency = "SOL" }), "expectedPayment.currency"},
		{"address of another token", simple(func(p *voucher.PaymentInput) { p.CurrencyAddress = usdtEth }), "expectedPayment.currencyAddress"},
		{"address with a bad checksum", simple(func(p *voucher.PaymentInput) {
			p.CurrencyAddress = "0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
		}), "expectedPayment.currencyAddress"},
		{"missing address", simple(func(p *voucher.PaymentInput) { p.CurrencyAddress = "" }), "expectedPayment.currencyAddress"},
		{"float-looking amount", simple(func(p *voucher.PaymentInput) { p.Amount = "1e5" }), "expectedPayment.amount"},
		{"negative amount", simple(func(p *voucher.PaymentInput) { p.Amount = "-1" }), "expectedPayment.amount"},
		{"zero amount", simple(func(p *voucher.PaymentInput) { p.Amount = "0" }), "expectedPayment.amount"},
		{"leading zero", simple(func(p *voucher.PaymentInput) { p.Amount = "01.5" }), "expectedPayment.amount"},
		{"too many decimals", simple(func(p *voucher.PaymentInput) { p.Amount = "1.0000001" }), "expectedPayment.amount"},
		{"missing amount", simple(func(p *voucher.PaymentInput) { p.Amount = "" }), "expectedPayment.amount"},
		{"missing wallet", simple(func(p *voucher.PaymentInput) { p.Wallet = nil }), "expectedPayment.wallet.address"},
		{"short wallet", simple(func(p *voucher.PaymentInput) { p.Wallet.Address = "0x1234" }), "expectedPayment.wallet.address"},
		{"solana wallet on ethereum", simple(func(p *voucher.PaymentInput) { p.Wallet.Address = solanaWallet }), "expectedPayment.wallet.address"},
		{"evm wallet on solana", simple(func(p *voucher.PaymentInput) {
			p.Network, p.Currency, p.CurrencyAddress, p.Wallet.Address = "solana", "USDC", usdcSol, payeeWallet
		}), "expectedPayment.wallet.address"},
		{"bad base58 mint", simple(func(p *voucher.PaymentInput) {
			p.Network, p.Currency, p.CurrencyAddress, p.Wallet.Address = "solana", "USDC", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10", solanaWallet
		}), "expectedPayment.currencyAddress"},

		{"no networks", custom(func(b *voucher.RedeemInput) { b.Networks = nil }), "networks"},
		{"empty networks", custom(func(b *voucher.RedeemInput) { b.Networks = []voucher.NetworkInput{} }), "networks"},
		{"four networks", custom(func(b *voucher.RedeemInput) {
			b.Networks = []voucher.NetworkInput{
				{Network: "ethereum", Type: "evm", ChainID: "1"}, {Network: "polygon", Type: "evm", ChainID: "137"},
				{Network: "base", Type: "evm", ChainID: "8453"}, {Network: "arbitrum", Type: "evm", ChainID: "42161"},
			}
		}), "networks"},
		{"duplicate network", custom(func(b *voucher.RedeemInput) { b.Networks = append(b.Networks, b.Networks[0]) }), "networks[1].network"},
		{"unknown network type", custom(func(b *voucher.RedeemInput) { b.Networks[0].Type = "bitcoin" }), "networks[0].type"},
		{"type not the network's", custom(func(b *voucher.RedeemInput) { b.Networks[0].Type = "solana" }), "networks[0].type"},
		{"chainId not digits", custom(func(b *voucher.RedeemInput) { b.Networks[0].ChainID = "0x1" }), "networks[0].chainId"},
		{"chainId not the network's", custom(func(b *voucher.RedeemInput) { b.Networks[0].ChainID = "5" }), "networks[0].chainId"},
		{"unknown custom network", custom(func(b *voucher.RedeemInput) { b.Networks[0].Network = "goerli" }), "networks[0].network"},
		{"no payments", custom(func(b *voucher.RedeemInput) { b.Payments = nil }), "payments"},
		{"two payments", custom(func(b *voucher.RedeemInput) { b.Payments = append(b.Payments, b.Payments[0]) }), "payments"},
		{"payment type", custom(func(b *voucher.RedeemInput) { b.Payments[0].Type = "call_transaction" }), "payments[0].type"},
		{"payment input missing", custom(func(b *voucher.RedeemInput) { b.Payments[0].Input = nil }), "payments[0].input"},
		{"from not {payer}", tx(func(x *voucher.TransactionInputInput) { x.From = payeeWallet }), "payments[0].input.from"},
		{"to invalid", tx(func(x *voucher.TransactionInputInput) { x.To = "0xnothex" }), "payments[0].input.to"},
		{"to bad checksum", tx(func(x *voucher.TransactionInputInput) {
			x.To = "0xA0B86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
		}), "payments[0].input.to"},
		{"value negative", tx(func(x *voucher.TransactionInputInput) { x.Value = "-1" }), "payments[0].input.value"},
		{"value fractional", tx(func(x *voucher.TransactionInputInput) { x.Value = "1.5" }), "payments[0].input.value"},
		{"value leading zero", tx(func(x *voucher.TransactionInputInput) { x.Value = "01" }), "payments[0].input.value"},
		{"value missing", tx(func(x *voucher.TransactionInputInput) { x.Value = "" }), "payments[0].input.value"},
		{"data odd length", tx(func(x *voucher.TransactionInputInput) { x.Data = "0xabc" }), "payments[0].input.data"},
		{"data without 0x", tx(func(x *voucher.TransactionInputInput) { x.Data = "a9059cbb" }), "payments[0].input.data"},
		{"data not hex", tx(func(x *voucher.TransactionInputInput) { x.Data = "0xzz" }), "payments[0].input.data"},
		{"six extras", custom(func(b *voucher.RedeemInput) { b.Extras = extras(6) }), "extras"},
		{"extra not an object", custom(func(b *voucher.RedeemInput) { b.Extras = []json.RawMessage{json.RawMessage(`"x"`)} }), "extras[0]"},
		{"extra without type", custom(func(b *voucher.RedeemInput) { b.Extras = []json.RawMessage{json.RawMessage(`{"a":1}`)} }), "extras[0].type"},
		{"payeeInfo not an object", custom(func(b *voucher.RedeemInput) { b.PayeeInfo = json.RawMessage(`[1]`) }), "payeeInfo"},
	}
}

func TestRedeemValidation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		v := f.reserve(p)
		before := f.row(v.ID)
		for _, c := range redeemCases() {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.svc.Redeem(as(p.payee), v.ID, c.body())
				wantField(t, err, c.field)
				f.unchanged(v.ID, before)
			})
		}
		t.Run("extras alone make it CUSTOM and need networks", func(t *testing.T) {
			b := simpleBody("1")
			b.Extras = []json.RawMessage{}
			_, err := f.svc.Redeem(as(p.payee), v.ID, b)
			wantField(t, err, "expectedPayment")
			_, err = f.svc.Redeem(as(p.payee), v.ID, voucher.RedeemInput{Extras: []json.RawMessage{}})
			wantField(t, err, "networks")
			wantField(t, err, "payments")
			f.unchanged(v.ID, before)
		})
		t.Run("every problem at once", func(t *testing.T) {
			b := simpleBody("0")
			b.ExpectedPayment.Wallet.Address = "nope"
			b.ExpectedPayment.CurrencyAddress = usdtEth
			_, err := f.svc.Redeem(as(p.payee), v.ID, b)
			for _, field := range []string{"expectedPayment.amount", "expectedPayment.wallet.address", "expectedPayment.currencyAddress"} {
				wantField(t, err, field)
			}
		})
	})
}

func TestRedeemSimpleAndCustom(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()

		v := f.reserve(p)
		in := simpleBody("12.50")
		// Lower-case addresses carry no checksum and are accepted; they are
		// stored in EIP-55 form.
		in.ExpectedPayment.CurrencyAddress = strings.ToLower(usdcEth)
		in.ExpectedPayment.Wallet.Address = strings.ToLower(payeeWallet)
		got, err := f.svc.Redeem(as(p.payee), v.ID, in)
		if err != nil {
			t.Fatal(err)
		}
		exp := got.ExpectedPayment
		if got.Status != entvoucher.StatusREDEEMED || *got.Type != entvoucher.TypeSIMPLE || got.Version != 2 ||
			exp == nil || !ids.HasPrefix(exp.ID, ids.Payment) || exp.Amount != "12.5" || exp.CurrencyAddress != usdcEth ||
			exp.Wallet.Address != payeeWallet || exp.Network != "ethereum" || exp.Currency != "USDC" ||
			got.Networks != nil || got.Payments != nil || got.Extras != nil || got.SuppliedPayment != nil {
			t.Fatalf("SIMPLE redeemed %+v %+v", got, exp)
		}
		read, err := f.svc.Get(as(p.payer), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if *read.ExpectedPayment != *exp || read.Version != 2 || !read.UpdatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("stored %+v, returned %+v", read.ExpectedPayment, exp)
		}
		rv := view.OfVoucher(read)
		if *rv.Type != "SIMPLE" || rv.Networks != nil || rv.Extras != nil || rv.PayeeInfo != nil {
			t.Fatalf("SIMPLE view %+v", rv)
		}

		c := f.reserve(p)
		cin := customBody()
		cin.Networks = append(cin.Networks, voucher.NetworkInput{Network: "solana", Type: "solana", ChainID: "mainnet-beta"})
		cin.Extras = []json.RawMessage{json.RawMessage(`{ "type": "call_transaction", "input": {"to": "x"} }`)}
		cin.PayeeInfo = json.RawMessage(`{"name": "Café"}`)
		got, err = f.svc.Redeem(as(p.payee), c.ID, cin)
		if err != nil {
			t.Fatal(err)
		}
		if *got.Type != entvoucher.TypeCUSTOM || got.ExpectedPayment != nil || len(got.Networks) != 2 || len(got.Payments) != 1 ||
			!ids.HasPrefix(got.Payments[0].ID, ids.Payment) || got.Payments[0].Input.From != "{payer}" ||
			!sameJSON(got.Extras[0], `{"type":"call_transaction","input":{"to":"x"}}`) || !sameJSON(got.PayeeInfo, `{"name":"Café"}`) ||
			strings.Contains(string(got.Extras[0]), " ") {
			t.Fatalf("CUSTOM redeemed %+v", got)
		}
		read, err = f.svc.Get(as(p.payee), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if read.Networks[1] != (payment.Network{Network: "solana", Type: "solana", ChainID: "mainnet-beta"}) ||
			read.Payments[0] != got.Payments[0] || string(read.PayeeInfo) != string(got.PayeeInfo) {
			t.Fatalf("stored CUSTOM %+v", read)
		}

		// A CUSTOM voucher without extras still shows an (empty) extras list.
		e := f.reserve(p)
		got, err = f.svc.Redeem(as(p.payee), e.ID, customBody())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(view.OfVoucher(got))
		if !strings.Contains(string(b), `"extras":[]`) || strings.Contains(string(b), "expectedPayment") || strings.Contains(string(b), "payeeInfo") {
			t.Fatalf("CUSTOM view %s", b)
		}
	})
}

func TestRedeemStateAndVisibility(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		stranger := device()
		bad := voucher.RedeemInput{}

		reserved := f.reserve(p)
		redeemed := f.redeemed(p, "1")
		resolved := f.redeemed(p, "1")
		if _, err := f.svc.Resolve(as(p.payer), resolved.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: resolved.ExpectedPayment.ID}}}); err != nil {
			t.Fatal(err)
		}
		discarded := f.reserve(p)
		if _, err := f.svc.Discard(as(p.payer), discarded.ID); err != nil {
			t.Fatal(err)
		}
		expiring := f.reserve(p)

		cases := []struct {
			name  string
			id    string
			payee bool
			body  voucher.RedeemInput
			code  apperr.Code
		}{
			{"unknown id", ids.New(ids.Voucher), true, simpleBody("1"), apperr.NotFound},
			{"not a voucher id", "x", true, simpleBody("1"), apperr.NotFound},
			{"stranger", reserved.ID, false, simpleBody("1"), apperr.NotFound},
			{"stranger with a bad body", reserved.ID, false, bad, apperr.NotFound},
			{"payee with a bad body", reserved.ID, true, bad, apperr.ValidationFailed},
			{"redeemed", redeemed.ID, true, simpleBody("1"), apperr.AlreadyRedeemed},
			{"redeemed, bad body: body first", redeemed.ID, true, bad, apperr.ValidationFailed},
			{"resolved", resolved.ID, true, customBody(), apperr.AlreadyRedeemed},
			{"discarded", discarded.ID, true, simpleBody("1"), apperr.Discarded},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				who := stranger
				if c.payee {
					who = p.payee
				}
				var before []any
				if ids.HasPrefix(c.id, ids.Voucher) && c.name != "unknown id" {
					before = f.row(c.id)
				}
				_, err := f.svc.Redeem(as(who), c.id, c.body)
				wantCode(t, err, c.code)
				if before != nil {
					f.unchanged(c.id, before)
				}
			})
		}
		// The payer sees the voucher but may not redeem it: to the payer it
		// is not there either.
		_, err := f.svc.Redeem(as(p.payer), reserved.ID, simpleBody("1"))
		wantCode(t, err, apperr.NotFound)

		f.clock.Add(ttl)
		before := f.row(expiring.ID)
		_, err = f.svc.Redeem(as(p.payee), expiring.ID, simpleBody("1"))
		wantCode(t, err, apperr.Expired)
		f.unchanged(expiring.ID, before)
		// Expired beats already_redeemed: state errors start with expiry.
		_, err = f.svc.Redeem(as(p.payee), redeemed.ID, simpleBody("1"))
		wantCode(t, err, apperr.Expired)
	})
}

// sameJSON compares JSON values, not their text: jsonb keeps an object's
// keys in its own order.
func sameJSON(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}
