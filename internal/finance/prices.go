package finance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/shopspring/decimal"
)

// PriceSource gives USD prices by currency symbol. The file-backed
// StaticPrices implements it; a live feed can replace it without touching
// quoting or the rates route. Implementations must be safe for concurrent
// use and must never return a non-positive price (callers also check, since
// a zero price would divide by zero in a quote).
type PriceSource interface {
	// Price returns the USD price of one whole unit of currency and when it
	// was observed. An unknown currency is an error matching ErrNoPrice.
	Price(ctx context.Context, currency string) (decimal.Decimal, time.Time, error)
	// Rates returns every price the source has and when they were observed
	// (for a feed with per-symbol times, the oldest). The caller may not
	// modify the map.
	Rates(ctx context.Context) (map[string]decimal.Decimal, time.Time, error)
}

// ErrNoPrice is returned by a PriceSource for a currency it does not price.
var ErrNoPrice = errors.New("no price for currency")

// StaticPrices is a fixed price list, as loaded from the finance config.
type StaticPrices struct {
	prices    map[string]decimal.Decimal
	updatedAt time.Time
}

// NewStaticPrices copies prices, which must all be positive.
func NewStaticPrices(prices map[string]decimal.Decimal, updatedAt time.Time) (*StaticPrices, error) {
	for c, p := range prices {
		if p.Sign() <= 0 {
			return nil, fmt.Errorf("price of %s must be positive, got %s", c, p)
		}
	}
	return &StaticPrices{prices: maps.Clone(prices), updatedAt: updatedAt}, nil
}

// Price implements PriceSource.
func (s *StaticPrices) Price(_ context.Context, currency string) (decimal.Decimal, time.Time, error) {
	p, ok := s.prices[currency]
	if !ok {
		return decimal.Decimal{}, time.Time{}, fmt.Errorf("%w %q", ErrNoPrice, currency)
	}
	return p, s.updatedAt, nil
}

// Rates implements PriceSource. The map is a copy: StaticPrices stays
// immutable whatever the caller does with it.
func (s *StaticPrices) Rates(context.Context) (map[string]decimal.Decimal, time.Time, error) {
	return maps.Clone(s.prices), s.updatedAt, nil
}
