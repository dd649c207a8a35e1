package finance

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
)

type fakeFeed struct {
	answer   *big.Int
	decimals uint8
	at       time.Time
	err      error
}

func (f *fakeFeed) LatestRound(context.Context, string) (*big.Int, uint8, time.Time, error) {
	return f.answer, f.decimals, f.at, f.err
}

func liveConfig(t *testing.T) *Config {
	t.Helper()
	s := strings.Replace(baseConfig, `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "https://rpc.example"}`, 1)
	s = strings.Replace(s, `"prices": {"ETH": "3000", "USDC": "1"}`,
		`"prices": {"USDC": "1"}, "priceFeeds": [{"currency": "ETH", "network": "ethereum", "address": "0x5f4ec3df9cbd43714fe2740f5e3616155c5b8419", "maxAge": "1h"}]`, 1)
	cfg, err := Load([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLivePrices(t *testing.T) {
	cfg := liveConfig(t)
	fileAt := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := fileAt.Add(25 * time.Hour)
	feed := &fakeFeed{answer: big.NewInt(250012345678), decimals: 8, at: now.Add(-10 * time.Minute)}
	readers := map[string]FeedReader{"ethereum": feed}
	exp := Payment{Network: "ethereum", Currency: "ETH", Amount: "1"}

	// Development: file prices have no age limit.
	lp, err := NewLivePrices(cfg, readers, LiveOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := New(cfg, WithPriceSource(lp))
	q, err := svc.Quote(t.Context(), exp, "ethereum", "USDC")
	if err != nil || q.Amount != "2500.123457" || !q.PricedAt.Equal(fileAt) {
		t.Fatalf("quote: %+v %v", q, err)
	}
	r, err := svc.Rates(t.Context())
	if err != nil || r.Rates["ETH"] != "2500.12345678" || r.Sources["ETH"] != (RateSource{SourceFeed, "2026-01-02T00:50:00.000Z"}) ||
		r.Sources["USDC"] != (RateSource{SourceFile, "2026-01-01T00:00:00.000Z"}) || r.UpdatedAt != "2026-01-01T00:00:00.000Z" {
		t.Fatalf("rates: %+v %v", r, err)
	}

	// Production: a file older than FileMaxAge is no price (400 rate_unavailable).
	lp, _ = NewLivePrices(cfg, readers, LiveOptions{FileMaxAge: 24 * time.Hour, Now: func() time.Time { return now }})
	svc, _ = New(cfg, WithPriceSource(lp))
	if _, err := svc.Quote(t.Context(), exp, "ethereum", "USDC"); !apperr.HasCode(err, apperr.RateUnavailable) {
		t.Fatalf("stale file price quoted: %v", err)
	}
	if r, err := svc.Rates(t.Context()); err != nil || r.Rates["USDC"] != "" || r.Rates["ETH"] == "" {
		t.Fatalf("rates with a stale file: %+v %v", r, err)
	}

	// A feed that cannot be read is no price, not a 503 nor a panic.
	feed.err = errors.New("connection refused")
	if _, _, err := lp.Price(t.Context(), "ETH"); !errors.Is(err, ErrNoPrice) {
		t.Fatalf("unreadable feed: %v", err)
	}
	feed.err = nil
	feed.at = now.Add(-2 * time.Hour)
	if _, _, err := lp.Price(t.Context(), "ETH"); !errors.Is(err, ErrNoPrice) || !strings.Contains(err.Error(), "old") {
		t.Fatalf("stale feed: %v", err)
	}

	// A feed on a network with no reader is a start-up error.
	if _, err := NewLivePrices(cfg, nil, LiveOptions{}); err == nil {
		t.Fatal("a feed without a reader was accepted")
	}
}
