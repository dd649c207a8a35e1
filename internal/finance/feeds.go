package finance

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/shopspring/decimal"
)

// Price sources, as GET /finance/rates names them.
const (
	SourceFile = "file"
	SourceFeed = "feed"
)

// Price is one currency's USD price with where and when it was observed.
type Price struct {
	Value     decimal.Decimal
	Source    string // SourceFile or SourceFeed
	UpdatedAt time.Time
}

// SourcedRates is implemented by price sources that can say, per currency,
// where a price comes from. Service.Rates uses it when present (otherwise
// every price is reported as a file price at the source's time).
type SourcedRates interface {
	SourcedRates(ctx context.Context) (map[string]Price, error)
}

// FeedReader reads a Chainlink-compatible aggregator (AggregatorV3Interface)
// at address: latestRoundData's answer and updatedAt, and decimals.
// evm.Chain implements it over the network's RPC.
type FeedReader interface {
	LatestRound(ctx context.Context, address string) (answer *big.Int, decimals uint8, updatedAt time.Time, err error)
}

// LivePrices prices currencies with a feed from their aggregator and the
// others from the file. An aggregator answer that is not positive, older than
// the feed's maxAge, or unreadable is no price (ErrNoPrice); so is a file
// price older than FileMaxAge (when set: production) against the file's
// updatedAt. Safe for concurrent use.
type LivePrices struct {
	file       *StaticPrices
	feeds      map[string]PriceFeed
	order      []string
	readers    map[string]FeedReader // by network
	fileMaxAge time.Duration
	now        func() time.Time
}

// LiveOptions configures NewLivePrices.
type LiveOptions struct {
	// FileMaxAge, when positive, makes file prices older than it (against
	// the file's updatedAt) no price. Production sets it
	// (VOUCHER_PRICE_MAX_AGE); development leaves it 0.
	FileMaxAge time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// NewLivePrices prices cfg's currencies: feeds through readers (one per
// network that carries a feed), the rest from cfg's file prices.
func NewLivePrices(cfg *Config, readers map[string]FeedReader, opt LiveOptions) (*LivePrices, error) {
	lp := &LivePrices{file: cfg.Prices, feeds: map[string]PriceFeed{}, readers: readers, fileMaxAge: opt.FileMaxAge, now: opt.Now}
	if lp.now == nil {
		lp.now = time.Now
	}
	for _, f := range cfg.Feeds {
		if readers[f.Network] == nil {
			return nil, fmt.Errorf("finance: price feed for %s: network %s is not connected", f.Currency, f.Network)
		}
		lp.feeds[f.Currency] = f
		lp.order = append(lp.order, f.Currency)
	}
	return lp, nil
}

// Price implements PriceSource.
func (lp *LivePrices) Price(ctx context.Context, currency string) (decimal.Decimal, time.Time, error) {
	p, err := lp.price(ctx, currency)
	if err != nil {
		return decimal.Decimal{}, time.Time{}, err
	}
	return p.Value, p.UpdatedAt, nil
}

func (lp *LivePrices) price(ctx context.Context, currency string) (Price, error) {
	if f, ok := lp.feeds[currency]; ok {
		return lp.read(ctx, f)
	}
	v, at, err := lp.file.Price(ctx, currency)
	if err != nil {
		return Price{}, err
	}
	if lp.fileMaxAge > 0 && lp.now().Sub(at) > lp.fileMaxAge {
		return Price{}, fmt.Errorf("%w %q: the finance file's prices (updatedAt %s) are older than %s", ErrNoPrice, currency, formatTime(at), lp.fileMaxAge)
	}
	return Price{Value: v, Source: SourceFile, UpdatedAt: at}, nil
}

// read asks the aggregator for its latest round and judges it.
func (lp *LivePrices) read(ctx context.Context, f PriceFeed) (Price, error) {
	answer, decimals, updatedAt, err := lp.readers[f.Network].LatestRound(ctx, f.Address)
	if err != nil {
		return Price{}, fmt.Errorf("%w %q: reading the feed on %s: %w", ErrNoPrice, f.Currency, f.Network, err)
	}
	if answer == nil || answer.Sign() <= 0 {
		return Price{}, fmt.Errorf("%w %q: the feed's answer is not positive", ErrNoPrice, f.Currency)
	}
	if age := lp.now().Sub(updatedAt); age > f.MaxAge {
		return Price{}, fmt.Errorf("%w %q: the feed's answer is %s old (maxAge %s)", ErrNoPrice, f.Currency, age.Round(time.Second), f.MaxAge)
	}
	return Price{Value: decimal.NewFromBigInt(answer, -int32(decimals)), Source: SourceFeed, UpdatedAt: updatedAt.UTC()}, nil
}

// SourcedRates implements SourcedRates: every currency that has a price now.
// A feed that cannot give one leaves its currency out, as does a stale file.
func (lp *LivePrices) SourcedRates(ctx context.Context) (map[string]Price, error) {
	out := map[string]Price{}
	all, _, err := lp.file.Rates(ctx)
	if err != nil {
		return nil, err
	}
	for c := range all {
		if p, err := lp.price(ctx, c); err == nil {
			out[c] = p
		} else if !errors.Is(err, ErrNoPrice) {
			return nil, err
		}
	}
	for _, c := range lp.order {
		if p, err := lp.price(ctx, c); err == nil {
			out[c] = p
		}
	}
	return out, nil
}

// Rates implements PriceSource (the oldest time of the prices given).
func (lp *LivePrices) Rates(ctx context.Context) (map[string]decimal.Decimal, time.Time, error) {
	src, err := lp.SourcedRates(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := make(map[string]decimal.Decimal, len(src))
	var oldest time.Time
	for c, p := range src {
		out[c] = p.Value
		if oldest.IsZero() || p.UpdatedAt.Before(oldest) {
			oldest = p.UpdatedAt
		}
	}
	return out, oldest, nil
}

// SourcedRates implements SourcedRates for the file's prices.
func (s *StaticPrices) SourcedRates(context.Context) (map[string]Price, error) {
	out := make(map[string]Price, len(s.prices))
	for c, v := range s.prices {
		out[c] = Price{Value: v, Source: SourceFile, UpdatedAt: s.updatedAt}
	}
	return out, nil
}
