package networks_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/settlement/networks"
)

const file = `{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [
    {"network": "local", "type": "evm", "chainId": "%s"%s},
    {"network": "other", "type": "evm", "chainId": "5"}
  ],
  "tokens": [
    {"network": "local", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "other", "currency": "OTH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true}
  ],
  "prices": {"ETH": "3000", "OTH": "1"}
}`

func registry(t *testing.T, chainID, rpc string) *finance.Registry {
	t.Helper()
	extra := ""
	if rpc != "" {
		extra = fmt.Sprintf(`, "rpcUrl": %q`, rpc)
	}
	cfg, err := finance.Load([]byte(fmt.Sprintf(file, chainID, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Registry
}

func TestDial(t *testing.T) {
	sim := testchain.NewSim()
	defer sim.Close()
	srv := httptest.NewServer(testchain.Handler(sim.RPC, nil))
	defer srv.Close()
	ctx := context.Background()

	// Development: "local" verified, "other" (no rpcUrl) trusted.
	set, err := networks.Dial(ctx, registry(t, "1337", srv.URL), networks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Chains) != 1 || set.Chains["local"] == nil || set.Feeds["local"] == nil {
		t.Fatalf("chains = %v", set.Chains)
	}
	if head, err := set.Chains["local"].Head(ctx); err != nil || head != 0 {
		t.Fatalf("head %d %v", head, err)
	}
	set.Close()

	// A node serving another chain stops the start, naming the network.
	_, err = networks.Dial(ctx, registry(t, "1", srv.URL), networks.Options{})
	if err == nil || !strings.Contains(err.Error(), `network "local"`) || !strings.Contains(err.Error(), "serves chain 1337") {
		t.Fatalf("chain id mismatch: %v", err)
	}

	// Production: a network with tokens and no rpcUrl stops the start...
	_, err = networks.Dial(ctx, registry(t, "1337", srv.URL), networks.Options{Production: true})
	if err == nil || !strings.Contains(err.Error(), `network "other" has tokens but no rpcUrl`) {
		t.Fatalf("production without rpcUrl: %v", err)
	}
	// ...unless receipts are explicitly trusted.
	set, err = networks.Dial(ctx, registry(t, "1337", srv.URL), networks.Options{Production: true, TrustReceipts: true})
	if err != nil || len(set.Chains) != 1 {
		t.Fatalf("trusted: %v %v", set, err)
	}
	set.Close()

	// An unreachable node stops the start too, without the URL's secret.
	_, err = networks.Dial(ctx, registry(t, "1337", "http://127.0.0.1:1/v3/SECRETKEY"), networks.Options{})
	if err == nil || !strings.Contains(err.Error(), `network "local"`) || strings.Contains(err.Error(), "SECRETKEY") {
		t.Fatalf("unreachable: %v", err)
	}
}

// A network's depositFactory is checked at start: an address without the
// factory (or with another contract) stops the start naming the network;
// the deployed factory starts it, and with a sweep key the network gets a
// sweeper paying gas from that key's account. The key never appears in an
// error.
func TestDepositFactoryCheckedAtStart(t *testing.T) {
	deployer := testchain.DevAccount(0)
	sim := testchain.NewSim(deployer.Address)
	defer sim.Close()
	srv := httptest.NewServer(testchain.Handler(sim.RPC, nil))
	defer srv.Close()
	ctx := context.Background()
	h, err := testchain.Send(ctx, sim.Client, deployer, nil, nil, deposit.FactoryCode, 0)
	if err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	rc, err := sim.Client.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy: %v %v", rc, err)
	}
	withFactory := func(factory string) *finance.Registry {
		cfg, err := finance.Load([]byte(fmt.Sprintf(file, "1337", fmt.Sprintf(`, "rpcUrl": %q, "depositFactory": %q`, srv.URL, factory))))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Registry
	}
	key := testchain.NewAccount()
	for _, bad := range []string{testchain.NewAccount().Address.Hex(), deployer.Address.Hex()} {
		_, err := networks.Dial(ctx, withFactory(bad), networks.Options{SweepKey: key.Key})
		if err == nil || !strings.Contains(err.Error(), `network "local": depositFactory`) {
			t.Fatalf("a depositFactory with no factory at %s: %v", bad, err)
		}
		if strings.Contains(strings.ToLower(err.Error()), hex.EncodeToString(crypto.FromECDSA(key.Key))) {
			t.Fatal("the sweep key in an error")
		}
	}
	set, err := networks.Dial(ctx, withFactory(rc.ContractAddress.Hex()), networks.Options{})
	if err != nil || len(set.Sweepers) != 0 {
		t.Fatalf("the factory, no sweep key: %v %v", set, err)
	}
	set.Close()
	set, err = networks.Dial(ctx, withFactory(rc.ContractAddress.Hex()), networks.Options{SweepKey: key.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	sw, ok := set.Sweepers["local"].(*evm.Sweeper)
	if !ok || len(set.Sweepers) != 1 || sw.Account() != key.Address.Hex() || sw.MaxBatch() != deposit.MaxFlushes {
		t.Fatalf("sweepers %v", set.Sweepers)
	}
}
