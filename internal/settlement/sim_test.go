package settlement_test

// The settlement rules against a real chain: go-ethereum's simulated
// backend served over JSON-RPC (HTTP, so the node can be taken down), read
// by the EVM adapter, with real ERC-20 contracts and signed transactions.

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// simWorld is a simulated chain with a real USDC-like token, a decoy with
// the same symbol and DAI, a payer holding them, and a service verifying
// the "devnet" network on it.
type simWorld struct {
	*env
	sim                *testchain.Sim
	down               atomic.Bool
	payer, other       testchain.Account
	usdc, decoy, daiTk common.Address
	rpcURL             string
	// factory is the deposit factory when the world has deposit
	// addresses (newDepositWorld).
	factory common.Address
	sweeper *simSweeper
}

func newSimWorld(t *testing.T, db *storage.DB) *simWorld { return newSimWorldWith(t, db, false) }

// newSimWorldWith is newSimWorld, with the deposit factory deployed and
// named by the network when deposits is set.
func newSimWorldWith(t *testing.T, db *storage.DB, deposits bool) *simWorld {
	t.Helper()
	w := &simWorld{payer: testchain.NewAccount(), other: testchain.NewAccount()}
	w.sim = testchain.NewSim(w.payer.Address, w.other.Address)
	t.Cleanup(func() { _ = w.sim.Close() })
	h := testchain.Handler(w.sim.RPC, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.down.Load() {
			http.Error(rw, "upstream down", http.StatusBadGateway)
			return
		}
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	w.rpcURL = srv.URL
	ctx := context.Background()
	c, err := evm.Dial(ctx, srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w.usdc = w.deploy(t, testchain.DeployTokenData("USD Coin", "USDC", 6))
	w.decoy = w.deploy(t, testchain.DeployTokenData("USD Coin", "USDC", 6))
	w.daiTk = w.deploy(t, testchain.DeployTokenData("Dai", "DAI", 18))
	for _, tk := range []common.Address{w.usdc, w.decoy, w.daiTk} {
		for _, a := range []common.Address{w.payer.Address, w.other.Address} {
			w.send(t, w.payer, &tk, nil, testchain.MintData(a, new(big.Int).Mul(big.NewInt(1_000_000), testchain.Ether)))
			w.sim.Commit()
		}
	}
	network := `{"network": "devnet", "type": "evm", "chainId": "1337"}`
	if deposits {
		w.factory = w.deploy(t, deposit.FactoryCode)
		network = fmt.Sprintf(`{"network": "devnet", "type": "evm", "chainId": "1337", "rpcUrl": %q, "depositFactory": %q}`, srv.URL, w.factory.Hex())
	}
	cfg, err := finance.Load([]byte(fmt.Sprintf(`{
  "updatedAt": %q,
  "networks": [`+network+`],
  "tokens": [
    {"network": "devnet", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "devnet", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false},
    {"network": "devnet", "currency": "DAI", "currencyAddress": %q, "decimals": 18, "native": false}
  ],
  "prices": {"ETH": "2000", "USDC": "1", "DAI": "0.5"}
}`, time.Now().UTC().Format(time.RFC3339), w.usdc.Hex(), w.daiTk.Hex())))
	if err != nil {
		t.Fatal(err)
	}
	fin, err := finance.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var opts []func(*settlement.Options)
	if deposits {
		w.sweeper = &simSweeper{w: w}
		opts = append(opts, func(o *settlement.Options) {
			o.Sweepers = map[string]settlement.Sweeper{"devnet": w.sweeper}
			o.SweepFailed = func(_ string, k int) { w.sweeper.failures.Add(int64(k)) }
		})
	}
	w.env = newEnvOn(t, db, fin, "devnet", c, opts...)
	return w
}

func (w *simWorld) send(t *testing.T, from testchain.Account, to *common.Address, value *big.Int, data []byte) common.Hash {
	t.Helper()
	h, err := testchain.Send(context.Background(), w.sim.Client, from, to, value, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.inPool(t, h)
	return h
}

// minedNow commits blocks until h is mined and nothing waits in the pool.
func (w *simWorld) minedNow(t *testing.T, h common.Hash) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		w.sim.Commit()
		_, err := w.sim.Client.TransactionReceipt(ctx, h)
		n, perr := w.sim.Client.PendingTransactionCount(ctx)
		if err == nil && perr == nil && n == 0 {
			return
		}
		if i > 100 {
			t.Fatalf("transaction %s not mined: %v (%d pending, %v)", h.Hex(), err, n, perr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inPool waits until the node's pool holds h as executable, so the next
// Commit mines it. The pool takes transactions in asynchronously and first
// queues them: a transaction the node already knows by hash may not be
// promoted yet, and a Commit then mines a block without it (a payer left
// unfunded, a pending transaction that keeps the chain's time from moving).
// It is executable once the pool's next nonce for its sender is past it.
func (w *simWorld) inPool(t *testing.T, h common.Hash) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		tx, _, err := w.sim.Client.TransactionByHash(ctx, h)
		if err == nil {
			from, serr := types.Sender(types.LatestSignerForChainID(tx.ChainId()), tx)
			if serr != nil {
				t.Fatal(serr)
			}
			next, nerr := w.sim.Client.PendingNonceAt(ctx, from)
			if nerr == nil && next > tx.Nonce() {
				return
			}
			err = nerr
		}
		if i > 400 {
			t.Fatalf("transaction %s never became executable in the pool: %v", h.Hex(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *simWorld) deploy(t *testing.T, code []byte) common.Address {
	t.Helper()
	h := w.send(t, w.payer, nil, nil, code)
	w.sim.Commit()
	r, err := w.sim.Client.TransactionReceipt(context.Background(), h)
	if err != nil || r.Status != 1 {
		t.Fatalf("deploy: %v %v", r, err)
	}
	return r.ContractAddress
}

// transfer sends amount (in the token's units, decimal) of tk to payee.
func (w *simWorld) transfer(t *testing.T, from testchain.Account, tk common.Address, to, amount string, decimals int) string {
	return w.send(t, from, &tk, nil, testchain.TransferData(common.HexToAddress(to), units(amount, decimals))).Hex()
}

// later moves the service's clock and the chain's together. The simulated
// chain moves only an empty block in time, and the service under test may
// have put a transaction of its own in the pool since the last block (a
// sweep, sent in the background): that is mined first, and the move tried
// again.
func (w *simWorld) later(t *testing.T, d time.Duration) {
	t.Helper()
	w.clock.Add(d)
	for i := 0; ; i++ {
		err := w.sim.AdjustTime(d)
		if err == nil {
			return
		}
		if i == 50 {
			t.Fatal(err)
		}
		w.sim.Commit()
	}
}

// blocks mines n blocks, polling after each.
func (w *simWorld) blocks(n int) {
	for i := 0; i < n; i++ {
		w.sim.Commit()
		w.poll()
	}
}

func (w *simWorld) usdcDeal(amount string) deal {
	return w.redeemed(tokenBody("devnet", "USDC", w.usdc.Hex(), amount))
}

func TestOnSimulatedChain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSimWorld(t, db)
		run := func(name string, fn func(t *testing.T)) {
			t.Run(name, func(t *testing.T) { w.env.t = t; fn(t) })
		}

		run("exact_confirms_after_N_blocks_not_before", func(t *testing.T) {
			d := w.usdcDeal("12.5")
			h := w.transfer(t, w.payer, w.usdc, payee, "12.5", 6)
			w.mustResolve(d, h)
			w.poll() // in the pool, not mined
			w.want(d, payment.SettlementPending, "")
			w.blocks(1)
			if st := w.want(d, payment.SettlementPending, "12.5", settlement.EventPending); st.Confirmations != 1 {
				t.Fatalf("confirmations %d", st.Confirmations)
			}
			w.blocks(required - 2)
			w.want(d, payment.SettlementPending, "12.5", settlement.EventPending)
			w.blocks(1)
			w.want(d, payment.SettlementConfirmed, "12.5", settlement.EventPending, settlement.EventConfirmed)
		})
		run("decoy_token_same_symbol", func(t *testing.T) {
			d := w.usdcDeal("5")
			h := w.transfer(t, w.payer, w.decoy, payee, "5", 6)
			w.mustResolve(d, h)
			w.blocks(required)
			st := w.want(d, payment.SettlementFailed, "", settlement.EventFailed)
			if st.Transactions[0].Reason != settlement.ReasonNoTransfer {
				t.Fatalf("%+v", st.Transactions[0])
			}
		})
		run("underpaid", func(t *testing.T) {
			d := w.usdcDeal("5")
			w.mustResolve(d, w.transfer(t, w.payer, w.usdc, payee, "4.999999", 6))
			w.blocks(required)
			w.want(d, payment.SettlementUnderpaid, "4.999999", settlement.EventPending, settlement.EventUnderpaid)
		})
		run("overpaid", func(t *testing.T) {
			d := w.usdcDeal("5")
			w.mustResolve(d, w.transfer(t, w.payer, w.usdc, payee, "6", 6))
			w.blocks(required)
			w.want(d, payment.SettlementOverpaid, "6", settlement.EventPending, settlement.EventOverpaid)
		})
		run("split", func(t *testing.T) {
			d := w.usdcDeal("5")
			a := w.transfer(t, w.payer, w.usdc, payee, "2", 6)
			w.sim.Commit()
			b := w.transfer(t, w.payer, w.usdc, payee, "3", 6)
			w.mustResolve(d, a, b)
			w.blocks(required)
			w.want(d, payment.SettlementConfirmed, "5", settlement.EventPending, settlement.EventConfirmed)
		})
		run("reverted", func(t *testing.T) {
			d := w.usdcDeal("5")
			// more than the sender holds, with a fixed gas: mined, status 0
			poor := testchain.NewAccount()
			w.send(t, w.payer, &poor.Address, new(big.Int).Div(testchain.Ether, big.NewInt(10)), nil)
			w.sim.Commit()
			h, err := testchain.Send(context.Background(), w.sim.Client, poor, &w.usdc, nil, testchain.TransferData(common.HexToAddress(payee), units("5", 6)), 100_000)
			if err != nil {
				t.Fatal(err)
			}
			w.inPool(t, h)
			w.mustResolve(d, h.Hex())
			w.blocks(required)
			st := w.want(d, payment.SettlementFailed, "", settlement.EventFailed)
			if st.Transactions[0].Reason != settlement.ReasonReverted {
				t.Fatalf("%+v", st.Transactions[0])
			}
		})
		run("native", func(t *testing.T) {
			d := w.redeemed(tokenBody("devnet", "ETH", nativeEVM, "0.25"))
			to := common.HexToAddress(payee)
			h := w.send(t, w.payer, &to, units("0.25", 18), nil).Hex()
			w.mustResolve(d, h)
			w.blocks(required)
			w.want(d, payment.SettlementConfirmed, "0.25", settlement.EventPending, settlement.EventConfirmed)
		})
		run("sender_after_negotiation", func(t *testing.T) {
			d := w.usdcDeal("10")
			v, err := w.vouchers.Negotiate(as(d.payer), d.v.ID, voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{
				Network: "devnet", Currency: "DAI", CurrencyAddress: w.daiTk.Hex(), Amount: "1",
				Wallet: &voucher.WalletInput{Address: w.payer.Address.Hex()},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if v.SuppliedPayment.Amount != "20" {
				t.Fatalf("supplied %+v", v.SuppliedPayment)
			}
			d.v = v
			wrong := w.transfer(t, w.other, w.daiTk, payee, "20", 18)
			w.mustResolve(d, wrong)
			w.blocks(required)
			st := w.want(d, payment.SettlementFailed, "", settlement.EventFailed)
			if st.Transactions[0].Reason != settlement.ReasonWrongSender {
				t.Fatalf("%+v", st.Transactions[0])
			}
			// The supplied wallet paying the supplied token settles.
			d2 := w.usdcDeal("10")
			if d2.v, err = w.vouchers.Negotiate(as(d2.payer), d2.v.ID, voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{
				Network: "devnet", Currency: "DAI", CurrencyAddress: w.daiTk.Hex(), Amount: "1",
				Wallet: &voucher.WalletInput{Address: w.payer.Address.Hex()},
			}}); err != nil {
				t.Fatal(err)
			}
			w.mustResolve(d2, w.transfer(t, w.payer, w.daiTk, payee, "20", 18))
			w.blocks(required)
			w.want(d2, payment.SettlementConfirmed, "20", settlement.EventPending, settlement.EventConfirmed)
		})
		run("custom_match_and_mismatch", func(t *testing.T) {
			data := testchain.TransferData(common.HexToAddress(payee), units("1", 6))
			body := voucher.RedeemInput{
				Networks: []voucher.NetworkInput{{Network: "devnet", Type: "evm", ChainID: "1337"}},
				Payments: []voucher.CustomPaymentInput{{Type: "send_transaction", Input: &voucher.TransactionInputInput{
					From: "{payer}", To: w.usdc.Hex(), Value: "0", Data: "0x" + strings.ToUpper(fmt.Sprintf("%x", data)),
				}}},
			}
			d := w.redeemed(body)
			w.mustResolve(d, w.send(t, w.payer, &w.usdc, nil, data).Hex())
			w.blocks(required)
			w.want(d, payment.SettlementConfirmed, "", settlement.EventPending, settlement.EventConfirmed)

			other := w.redeemed(body)
			w.mustResolve(other, w.send(t, w.payer, &w.usdc, nil, testchain.TransferData(common.HexToAddress(payee), units("2", 6))).Hex())
			w.blocks(required)
			st := w.want(other, payment.SettlementFailed, "", settlement.EventFailed)
			if st.Transactions[0].Reason != settlement.ReasonCustomMismatch {
				t.Fatalf("%+v", st.Transactions[0])
			}
		})
		run("claimed_twice", func(t *testing.T) {
			d := w.usdcDeal("1")
			h := w.transfer(t, w.payer, w.usdc, payee, "1", 6)
			w.mustResolve(d, h)
			again := w.usdcDeal("1")
			if _, err := w.resolve(again, h); err == nil || !strings.Contains(err.Error(), "invalid") && !strings.Contains(fmt.Sprint(err), "validation") {
				t.Fatalf("a claimed transaction resolved another voucher: %v", err)
			}
			w.blocks(required)
			w.want(d, payment.SettlementConfirmed, "1", settlement.EventPending, settlement.EventConfirmed)
		})
		run("reorg_before_confirmation_never_confirms", func(t *testing.T) {
			d := w.usdcDeal("3")
			parent, err := w.sim.Client.HeaderByNumber(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			h := w.transfer(t, w.payer, w.usdc, payee, "3", 6)
			w.mustResolve(d, h)
			w.blocks(1)
			w.want(d, payment.SettlementPending, "3", settlement.EventPending)
			// A longer fork from the parent where the payer spent the same
			// nonce elsewhere: the payment can never be mined again.
			tx, _, err := w.sim.Client.TransactionByHash(context.Background(), common.HexToHash(h))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.sim.Fork(parent.Hash()); err != nil {
				t.Fatal(err)
			}
			// Fork moves the head, and the node's pool resets to it on a
			// background goroutine: a transaction sent now may still be
			// checked against the old head, where the payment's nonce is
			// spent ("nonce too low"). Rollback waits for that reset (the
			// pool's Sync) and drops the payment the reset put back in the
			// pool, so the double spend below meets the forked state.
			w.sim.Rollback()
			if n, err := w.sim.Client.NonceAt(context.Background(), w.payer.Address, nil); err != nil || n != tx.Nonce() {
				t.Fatalf("the forked head's nonce for the payer is %d (%v), want the payment's %d", n, err, tx.Nonce())
			}
			if n, err := w.sim.Client.PendingNonceAt(context.Background(), w.payer.Address); err != nil || n != tx.Nonce() {
				t.Fatalf("the pool's nonce for the payer after the fork is %d (%v), want the payment's %d", n, err, tx.Nonce())
			}
			id, _ := w.sim.Client.ChainID(context.Background())
			stranger := common.HexToAddress(stranger)
			replace := types.NewTx(&types.LegacyTx{Nonce: tx.Nonce(), GasPrice: new(big.Int).Mul(tx.GasPrice(), big.NewInt(3)),
				Gas: 21000, To: &stranger, Value: big.NewInt(1)})
			signed, err := types.SignTx(replace, types.LatestSignerForChainID(id), w.payer.Key)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.sim.Client.SendTransaction(context.Background(), signed); err != nil {
				t.Fatal(err)
			}
			w.inPool(t, signed.Hash())
			w.blocks(required + 3)
			st := w.want(d, payment.SettlementPending, "", settlement.EventPending)
			if st.Transactions[0].Status != payment.TxPending {
				t.Fatalf("after the reorg %+v", st.Transactions[0])
			}
			w.later(t, settlement.DefaultWindow)
			w.blocks(1)
			w.want(d, payment.SettlementFailed, "", settlement.EventPending, settlement.EventFailed)
		})
		run("rpc_down_and_back", func(t *testing.T) {
			d := w.usdcDeal("2")
			w.mustResolve(d, w.transfer(t, w.payer, w.usdc, payee, "2", 6))
			w.down.Store(true)
			for i := 0; i < required+1; i++ {
				w.sim.Commit()
				if err := w.settle.Poll(context.Background(), "devnet"); err == nil {
					t.Fatal("a poll with the node down succeeded")
				}
			}
			w.want(d, payment.SettlementPending, "")
			w.down.Store(false)
			w.poll()
			w.poll()
			w.want(d, payment.SettlementConfirmed, "2", settlement.EventPending, settlement.EventConfirmed)
		})
		run("fabricated_hash_fails_after_the_window", func(t *testing.T) {
			d := w.usdcDeal("2")
			w.mustResolve(d, "0x"+strings.Repeat("5a", 32))
			w.blocks(required)
			w.want(d, payment.SettlementPending, "")
			w.later(t, settlement.DefaultWindow)
			w.blocks(1)
			w.want(d, payment.SettlementFailed, "", settlement.EventFailed)
		})
		run("mined_before_the_voucher_was_reserved", func(t *testing.T) {
			// Paid first, reserved ten minutes later (the chain's time
			// moves on with the service's clock).
			h := w.transfer(t, w.payer, w.usdc, payee, "1", 6)
			w.minedNow(t, common.HexToHash(h))
			w.later(t, 10*time.Minute)
			d := w.usdcDeal("1")
			w.mustResolve(d, h)
			w.blocks(required)
			st := w.want(d, payment.SettlementFailed, "", settlement.EventFailed)
			if st.Transactions[0].Reason != settlement.ReasonBeforeReserved {
				t.Fatalf("%+v", st.Transactions[0])
			}
		})
	})
}

// Two replicas on one PostgreSQL watch the simulated chain: each event once.
func TestTwoReplicasOnSimulatedChain(t *testing.T) {
	db, url := testdb.OpenURL(t, storage.Postgres)
	w := newSimWorld(t, db)
	db2, err := storage.Open(context.Background(), url, storage.Options{MaxOpenConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	c2, err := evm.Dial(context.Background(), w.rpcURL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	other, err := settlement.NewService(db2, w.fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "devnet", Chain: c2, Confirmations: required}},
		Events:   webhook.NewOutbox(db2, webhook.OutboxOptions{}), Now: w.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ds []deal
	for i := 0; i < 6; i++ {
		d := w.usdcDeal("1")
		w.mustResolve(d, w.transfer(t, w.payer, w.usdc, payee, "1", 6))
		ds = append(ds, d)
	}
	for round := 0; round < required+2; round++ {
		w.sim.Commit()
		var wg sync.WaitGroup
		for _, s := range []*settlement.Service{w.settle, other, w.settle, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Poll(context.Background(), "devnet"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	for _, d := range ds {
		w.want(d, payment.SettlementConfirmed, "1", settlement.EventPending, settlement.EventConfirmed)
	}
}
