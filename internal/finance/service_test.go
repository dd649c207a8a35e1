package finance

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/money"
)

// fakePrices is a PriceSource whose prices and failures a test controls.
type fakePrices struct {
	prices map[string]decimal.Decimal
	at     map[string]time.Time
	err    error
}

func (f *fakePrices) Price(_ context.Context, c string) (decimal.Decimal, time.Time, error) {
	if f.err != nil {
		return decimal.Decimal{}, time.Time{}, f.err
	}
	p, ok := f.prices[c]
	if !ok {
		return decimal.Decimal{}, time.Time{}, ErrNoPrice
	}
	return p, f.at[c], nil
}

func (f *fakePrices) Rates(context.Context) (map[string]decimal.Decimal, time.Time, error) {
	if f.err != nil {
		return nil, time.Time{}, f.err
	}
	return f.prices, f.at["*"], nil
}

func prices(kv ...string) *fakePrices {
	f := &fakePrices{prices: map[string]decimal.Decimal{}, at: map[string]time.Time{}}
	for i := 0; i < len(kv); i += 2 {
		f.prices[kv[i]] = decimal.RequireFromString(kv[i+1])
	}
	return f
}

// testConfig is a chain with made-up tokens whose prices the tests choose,
// for cases the real default cannot produce.
const testConfig = `{
  "updatedAt": "2026-01-01T00:00:00Z",
  "networks": [{"network": "testnet", "type": "evm", "chainId": "31337"}],
  "tokens": [
    {"network": "testnet", "currency": "A18", "currencyAddress": "0x0000000000000000000000000000000000000001", "decimals": 18},
    {"network": "testnet", "currency": "B18", "currencyAddress": "0x0000000000000000000000000000000000000002", "decimals": 18},
    {"network": "testnet", "currency": "C6", "currencyAddress": "0x0000000000000000000000000000000000000003", "decimals": 6},
    {"network": "testnet", "currency": "D0", "currencyAddress": "0x0000000000000000000000000000000000000004", "decimals": 0}
  ],
  "prices": {"A18": "1", "B18": "1", "C6": "1", "D0": "1"}
}`

