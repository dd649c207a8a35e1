package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const chainFinance = `{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "local", "type": "evm", "chainId": "%s", "rpcUrl": "%s", "confirmations": 2, "pollInterval": "500ms"}],
  "tokens": [
    {"network": "local", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "local", "currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6, "native": false}
  ],
  "prices": {"USDC": "1"},
  "priceFeeds": [{"currency": "ETH", "network": "local", "address": "%s", "maxAge": "1h"}]
}`

func writeFile(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "finance.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The binary dials the finance file's networks at start: a node serving
// another chain stops it naming the network; the right one starts it, and
// GET /finance/rates shows the feed's price and source. In production a
// network with tokens and no rpcUrl stops it unless receipts are trusted.
func TestStartChecksChains(t *testing.T) {
	sim := testchain.NewSim(testchain.DevAccount(0).Address)
	defer sim.Close()
	srv := httptest.NewServer(testchain.Handler(sim.RPC, nil))
	defer srv.Close()
	ctx := context.Background()
	h, err := testchain.Send(ctx, sim.Client, testchain.DevAccount(0), nil, nil, testchain.DeployAggregatorData(8, "ETH / USD"), 0)
	if err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	rc, err := sim.Client.TransactionReceipt(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	feed := rc.ContractAddress
	updated := time.Now().Add(-5 * time.Minute).UTC().Truncate(time.Second)
	if _, err := testchain.Send(ctx, sim.Client, testchain.DevAccount(0), &feed, nil, testchain.SetAnswerData(big.NewInt(2999_50000000), updated), 0); err != nil {
		t.Fatal(err)
	}
	sim.Commit()

	bin := testserver.Binary(t)
	run := func(env ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, bin)
		cmd.Env = append(os.Environ(), append([]string{"VOUCHER_DATABASE_URL=sqlite://" + t.TempDir() + "/x.db", "VOUCHER_ADDR=127.0.0.1:0"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("voucherd started (%v):\n%s", env, out)
		}
		return string(out)
	}
	out := run("VOUCHER_FINANCE_FILE=" + writeFile(t, fmt.Sprintf(chainFinance, "1", srv.URL, feed.Hex())))
	if !strings.Contains(out, `network "local"`) || !strings.Contains(out, "serves chain 1337") {
		t.Fatalf("chain id mismatch: the error does not name the network and the chains:\n%s", out)
	}
	prod := []string{"VOUCHER_ENV=production", "VOUCHER_JWT_SECRET=" + strings.Repeat("s", 32),
		"VOUCHER_ENCRYPTION_KEY=MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE="}
	out = run(prod...)
	if !strings.Contains(out, `network "ethereum" has tokens but no rpcUrl`) || !strings.Contains(out, "VOUCHER_TRUST_RECEIPTS") {
		t.Fatalf("production without rpcUrl:\n%s", out)
	}

	s := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{
		"VOUCHER_FINANCE_FILE": writeFile(t, fmt.Sprintf(chainFinance, "1337", srv.URL, feed.Hex())),
	}})
	r := s.Do(t, "GET", "/api/v1/finance/rates", "", nil)
	var rates struct {
		Rates   map[string]string
		Sources map[string]struct{ Source, UpdatedAt string }
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &rates) != nil {
		t.Fatalf("rates: %d %s", r.Status, r.Body)
	}
	if rates.Rates["ETH"] != "2999.5" || rates.Sources["ETH"].Source != "feed" ||
		rates.Sources["ETH"].UpdatedAt != updated.Format("2006-01-02T15:04:05.000Z") || rates.Sources["USDC"].Source != "file" {
		t.Fatalf("rates: %s", r.Body)
	}
	// GraphQL's rates show the same sources, as a list by currency.
	g := s.GraphQL(t, "", `{ rates { rates sources { currency source updatedAt } } }`, nil)
	var gq struct {
		Rates struct {
			Rates   map[string]string
			Sources []struct{ Currency, Source, UpdatedAt string }
		}
	}
	if len(g.Errors) > 0 || json.Unmarshal(g.Data, &gq) != nil || len(gq.Rates.Sources) != len(rates.Sources) || len(gq.Rates.Sources) < 2 {
		t.Fatalf("GraphQL rates: %+v %s", g.Errors, g.Data)
	}
	for i, src := range gq.Rates.Sources {
		rest := rates.Sources[src.Currency]
		if src.Source != rest.Source || src.UpdatedAt != rest.UpdatedAt || gq.Rates.Rates[src.Currency] != rates.Rates[src.Currency] ||
			i > 0 && gq.Rates.Sources[i-1].Currency >= src.Currency {
			t.Fatalf("GraphQL source %d %+v, REST %+v (%s)", i, src, rest, g.Data)
		}
	}
	if !strings.Contains(s.Logs(), "network verified on chain") || strings.Contains(s.Logs(), srv.URL) {
		t.Fatalf("the start log should say the network is verified, without its URL:\n%s", s.Logs())
	}
}
