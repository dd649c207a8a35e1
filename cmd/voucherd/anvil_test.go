package main_test

import (
	"bytes"
	"context"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/testsupport/testserver"
)

// End to end against an independent node: anvil (Foundry, from the npm
// package @foundry-rs/anvil, pinned by test/anvil/package-lock.json), the
// real ERC-20, a real signed transfer, and the real voucherd binary
// verifying the voucher's settlement on that node.
func TestSettlementOnAnvil(t *testing.T) {
	dir := testserver.NodePackage(t, "test/anvil")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	anvil := exec.Command(filepath.Join(dir, "node_modules", ".bin", "anvil"), "--port", fmt.Sprint(port), "--chain-id", "1337", "--block-time", "1", "--silent")
	if err := anvil.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = anvil.Process.Kill(); _ = anvil.Wait() }()
	rpcURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var c *ethclient.Client
	for {
		if c, err = ethclient.DialContext(ctx, rpcURL); err == nil {
			if _, err = c.ChainID(ctx); err == nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("anvil did not answer: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer c.Close()

	owner, payer, payee := testchain.DevAccount(0), testchain.DevAccount(1), testchain.DevAccount(2)
	h, err := testchain.Send(ctx, c, owner, nil, nil, testchain.DeployTokenData("USD Coin", "USDC", 6), 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := testchain.Wait(ctx, c, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy: %v %v", rc, err)
	}
	token := rc.ContractAddress
	if h, err = testchain.Send(ctx, c, owner, &token, nil, testchain.MintData(payer.Address, big.NewInt(1_000_000_000)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := testchain.Wait(ctx, c, h); err != nil {
		t.Fatal(err)
	}

	finance := fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "anvil", "type": "evm", "chainId": "1337", "rpcUrl": %q, "confirmations": 2, "pollInterval": "300ms"}],
  "tokens": [
    {"network": "anvil", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "anvil", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}
  ],
  "prices": {"ETH": "3000", "USDC": "1"}
}`, rpcURL, token.Hex())
	s := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{"VOUCHER_FINANCE_FILE": writeFile(t, finance)}})

	wallet := s.Device(t)
	_, code := s.Session(t, wallet)
	payeeID := s.Resource(t, code)
	r := s.Do(t, "POST", "/api/v1/vouchers/reserve-voucher", payeeID.Token, map[string]any{"code": code})
	if r.Status != 200 {
		t.Fatalf("reserve-voucher: %d %s", r.Status, r.Body)
	}
	id := r.Map(t)["id"].(string)
	r = s.Do(t, "POST", "/api/v1/vouchers/"+id+"/redeem-voucher", payeeID.Token, map[string]any{"expectedPayment": map[string]any{
		"network": "anvil", "currency": "USDC", "currencyAddress": token.Hex(), "amount": "12.5",
		"wallet": map[string]any{"address": payee.Address.Hex()},
	}})
	if r.Status != 200 {
		t.Fatalf("redeem-voucher: %d %s", r.Status, r.Body)
	}
	var v struct {
		ExpectedPayment struct{ ID string } `json:"expectedPayment"`
	}
	r.JSON(t, &v)

	// The payer's wallet pays for real: a signed ERC-20 transfer on anvil.
	h, err = testchain.Send(ctx, c, payer, &token, nil, testchain.TransferData(payee.Address, big.NewInt(12_500_000)), 0)
	if err != nil {
		t.Fatal(err)
	}
	r = s.Do(t, "POST", "/api/v1/vouchers/"+id+"/resolve-voucher", wallet.Token, map[string]any{
		"receipts": []map[string]any{{"paymentId": v.ExpectedPayment.ID, "transactionHash": h.Hex(), "amount": "12.5"}},
	})
	if r.Status != 200 {
		t.Fatalf("resolve-voucher: %d %s", r.Status, r.Body)
	}

	// The service follows anvil until the payment has 2 confirmations.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r = s.Do(t, "GET", "/api/v1/vouchers/"+id, wallet.Token, nil)
		if r.Status != 200 {
			t.Fatalf("get voucher: %d %s", r.Status, r.Body)
		}
		if bytes.Contains(r.Body, []byte(`"status":"CONFIRMED","verified":true`)) || strings.Contains(string(r.Body), `"settlement":{"status":"CONFIRMED"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the settlement did not confirm on anvil: %s\n%s", r.Body, s.Logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(string(r.Body), `"paidAmount":"12.5"`) || !strings.Contains(string(r.Body), strings.ToLower(h.Hex())[2:]) {
		t.Fatalf("settlement: %s", r.Body)
	}
	t.Logf("settled on anvil: %s", r.Body)
}
