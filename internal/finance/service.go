package finance

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/money"
)

// MaxSpreadBps bounds the configurable FX spread (100%).
const MaxSpreadBps = 10000

// RateSignificantDigits is how many significant digits a non-terminating
// (or very long) exchange rate is rounded to; see FormatRate.
const RateSignificantDigits = 18

// rateMaxExactDigits is the longest fraction an exchange rate is shown
// exactly with. Prices are decimals, so a rate terminates whenever the
// supplied price's digits have only the factors 2 and 5; a bound keeps an
// odd price such as 2^-100 from producing a 100-digit rate.
const rateMaxExactDigits = 36

// timeFormat is the API's timestamp form: RFC 3339, UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Service is the finance read and quote service. It is safe for concurrent
// use.
type Service struct {
	reg       *Registry
	prices    PriceSource
	spreadBps int64
}

// Option configures New.
type Option func(*Service)

// WithPriceSource replaces the config's static prices, e.g. by a live feed.
func WithPriceSource(ps PriceSource) Option { return func(s *Service) { s.prices = ps } }

// WithSpreadBps adds an FX spread in basis points (0 to MaxSpreadBps) to
// every cross-currency quote. The default is 0.
func WithSpreadBps(bps int64) Option { return func(s *Service) { s.spreadBps = bps } }

// New builds the service over cfg's registry, priced by cfg's static prices
// unless WithPriceSource says otherwise.
func New(cfg *Config, opts ...Option) (*Service, error) {
	if cfg == nil || cfg.Registry == nil {
		return nil, errors.New("finance: nil config")
	}
	s := &Service{reg: cfg.Registry}
	if cfg.Prices != nil { // a nil *StaticPrices must not become a non-nil interface
		s.prices = cfg.Prices
	}
	for _, o := range opts {
		o(s)
	}
	if s.prices == nil {
		return nil, errors.New("finance: no price source")
	}
	if s.spreadBps < 0 || s.spreadBps > MaxSpreadBps {
		return nil, fmt.Errorf("finance: spread must be 0 to %d basis points, got %d", MaxSpreadBps, s.spreadBps)
	}
	return s, nil
}

// Registry returns the token registry.
func (s *Service) Registry() *Registry { return s.reg }

// SpreadBps returns the configured FX spread.
func (s *Service) SpreadBps() int64 { return s.spreadBps }

// Currencies serves GET /api/v1/finance/currencies[?network=]: the registry's
// tokens in config order, as a bare JSON array. network "" (absent or empty
// query parameter) lists all networks. An unknown network is
// validation_failed on field "network" rather than an empty list, so a typo
// in a client cannot look like "no tokens supported".
func (s *Service) Currencies(_ context.Context, network string) ([]Token, error) {
	if network != "" {
		if _, ok := s.reg.Network(network); !ok {
			return nil, apperr.Invalid("network", "unknown network")
		}
	}
	return s.reg.Tokens(network), nil
}

// Rates are the USD prices of the registry's currencies (REST renders
// them as view.OfRates).
type Rates struct {
	Base  string
	Rates map[string]string
	// UpdatedAt is RFC 3339 in UTC with milliseconds: the oldest of the
	// prices listed.
	UpdatedAt string
	// Sources says, for each currency in Rates, where its price comes from
	// ("feed": a Chainlink-compatible aggregator; "file": the finance file)
	// and when it was observed.
	Sources map[string]RateSource
}

// RateSource is one price's origin.
type RateSource struct {
	Source    string
	UpdatedAt string
}

