package voucher_test

import (
	"math/big"
	"strings"
	"testing"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

const payerWallet = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359"

func supplied(network, currency, address string) voucher.NegotiateInput {
	return voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{
		Network: network, Currency: currency, CurrencyAddress: address, Amount: "1",
		Wallet: &voucher.WalletInput{Address: payerWallet},
	}}
}

// ceilQuote is the expected FX amount, computed here independently of the
// service: ceil(amount × pe / ps × (10000+bps)/10000) at decimals places, as
// a decimal string.
func ceilQuote(t *testing.T, amount, pe, ps string, bps int64, decimals int) string {
	t.Helper()
	r := func(s string) *big.Rat {
		x, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("bad rational %q", s)
		}
		return x
	}
	x := new(big.Rat).Mul(r(amount), r(pe))
	x.Quo(x, r(ps))
	x.Mul(x, big.NewRat(10000+bps, 10000))
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)
	num := new(big.Int).Mul(x.Num(), scale)
	q, m := new(big.Int).QuoRem(num, x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	s := q.String()
	if len(s) <= decimals {
		s = strings.Repeat("0", decimals-len(s)+1) + s
	}
	whole, frac := s[:len(s)-decimals], strings.TrimRight(s[len(s)-decimals:], "0")
	if frac == "" {
		return whole
	}
	return whole + "." + frac
}

func TestNegotiateFX(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		for _, bps := range []int64{0, 25} {
			f := newFixture(t, db, finance.WithSpreadBps(bps))
			p := f.parties()
			cases := []struct {
				name                    string
				expNet, expCur, expAddr string
				amount                  string
				supNet, supCur, supAddr string
				pe, ps                  string
				decimals                int
				rate                    string
				spread                  bool
			}{
				{"USDC to ETH", "ethereum", "USDC", usdcEth, "12.5", "ethereum", "ETH", nativeEVM, "1", "3000", 18, "0.000333333333333333333", true},
				{"ETH to USDC", "ethereum", "ETH", nativeEVM, "0.123456789012345678", "ethereum", "USDC", usdcEth, "3000", "1", 6, "3000", true},
				{"USDC to DAI", "ethereum", "USDC", usdcEth, "7.000001", "ethereum", "DAI", daiEth, "1", "1", 18, "1", true},
				{"USDC to POL", "polygon", "USDC", usdcPoly, "10", "polygon", "POL", nativeEVM, "1", "0.5", 18, "2", true},
				{"same token", "ethereum", "USDC", usdcEth, "99.99", "ethereum", "USDC", usdcEth, "1", "1", 6, "1", false},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					v := f.reserve(p)
					in := simpleBody(c.amount)
					in.ExpectedPayment.Network, in.ExpectedPayment.Currency, in.ExpectedPayment.CurrencyAddress = c.expNet, c.expCur, c.expAddr
					r, err := f.svc.Redeem(as(p.payee), v.ID, in)
					if err != nil {
						t.Fatal(err)
					}
					got, err := f.svc.Negotiate(as(p.payer), v.ID, supplied(c.supNet, c.supCur, c.supAddr))
					if err != nil {
						t.Fatal(err)
					}
					spread := int64(0)
					if c.spread {
						spread = bps
					}
					want := ceilQuote(t, c.amount, c.pe, c.ps, spread, c.decimals)
					sp := got.SuppliedPayment
					if sp == nil || sp.Amount != want || sp.Currency != c.supCur || sp.Network != c.supNet ||
						sp.CurrencyAddress != c.supAddr || sp.Wallet.Address != payerWallet || sp.ID != r.ExpectedPayment.ID {
						t.Fatalf("bps %d: supplied %+v, want amount %s", bps, sp, want)
					}
					if got.ExchangeRate == nil || *got.ExchangeRate != c.rate {
						t.Fatalf("rate %v, want %s", got.ExchangeRate, c.rate)
					}
					if *got.ExpectedPayment != *r.ExpectedPayment || got.Status != entvoucher.StatusREDEEMED || got.Version != r.Version+1 {
						t.Fatalf("negotiation changed more than the supplied payment: %+v", got)
					}
				})
			}
		}
	})
}

