package evm_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

const feedFile = `{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "local", "type": "evm", "chainId": "1337", "rpcUrl": "http://127.0.0.1:1"}],
  "tokens": [
    {"network": "local", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "local", "currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6, "native": false}
  ],
  "prices": {"USDC": "1"},
  "priceFeeds": [{"currency": "ETH", "network": "local", "address": "%s", "maxAge": "1h"}]
}`

// A Chainlink-compatible aggregator on the simulated chain prices ETH
// through finance: fresh, stale and negative answers.
func TestPriceFeed(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	agg := w.deploy(t, testchain.DeployAggregatorData(8, "ETH / USD"))
	cfg := mustLoad(t, fmt.Sprintf(feedFile, agg.Hex()))
	now := time.Now()
	lp, err := finance.NewLivePrices(cfg, map[string]finance.FeedReader{"local": w.chain}, finance.LiveOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := finance.New(cfg, finance.WithPriceSource(lp))
	if err != nil {
		t.Fatal(err)
	}
	set := func(answer int64, at time.Time) {
		t.Helper()
		w.send(t, &agg, nil, testchain.SetAnswerData(big.NewInt(answer), at), 0)
		w.sim.Commit()
	}
	exp := finance.Payment{Network: "local", Currency: "USDC", Amount: "3012.5"}

	// Fresh: 3012.5 USD with 8 decimals.
	set(301_250_000_000, now.Add(-time.Minute))
	q, err := svc.Quote(ctx, exp, "local", "ETH")
	if err != nil || q.Amount != "1" || q.ExchangeRate != "0.000331950207468879668" {
		t.Fatalf("fresh feed: %+v %v", q, err)
	}
	rates, err := svc.Rates(ctx)
	if err != nil || rates.Rates["ETH"] != "3012.5" || rates.Sources["ETH"].Source != finance.SourceFeed ||
		rates.Sources["USDC"].Source != finance.SourceFile || rates.Sources["ETH"].UpdatedAt != now.Add(-time.Minute).UTC().Truncate(time.Second).Format("2006-01-02T15:04:05.000Z07:00") {
		t.Fatalf("rates: %+v %v", rates, err)
	}

	// Stale: older than maxAge (1h).
	set(301_250_000_000, now.Add(-61*time.Minute))
	if _, err := svc.Quote(ctx, exp, "local", "ETH"); !isRateUnavailable(err) {
		t.Fatalf("stale feed quoted: %v", err)
	}
	if rates, err := svc.Rates(ctx); err != nil || rates.Rates["ETH"] != "" || rates.Rates["USDC"] != "1" {
		t.Fatalf("rates with a stale feed: %+v %v", rates, err)
	}

	// Negative and zero answers are no price.
	for _, a := range []int64{-5, 0} {
		set(a, now)
		if _, err := svc.Quote(ctx, exp, "local", "ETH"); !isRateUnavailable(err) {
			t.Fatalf("answer %d quoted: %v", a, err)
		}
	}

	// Not an aggregator at all (a token): no price, not a panic.
	lp2, _ := finance.NewLivePrices(mustLoad(t, fmt.Sprintf(feedFile, w.token.Hex())), map[string]finance.FeedReader{"local": w.chain}, finance.LiveOptions{})
	if _, _, err := lp2.Price(ctx, "ETH"); !errors.Is(err, finance.ErrNoPrice) {
		t.Fatalf("a token as a feed: %v", err)
	}
}

func isRateUnavailable(err error) bool { return apperr.HasCode(err, apperr.RateUnavailable) }

func mustLoad(t *testing.T, s string) *finance.Config {
	t.Helper()
	cfg, err := finance.Load([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
