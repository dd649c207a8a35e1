package main_test

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testanvil"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// BenchmarkSweeps100 (make bench-settlement): how many sweep transactions
// the service sends for 100 confirmed checkouts, against anvil (a block a
// second) through the real binary on SQLite: 100 checkouts paid with no
// hash at once, each swept to the payout wallet by VOUCHER_SWEEP_KEY. It
// reports sweep transactions per 100 confirmed checkouts, the gas they
// used per checkout swept, and the time from the last payment sent to the
// last checkout swept.
func BenchmarkSweeps100(b *testing.B) {
	a := testanvil.Start(b, time.Second)
	c := a.Client
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	owner, payer := testchain.DevAccount(0), testchain.DevAccount(1)
	d, err := deposit.Deploy(ctx, c.Client(), testchain.KeyAccount(testchain.DevFactoryDeployerKey).Key, 100*time.Millisecond, nil)
	if err != nil {
		b.Fatal(err)
	}
	h, err := testchain.Send(ctx, c, owner, nil, nil, testchain.DeployTokenData("USD Coin", "USDC", 6), 0)
	if err != nil {
		b.Fatal(err)
	}
	rc, err := testchain.Wait(ctx, c, h)
	if err != nil || rc.Status != 1 {
		b.Fatalf("token: %v %v", rc, err)
	}
	token := rc.ContractAddress
	if h, err = testchain.Send(ctx, c, owner, &token, nil, testchain.MintData(payer.Address, big.NewInt(1_000_000_000_000)), 0); err != nil {
		b.Fatal(err)
	}
	if _, err := testchain.Wait(ctx, c, h); err != nil {
		b.Fatal(err)
	}
	financeFile := writeFile(b, fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "anvil", "type": "evm", "chainId": "1337", "rpcUrl": %q, "confirmations": 2, "pollInterval": "300ms", "depositFactory": %q}],
  "tokens": [{"network": "anvil", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}],
  "prices": {"USDC": "1"}
}`, a.URL, d.Factory.Hex(), token.Hex()))
	s := testserver.Start(b, testserver.Options{Dialect: "sqlite", Env: map[string]string{
		"VOUCHER_FINANCE_FILE": financeFile, "VOUCHER_SWEEP_KEY": "0x" + testchain.DevSweepKey,
	}})
	member := s.User(b)
	r := s.Do(b, "POST", "/api/v1/businesses/create-business", member.Token, map[string]any{"name": "Shop"})
	if r.Status != 200 {
		b.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(b)["id"].(string)
	payout := testchain.NewAccount().Address
	r = s.Do(b, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", member.Token, map[string]any{
		"name": "Shop", "accepts": []map[string]any{{"network": "anvil", "currency": "USDC"}},
		"wallets": []map[string]any{{"network": "anvil", "address": payout.Hex()}},
	})
	if r.Status != 200 {
		b.Fatalf("create-widget: %d %s", r.Status, r.Body)
	}
	widgetID, secret := r.Map(b)["id"].(string), r.Map(b)["clientSecret"].(string)

	const n = 100
	var txs, gas, swept int
	var drain time.Duration
	b.ResetTimer()
	for range b.N {
		ids := make([]string, n)
		nonce, err := c.PendingNonceAt(ctx, payer.Address)
		if err != nil {
			b.Fatal(err)
		}
		for i := range ids {
			r := s.DoWith(b, "POST", "/api/v1/widgets/"+widgetID+"/create-checkout", "", map[string]any{"network": "anvil", "currency": "USDC", "amount": "1"},
				http.Header{"X-Client-Secret": {secret}})
			if r.Status != 200 {
				b.Fatalf("create-checkout: %d %s", r.Status, r.Body)
			}
			var v struct {
				ID              string
				ExpectedPayment struct{ Wallet struct{ Address string } }
			}
			r.JSON(b, &v)
			ids[i] = v.ID
			if _, err := testchain.SendNonce(ctx, c, payer, nonce, &token, nil, testchain.TransferData(common.HexToAddress(v.ExpectedPayment.Wallet.Address), big.NewInt(1_000_000)), 0); err != nil {
				b.Fatal(err)
			}
			nonce++
		}
		sent := time.Now()
		hashes := map[string]bool{}
		for _, id := range ids {
			for {
				var v struct {
					Settlement *struct{ Status string }
					Deposit    *struct {
						Sweep struct{ Status, TransactionHash, Amount string }
					}
				}
				r := s.Do(b, "GET", "/api/v1/vouchers/"+id, member.Token, nil)
				r.JSON(b, &v)
				if v.Deposit != nil && v.Deposit.Sweep.Status == "DONE" {
					if v.Settlement == nil || v.Settlement.Status != "CONFIRMED" || v.Deposit.Sweep.Amount != "1" {
						b.Fatalf("%s: %s", id, r.Body)
					}
					hashes[v.Deposit.Sweep.TransactionHash] = true
					break
				}
				select {
				case <-ctx.Done():
					b.Fatalf("%s never swept: %s", id, r.Body)
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		drain += time.Since(sent)
		for h := range hashes {
			rc, err := c.TransactionReceipt(ctx, common.HexToHash(h))
			if err != nil || rc.Status != 1 {
				b.Fatalf("sweep %s: %v %v", h, rc, err)
			}
			gas += int(rc.GasUsed)
		}
		txs += len(hashes)
		swept += n
	}
	b.StopTimer()
	bal, err := c.CallContract(ctx, balanceOfCall(token, payout), nil)
	if err != nil || new(big.Int).SetBytes(bal).Cmp(big.NewInt(int64(swept)*1_000_000)) != 0 {
		b.Fatalf("the payout wallet holds %x USDC units (%v), want %d", bal, err, swept*1_000_000)
	}
	b.ReportMetric(float64(txs)*100/float64(swept), "sweep-txs/100-confirmed")
	b.ReportMetric(float64(gas)/float64(swept), "sweep-gas/checkout")
	b.ReportMetric(float64(drain.Milliseconds())/float64(b.N), "paid→all-swept-ms")
}

// balanceOfCall is ERC-20 balanceOf(holder) on token.
func balanceOfCall(token, holder common.Address) ethereum.CallMsg {
	data, err := testchain.TokenABI.Pack("balanceOf", holder)
	if err != nil {
		panic(err)
	}
	return ethereum.CallMsg{To: &token, Data: data}
}