func TestNegotiateRules(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		eth := supplied("ethereum", "ETH", nativeEVM)

		simple := f.redeemed(p, "30")
		first, err := f.svc.Negotiate(as(p.payer), simple.ID, eth)
		if err != nil {
			t.Fatal(err)
		}
		// Negotiating again replaces the supplied payment.
		second, err := f.svc.Negotiate(as(p.payer), simple.ID, supplied("ethereum", "USDT", usdtEth))
		if err != nil {
			t.Fatal(err)
		}
		if second.SuppliedPayment.Currency != "USDT" || second.SuppliedPayment.Amount != "30" || *second.ExchangeRate != "1" ||
			second.Version != first.Version+1 || *second.ExpectedPayment != *simple.ExpectedPayment {
			t.Fatalf("renegotiated %+v", second)
		}
		if v := view.OfVoucher(second); v.SuppliedPayment == nil || v.ExchangeRate == nil {
			t.Fatalf("view lacks the negotiation: %+v", v)
		}

		reserved := f.reserve(p)
		custom := f.reserve(p)
		if _, err := f.svc.Redeem(as(p.payee), custom.ID, customBody()); err != nil {
			t.Fatal(err)
		}
		resolved := f.redeemed(p, "1")
		if _, err := f.svc.Resolve(as(p.payer), resolved.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: resolved.ExpectedPayment.ID}}}); err != nil {
			t.Fatal(err)
		}
		discarded := f.redeemed(p, "1")
		if _, err := f.svc.Discard(as(p.payee), discarded.ID); err != nil {
			t.Fatal(err)
		}
		bad := supplied("ethereum", "ETH", usdcEth) // the address of another token
		polygon := supplied("polygon", "USDC", usdcPoly)
		cases := []struct {
			name string
			id   string
			who  string
			in   voucher.NegotiateInput
			code apperr.Code
		}{
			{"payee", simple.ID, "payee", eth, apperr.NotFound},
			{"stranger", simple.ID, "stranger", eth, apperr.NotFound},
			{"stranger, bad body", simple.ID, "stranger", bad, apperr.NotFound},
			{"unknown voucher", ids.New(ids.Voucher), "payer", eth, apperr.NotFound},
			{"missing suppliedPayment", simple.ID, "payer", voucher.NegotiateInput{}, apperr.ValidationFailed},
			{"bad address", simple.ID, "payer", bad, apperr.ValidationFailed},
			{"too precise", simple.ID, "payer", func() voucher.NegotiateInput {
				in := supplied("ethereum", "USDC", usdcEth)
				in.SuppliedPayment.Amount = "0.1234567"
				return in
			}(), apperr.ValidationFailed},
			{"reserved", reserved.ID, "payer", eth, apperr.NotRedeemed},
			{"reserved, other network: state first", reserved.ID, "payer", polygon, apperr.NotRedeemed},
			{"resolved", resolved.ID, "payer", eth, apperr.AlreadyResolved},
			{"discarded", discarded.ID, "payer", eth, apperr.Discarded},
			{"custom", custom.ID, "payer", eth, apperr.NotSimple},
			{"custom, bad body: body first", custom.ID, "payer", bad, apperr.ValidationFailed},
			{"custom, other network: not_simple first", custom.ID, "payer", polygon, apperr.NotSimple},
			{"different network", simple.ID, "payer", polygon, apperr.DifferentNetwork},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var before []any
				if c.name != "unknown voucher" {
					before = f.row(c.id)
				}
				_, err := f.svc.Negotiate(p.as(c.who), c.id, c.in)
				wantCode(t, err, c.code)
				if before != nil {
					f.unchanged(c.id, before)
				}
			})
		}
		f.clock.Add(ttl)
		_, err = f.svc.Negotiate(as(p.payer), simple.ID, eth)
		wantCode(t, err, apperr.Expired)
	})
}