// Rates serves GET /api/v1/finance/rates: the USD price of every currency in
// the registry, as canonical decimal strings. Prices a live source has for
// currencies outside the registry are left out (the route describes what
// the service accepts); a registry currency the source lacks is left out
// rather than failing the whole list. A failing source is unavailable (503).
func (s *Service) Rates(ctx context.Context) (Rates, error) {
	var all map[string]Price
	if sr, ok := s.prices.(SourcedRates); ok {
		var err error
		if all, err = sr.SourcedRates(ctx); err != nil {
			return Rates{}, unavailable(err)
		}
	} else {
		vals, at, err := s.prices.Rates(ctx)
		if err != nil {
			return Rates{}, unavailable(err)
		}
		all = make(map[string]Price, len(vals))
		for c, v := range vals {
			all[c] = Price{Value: v, Source: SourceFile, UpdatedAt: at}
		}
	}
	out := Rates{Base: "USD", Rates: map[string]string{}, Sources: map[string]RateSource{}}
	var oldest time.Time
	for _, c := range s.reg.Currencies() {
		if p, ok := all[c]; ok && p.Value.Sign() > 0 {
			out.Rates[c] = money.Format(p.Value)
			out.Sources[c] = RateSource{Source: p.Source, UpdatedAt: formatTime(p.UpdatedAt)}
			if oldest.IsZero() || p.UpdatedAt.Before(oldest) {
				oldest = p.UpdatedAt
			}
		}
	}
	out.UpdatedAt = formatTime(oldest)
	return out, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func unavailable(cause error) *apperr.Error {
	return &apperr.Error{Code: apperr.Unavailable, Message: "exchange rates are unavailable", Cause: cause}
}

// Quote is the supplied payment a negotiation computes.
type Quote struct {
	Network         string
	Currency        string
	CurrencyAddress string // the registry's (EIP-55 form on EVM)
	Decimals        int32
	// Amount is the canonical decimal string of AmountValue.
	Amount      string
	AmountValue decimal.Decimal
	// ExchangeRate is price(expected)/price(supplied) as FormatRate renders
	// it; it does not include the spread.
	ExchangeRate string
	// SpreadBps is the spread this quote applied (0 for the same token).
	SpreadBps int64
	// PricedAt is when the older of the two prices used was observed (zero
	// for a same-token quote, which uses no price).
	PricedAt time.Time
}

// Quote computes what the payer must supply in suppliedCurrency on
// suppliedNetwork to settle expected:
//
//	amount = ceil_d( expected.Amount × price(expected) / price(supplied) × (1 + spread/10000) )
//
// evaluated as one exact rational (math/big.Rat) and rounded once, up, to
// the supplied token's d decimals, so the payee never receives less than the
// expected value; no intermediate is ever rounded. Supplying the expected
// token itself quotes the expected amount unchanged, with rate "1", no
// spread and no price lookup (there is no exchange to charge for).
//
// Errors, in the order docs/vouchers.md gives (body before cross-checks):
// an unknown supplied network or currency is validation_failed
// (suppliedPayment.network / suppliedPayment.currency); a supplied network
// other than the expected one is different_network; a missing or unusable
// price is unavailable; an expected payment the registry no longer knows is
// internal (it was validated at redeem, so the registry changed under it).
func (s *Service) Quote(ctx context.Context, expected Payment, suppliedNetwork, suppliedCurrency string) (Quote, error) {
	if _, ok := s.reg.Network(suppliedNetwork); !ok {
		return Quote{}, apperr.Invalid("suppliedPayment.network", "unknown network")
	}
	sup, ok := s.reg.Token(suppliedNetwork, suppliedCurrency)
	if !ok {
		return Quote{}, apperr.Invalid("suppliedPayment.currency", "unknown currency on network "+suppliedNetwork)
	}
	if suppliedNetwork != expected.Network {
		return Quote{}, apperr.New(apperr.DifferentNetwork, "supplied currency is on a different network than the expected currency")
	}
	exp, ok := s.reg.Token(expected.Network, expected.Currency)
	if !ok {
		return Quote{}, apperr.InternalError(fmt.Errorf("finance: expected token %s/%s is not in the registry", expected.Network, expected.Currency))
	}
	amount, err := money.Parse(expected.Amount, exp.Decimals)
	if err != nil {
		return Quote{}, apperr.InternalError(fmt.Errorf("finance: stored expected amount %q: %w", expected.Amount, err))
	}

	q := Quote{
		Network:         sup.Network,
		Currency:        sup.Currency,
		CurrencyAddress: sup.CurrencyAddress,
		Decimals:        sup.Decimals,
	}
	if sup.Currency == exp.Currency {
		q.AmountValue = money.CeilToDecimals(amount.Rat(), sup.Decimals)
		q.Amount = money.Format(q.AmountValue)
		q.ExchangeRate = "1"
		return q, nil
	}

	pe, te, err := s.price(ctx, exp.Currency)
	if err != nil {
		return Quote{}, err
	}
	ps, ts, err := s.price(ctx, sup.Currency)
	if err != nil {
		return Quote{}, err
	}
	rate := new(big.Rat).Quo(pe.Rat(), ps.Rat())
	x := new(big.Rat).Mul(amount.Rat(), rate)
	if s.spreadBps != 0 {
		x.Mul(x, big.NewRat(MaxSpreadBps+s.spreadBps, MaxSpreadBps))
	}
	q.AmountValue = money.CeilToDecimals(x, sup.Decimals)
	q.Amount = money.Format(q.AmountValue)
	q.ExchangeRate = FormatRate(rate)
	q.SpreadBps = s.spreadBps
	q.PricedAt = te
	if ts.Before(te) {
		q.PricedAt = ts
	}
	return q, nil
}

// price is a currency's usable price. No price (ErrNoPrice: none in the
// file, a stale file in production, a feed that is stale, not positive or
// unreadable) is 400 rate_unavailable, naming the currency; any other
// failure of the source is 503 unavailable.
func (s *Service) price(ctx context.Context, currency string) (decimal.Decimal, time.Time, error) {
	p, at, err := s.prices.Price(ctx, currency)
	if errors.Is(err, ErrNoPrice) {
		return decimal.Decimal{}, time.Time{}, rateUnavailable(currency, err)
	}
	if err != nil {
		return decimal.Decimal{}, time.Time{}, unavailable(err)
	}
	if p.Sign() <= 0 {
		// A broken source must not turn into a division by zero or a
		// negative amount.
		return decimal.Decimal{}, time.Time{}, rateUnavailable(currency, fmt.Errorf("price source returned %s for %s", p, currency))
	}
	return p, at, nil
}

func rateUnavailable(currency string, cause error) *apperr.Error {
	return &apperr.Error{Code: apperr.RateUnavailable, Message: "no usable price for " + currency + " right now", Cause: cause}
}

// FormatRate renders an exchange rate as a canonical decimal string:
// exact when its decimal expansion terminates within 36 fraction digits
// (3000/1 → "3000", 150/3000 → "0.05"), otherwise rounded half-up to
// RateSignificantDigits significant digits (0.5/3000 →
// "0.000166666666666666667"), trailing zeros trimmed. A non-terminating
// value can never sit exactly on a half, so the rounding direction of ties
// only matters for the long terminating case. The rate is informational:
// amounts are always computed from the exact rational, never from this
// string.
func FormatRate(r *big.Rat) string {
	switch r.Sign() {
	case 0:
		return "0"
	case -1: // not a price ratio, but render it sensibly rather than wrongly
		return "-" + FormatRate(new(big.Rat).Neg(r))
	}
	if n, ok := terminatingDigits(r.Denom()); ok && n <= rateMaxExactDigits {
		return money.Format(money.CeilToDecimals(r, int32(n))) // exact: no rounding happens
	}
	// k is the position of the leading digit: 10^(k-1) <= r < 10^k. The
	// digit-count difference is within one of it.
	k := len(r.Num().String()) - len(r.Denom().String())
	for ratPow10(k).Cmp(r) <= 0 {
		k++
	}
	for ratPow10(k-1).Cmp(r) > 0 {
		k--
	}
	decimals := RateSignificantDigits - k
	// Half-up: floor(r × 10^decimals + 1/2).
	scaled := new(big.Rat).Mul(r, ratPow10(decimals))
	scaled.Add(scaled, big.NewRat(1, 2))
	q := new(big.Int).Quo(scaled.Num(), scaled.Denom())
	return money.Format(decimal.NewFromBigInt(q, -int32(decimals)))
}

// ratPow10 returns 10^n for any integer n.
func ratPow10(n int) *big.Rat {
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(n))), nil)
	if n < 0 {
		return new(big.Rat).SetFrac(big.NewInt(1), p)
	}
	return new(big.Rat).SetInt(p)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// terminatingDigits reports whether 1/den has a finite decimal expansion and
// how many fraction digits it needs (max of den's powers of 2 and 5).
func terminatingDigits(den *big.Int) (int, bool) {
	d := new(big.Int).Set(den)
	twos := int(d.TrailingZeroBits())
	d.Rsh(d, uint(twos))
	fives := 0
	five := big.NewInt(5)
	m := new(big.Int)
	for {
		q, r := new(big.Int).QuoRem(d, five, m)
		if r.Sign() != 0 {
			break
		}
		d = q
		fives++
	}
	if d.Cmp(big.NewInt(1)) != 0 {
		return 0, false
	}
	return max(twos, fives), true
}