func testService(t testing.TB, ps PriceSource, opts ...Option) *Service {
	t.Helper()
	cfg, err := Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, append([]Option{WithPriceSource(ps)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func defaultService(t testing.TB, opts ...Option) *Service {
	t.Helper()
	s, err := New(Default(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestQuoteDefault(t *testing.T) {
	s := defaultService(t)
	tests := []struct {
		name                    string
		network, expCur, amount string
		supCur                  string
		wantAmount, wantRate    string
	}{
		// 100/3000 = 0.0333…, ceiling at 18 decimals.
		{"USDC to ETH repeating", "ethereum", "USDC", "100", "ETH", "0.033333333333333334", "0.000333333333333333333"},
		{"USDT to ETH repeating", "arbitrum", "USDT", "7", "ETH", "0.002333333333333334", "0.000333333333333333333"},
		{"ETH to USDC exact", "ethereum", "ETH", "1", "USDC", "3000", "3000"},
		{"one wei of ETH rounds up to one USDC unit", "ethereum", "ETH", "0.000000000000000001", "USDC", "0.000001", "3000"},
		{"USDC to DAI more decimals", "ethereum", "USDC", "12.345678", "DAI", "12.345678", "1"},
		{"DAI to USDC fewer decimals rounds up", "ethereum", "DAI", "1.000000000000000001", "USDC", "1.000001", "1"},
		{"DAI dust to USDT", "ethereum", "DAI", "0.000000000000000001", "USDT", "0.000001", "1"},
		{"POL to USDC", "polygon", "POL", "10", "USDC", "5", "0.5"},
		{"USDC to POL", "polygon", "USDC", "1", "POL", "2", "2"},
		{"USDC unit to POL", "polygon", "USDC", "0.000001", "POL", "0.000002", "2"},
		{"ETH to DAI on base", "base", "ETH", "0.1", "DAI", "300", "3000"},
		// 1/150 = 0.00666…, ceiling at SOL's 9 decimals; the rate rounds its
		// 18th significant digit up.
		{"USDC to SOL repeating", "solana", "USDC", "1", "SOL", "0.006666667", "0.00666666666666666667"},
		{"SOL to USDT", "solana", "SOL", "2", "USDT", "300", "150"},
		{"one lamport to USDC", "solana", "SOL", "0.000000001", "USDC", "0.000001", "150"},
		{"same token", "ethereum", "ETH", "1.5", "ETH", "1.5", "1"},
		{"same token solana", "solana", "USDC", "0.000001", "USDC", "0.000001", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := s.Quote(t.Context(), Payment{Network: tt.network, Currency: tt.expCur, Amount: tt.amount}, tt.network, tt.supCur)
			if err != nil {
				t.Fatal(err)
			}
			if q.Amount != tt.wantAmount || q.ExchangeRate != tt.wantRate {
				t.Fatalf("Quote = amount %s rate %s; want %s, %s", q.Amount, q.ExchangeRate, tt.wantAmount, tt.wantRate)
			}
			tok, _ := s.Registry().Token(tt.network, tt.supCur)
			if q.Network != tt.network || q.Currency != tt.supCur || q.CurrencyAddress != tok.CurrencyAddress || q.Decimals != tok.Decimals {
				t.Fatalf("Quote token = %+v, want %+v", q, tok)
			}
			if _, err := money.Parse(q.Amount, tok.Decimals); err != nil {
				t.Fatalf("quoted amount %s is not a valid %s amount: %v", q.Amount, tt.supCur, err)
			}
			if !q.AmountValue.Equal(decimal.RequireFromString(q.Amount)) {
				t.Fatalf("AmountValue %s != Amount %s", q.AmountValue, q.Amount)
			}
		})
	}
}

// TestQuoteExactNotNaive covers quotients where computing with a rounded
// exchange rate, as a float or 18-digit decimal, lands one unit off the true
// ceiling in either direction.
func TestQuoteExactNotNaive(t *testing.T) {
	tests := []struct {
		name        string
		pe, ps      string // prices of expected and supplied
		exp, sup    string
		amount      string
		want, rate  string
		naiveAmount string // what amount × FormatRate(rate) rounded up would give
	}{
		// 3 × 1/3 = 1 exactly; 3 × 0.333333333333333333 = 0.999999999999999999.
		{"rate rounded down", "1", "3", "A18", "B18", "3", "1", "0.333333333333333333", "0.999999999999999999"},
		// 3 × 2/3 = 2 exactly; 3 × 0.666666666666666667 = 2.000000000000000001.
		{"rate rounded up", "2", "3", "A18", "B18", "3", "2", "0.666666666666666667", "2.000000000000000001"},
		// 7 × 1/7 = 1; the 18-digit rate gives 0.999999999999999999.
		{"sevenths", "1", "7", "A18", "B18", "7", "1", "0.142857142857142857", "0.999999999999999999"},
		// 1/7 = 0.142857142857…, ceiling at 6 decimals.
		{"repeating to 6 decimals", "1", "7", "A18", "C6", "1", "0.142858", "0.142857142857142857", "0.142858"},
		{"large rate", "1000", "3", "A18", "B18", "0.000000000000000003", "0.000000000000001", "333.333333333333333", "0.000000000000001"},
		// 10 × 1/3 = 3.33… → a whole-unit token rounds up to 4.
		{"zero decimals", "1", "3", "A18", "D0", "10", "4", "0.333333333333333333", "4"},
		// A price with many digits: 1.5 / 0.000000000000000007 = 214285714285714285.714…
		{"tiny supplied price", "1.5", "0.000000000000000007", "A18", "C6", "0.000001", "214285714285.714286", "214285714285714286", "214285714285.714286"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testService(t, prices(tt.exp, tt.pe, tt.sup, tt.ps))
			q, err := s.Quote(t.Context(), Payment{Network: "testnet", Currency: tt.exp, Amount: tt.amount}, "testnet", tt.sup)
			if err != nil {
				t.Fatal(err)
			}
			if q.Amount != tt.want || q.ExchangeRate != tt.rate {
				t.Fatalf("Quote = %s at %s, want %s at %s", q.Amount, q.ExchangeRate, tt.want, tt.rate)
			}
			// Show the naive computation really differs where claimed.
			r, _ := new(big.Rat).SetString(q.ExchangeRate)
			a, _ := new(big.Rat).SetString(tt.amount)
			naive := money.Format(money.CeilToDecimals(new(big.Rat).Mul(a, r), q.Decimals))
			if naive != tt.naiveAmount {
				t.Fatalf("naive = %s, test expects %s", naive, tt.naiveAmount)
			}
		})
	}
}

func TestQuoteSpread(t *testing.T) {
	tests := []struct {
		name     string
		bps      int64
		exp, sup string
		amount   string
		want     string
	}{
		{"1% on stable swap", 100, "USDC", "DAI", "100", "101"},
		{"no spread on same token", 100, "USDC", "USDC", "100", "100"},
		// 1 × 1/3000 × 1.0001 = 10001/30000000 = 0.000333366666…
		{"1bp on repeating", 1, "USDC", "ETH", "1", "0.000333366666666667"},
		{"100% cap", MaxSpreadBps, "ETH", "USDC", "1", "6000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := defaultService(t, WithSpreadBps(tt.bps))
			q, err := s.Quote(t.Context(), Payment{Network: "ethereum", Currency: tt.exp, Amount: tt.amount}, "ethereum", tt.sup)
			if err != nil {
				t.Fatal(err)
			}
			if q.Amount != tt.want {
				t.Fatalf("amount = %s, want %s", q.Amount, tt.want)
			}
			wantBps := tt.bps
			if tt.exp == tt.sup {
				wantBps = 0
			}
			if q.SpreadBps != wantBps {
				t.Fatalf("SpreadBps = %d, want %d", q.SpreadBps, wantBps)
			}
		})
	}
	// 1 × 1/3 × 10001/10000 = 0.33336666…, ceiling at 6 decimals.
	s := testService(t, prices("A18", "1", "C6", "3"), WithSpreadBps(1))
	q, err := s.Quote(t.Context(), Payment{Network: "testnet", Currency: "A18", Amount: "1"}, "testnet", "C6")
	if err != nil || q.Amount != "0.333367" || q.ExchangeRate != "0.333333333333333333" {
		t.Fatalf("spread quote = %+v, %v", q, err)
	}
	for _, bad := range []int64{-1, MaxSpreadBps + 1} {
		if _, err := New(Default(), WithSpreadBps(bad)); err == nil {
			t.Errorf("New accepted spread %d", bad)
		}
	}
}

func TestQuoteErrors(t *testing.T) {
	s := defaultService(t)
	usdc := Payment{Network: "ethereum", Currency: "USDC", Amount: "10"}
	tests := []struct {
		name     string
		expected Payment
		net, cur string
		code     apperr.Code
		field    string
	}{
		{"other network", usdc, "polygon", "USDC", apperr.DifferentNetwork, ""},
		{"other network native", usdc, "solana", "SOL", apperr.DifferentNetwork, ""},
		{"unknown supplied network", usdc, "optimism", "USDC", apperr.ValidationFailed, "suppliedPayment.network"},
		// Body validation comes before the cross-check with the voucher.
		{"currency not on supplied network", usdc, "base", "USDT", apperr.ValidationFailed, "suppliedPayment.currency"},
		{"currency of another network", usdc, "ethereum", "POL", apperr.ValidationFailed, "suppliedPayment.currency"},
		{"case-sensitive currency", usdc, "ethereum", "usdc", apperr.ValidationFailed, "suppliedPayment.currency"},
		{"expected token gone", Payment{Network: "ethereum", Currency: "WBTC", Amount: "1"}, "ethereum", "USDC", apperr.Internal, ""},
		{"stored amount corrupt", Payment{Network: "ethereum", Currency: "USDC", Amount: "1.0000001"}, "ethereum", "DAI", apperr.Internal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Quote(t.Context(), tt.expected, tt.net, tt.cur)
			if !apperr.HasCode(err, tt.code) {
				t.Fatalf("err = %v, want code %s", err, tt.code)
			}
			if tt.field != "" {
				var e *apperr.Error
				errors.As(err, &e)
				if len(e.Details) != 1 || e.Details[0].Field != tt.field {
					t.Fatalf("details = %+v, want field %s", e.Details, tt.field)
				}
			}
		})
	}
}

func TestQuotePriceFailures(t *testing.T) {
	exp := Payment{Network: "testnet", Currency: "A18", Amount: "1"}
	down := &fakePrices{err: errors.New("feed down")}
	if _, err := testService(t, down).Quote(t.Context(), exp, "testnet", "B18"); !apperr.HasCode(err, apperr.Unavailable) ||
		!strings.Contains(err.Error(), "feed down") {
		t.Errorf("feed down: %v", err)
	}
	// The same token needs no price, so it still quotes while the feed is down.
	if q, err := testService(t, down).Quote(t.Context(), exp, "testnet", "A18"); err != nil || q.Amount != "1" {
		t.Errorf("same token while feed down: %+v, %v", q, err)
	}
	if _, err := testService(t, prices("A18", "1")).Quote(t.Context(), exp, "testnet", "B18"); !apperr.HasCode(err, apperr.RateUnavailable) {
		t.Errorf("missing price: %v", err)
	}
	for _, bad := range []string{"0", "-2"} {
		if _, err := testService(t, prices("A18", "1", "B18", bad)).Quote(t.Context(), exp, "testnet", "B18"); !apperr.HasCode(err, apperr.RateUnavailable) {
			t.Errorf("price %s: %v", bad, err)
		}
	}
}

func TestQuotePricedAt(t *testing.T) {
	older := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := older.Add(time.Minute)
	ps := prices("A18", "1", "B18", "2")
	ps.at["A18"], ps.at["B18"] = newer, older
	q, err := testService(t, ps).Quote(t.Context(), Payment{Network: "testnet", Currency: "A18", Amount: "1"}, "testnet", "B18")
	if err != nil || !q.PricedAt.Equal(older) {
		t.Fatalf("PricedAt = %v, %v; want %v", q.PricedAt, err, older)
	}
}

func TestCurrencies(t *testing.T) {
	s := defaultService(t)
	all, err := s.Currencies(t.Context(), "")
	if err != nil || len(all) != 18 {
		t.Fatalf("all = %d tokens, %v", len(all), err)
	}
	poly, err := s.Currencies(t.Context(), "polygon")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tok := range poly {
		got = append(got, tok.Currency)
	}
	if strings.Join(got, ",") != "POL,USDC,USDT,DAI" {
		t.Errorf("polygon = %v", got)
	}
	b, _ := json.Marshal(poly[:1])
	want := `[{"network":"polygon","currency":"POL","currencyAddress":"0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE","decimals":18,"native":true}]`
	if string(b) != want {
		t.Errorf("json = %s", b)
	}
	for _, bad := range []string{"Polygon", "optimism", " polygon"} {
		_, err := s.Currencies(t.Context(), bad)
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.ValidationFailed || e.Details[0].Field != "network" {
			t.Errorf("Currencies(%q) = %v", bad, err)
		}
	}
	// The caller cannot corrupt the registry through the returned slice.
	all[0].Currency = "XXX"
	if again, _ := s.Currencies(t.Context(), ""); again[0].Currency != "ETH" {
		t.Error("Currencies shares the registry's slice")
	}
}

func TestRates(t *testing.T) {
	r, err := defaultService(t).Rates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The domain value, marshalled with its Go names (REST's JSON names
	// are view.OfRates', checked by rest's tests).
	b, _ := json.Marshal(r)
	f := `{"Source":"file","UpdatedAt":"2026-01-01T00:00:00.000Z"}`
	want := `{"Base":"USD","Rates":{"DAI":"1","ETH":"3000","POL":"0.5","SOL":"150","USDC":"1","USDT":"1"},"UpdatedAt":"2026-01-01T00:00:00.000Z",` +
		`"Sources":{"DAI":` + f + `,"ETH":` + f + `,"POL":` + f + `,"SOL":` + f + `,"USDC":` + f + `,"USDT":` + f + `}}`
	if string(b) != want {
		t.Errorf("rates = %s\nwant    %s", b, want)
	}

	// A live source: extra symbols dropped, missing ones omitted, time in UTC ms.
	ps := prices("A18", "1.50", "B18", "0.000000000000000001", "BTC", "60000")
	ps.at["*"] = time.Date(2026, 3, 4, 5, 6, 7, 891234567, time.FixedZone("x", 2*3600))
	r, err = testService(t, ps).Rates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(r)
	f = `{"Source":"file","UpdatedAt":"2026-03-04T03:06:07.891Z"}`
	want = `{"Base":"USD","Rates":{"A18":"1.5","B18":"0.000000000000000001"},"UpdatedAt":"2026-03-04T03:06:07.891Z","Sources":{"A18":` + f + `,"B18":` + f + `}}`
	if string(b) != want {
		t.Errorf("rates = %s\nwant    %s", b, want)
	}

	if _, err := testService(t, &fakePrices{err: errors.New("down")}).Rates(t.Context()); !apperr.HasCode(err, apperr.Unavailable) {
		t.Errorf("down: %v", err)
	}
}

func TestStaticPrices(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := map[string]decimal.Decimal{"USDC": decimal.NewFromInt(1)}
	sp, err := NewStaticPrices(src, at)
	if err != nil {
		t.Fatal(err)
	}
	src["USDC"] = decimal.NewFromInt(2) // the source map is copied
	p, ts, err := sp.Price(t.Context(), "USDC")
	if err != nil || !p.Equal(decimal.NewFromInt(1)) || !ts.Equal(at) {
		t.Fatalf("Price = %v %v %v", p, ts, err)
	}
	if _, _, err := sp.Price(t.Context(), "ETH"); !errors.Is(err, ErrNoPrice) {
		t.Errorf("unknown price: %v", err)
	}
	m, _, _ := sp.Rates(t.Context())
	m["USDC"] = decimal.Zero
	if p, _, _ := sp.Price(t.Context(), "USDC"); !p.Equal(decimal.NewFromInt(1)) {
		t.Error("Rates exposes the internal map")
	}
	if _, err := NewStaticPrices(map[string]decimal.Decimal{"X": decimal.Zero}, at); err == nil {
		t.Error("zero price accepted")
	}
}

func TestNew(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("nil config accepted")
	}
	if _, err := New(&Config{Registry: Default().Registry}); err == nil {
		t.Error("config without prices accepted")
	}
	if s := defaultService(t); s.SpreadBps() != 0 {
		t.Error("default spread is not 0")
	}
}

func TestFormatRate(t *testing.T) {
	r := func(s string) *big.Rat {
		x, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("bad rat %s", s)
		}
		return x
	}
	tests := []struct {
		in   *big.Rat
		want string
	}{
		{r("3000"), "3000"},
		{r("1/20"), "0.05"},
		{r("2"), "2"},
		{r("1/3000"), "0.000333333333333333333"},
		{r("1/6000"), "0.000166666666666666667"},
		{r("1/150"), "0.00666666666666666667"},
		{r("1/7"), "0.142857142857142857"},
		{r("2/3"), "0.666666666666666667"},
		{r("1000/3"), "333.333333333333333"},
		{r("10000000000000000000000000000000000000000/3"), "3333333333333333330000000000000000000000"},
		// Terminates in exactly 36 digits: shown exactly.
		{new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 36)), "0.000000000014551915228366851806640625"},
		// Terminates only after 40 digits: rounded to 18 significant digits.
		{new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 40)), "0.000000000000909494701772928238"},
		// Rounding carries into a trailing zero, which is trimmed.
		{r("59999999999999999999/300000000000000000000"), "0.2"},
		{r("0"), "0"},
		{r("-1/2"), "-0.5"},
	}
	for _, tt := range tests {
		if got := FormatRate(tt.in); got != tt.want {
			t.Errorf("FormatRate(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzQuote checks the quote against its definition for arbitrary amounts,
// prices and spreads: the quoted amount is a valid amount of the supplied
// token, covers the expected value (the payee never gets less) and is the
// smallest such amount (the payer is never charged a unit more).
func FuzzQuote(f *testing.F) {
	f.Add("3", "1", "3", uint8(0), uint8(1), uint16(0))
	f.Add("100", "1", "3000", uint8(2), uint8(0), uint16(0))
	f.Add("1.000000000000000001", "1", "1", uint8(0), uint8(2), uint16(1))
	f.Add("7", "0.5", "150", uint8(1), uint8(3), uint16(10000))
	f.Add("0.000001", "123.456", "0.000000000000000007", uint8(2), uint8(3), uint16(37))
	syms := []string{"A18", "B18", "C6", "D0"}
	f.Fuzz(func(t *testing.T, amount, pe, ps string, ei, si uint8, bps uint16) {
		exp, sup := syms[int(ei)%len(syms)], syms[int(si)%len(syms)]
		spread := int64(bps) % (MaxSpreadBps + 1)
		pd, err1 := money.ParseAnyScale(pe)
		sd, err2 := money.ParseAnyScale(ps)
		if err1 != nil || err2 != nil {
			return
		}
		s := testService(t, prices(exp, pe, sup, ps), WithSpreadBps(spread))
		expTok, _ := s.Registry().Token("testnet", exp)
		a, err := money.Parse(amount, expTok.Decimals)
		q, qerr := s.Quote(t.Context(), Payment{Network: "testnet", Currency: exp, Amount: amount}, "testnet", sup)
		if err != nil {
			if !apperr.HasCode(qerr, apperr.Internal) {
				t.Fatalf("invalid stored amount %q quoted: %v", amount, qerr)
			}
			return
		}
		if qerr != nil {
			t.Fatalf("Quote: %v", qerr)
		}
		supTok, _ := s.Registry().Token("testnet", sup)
		if _, err := money.Parse(q.Amount, supTok.Decimals); err != nil {
			t.Fatalf("quoted %q is not a valid %s amount: %v", q.Amount, sup, err)
		}
		// target = amount × pe / ps × (1 + spread), or amount itself for the same token.
		target := a.Rat()
		if exp != sup {
			target.Mul(target, pd.Rat())
			target.Quo(target, sd.Rat())
			target.Mul(target, big.NewRat(MaxSpreadBps+spread, MaxSpreadBps))
		}
		got := q.AmountValue.Rat()
		if got.Cmp(target) < 0 {
			t.Fatalf("quote %s below exact value %s", q.Amount, target.FloatString(40))
		}
		unit := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(supTok.Decimals)), nil))
		if new(big.Rat).Sub(got, unit).Cmp(target) >= 0 {
			t.Fatalf("quote %s is a unit more than needed for %s", q.Amount, target.FloatString(40))
		}
	})
}
