package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testanvil"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// TestDetectionOnAnvil: checkouts paid to their deposit addresses with no
// transaction hash handed back, against an independent node (anvil) and
// the real binary, on SQLite and PostgreSQL. The deposit factory is created
// as an operator would (deposit.Deploy, what `voucherd deploy-factory`
// runs) and named by the finance file; real ERC-20 transfers and native
// payments go to the addresses the checkouts show; a business receiver
// verifies every event with the Standard Webhooks library. Cases: a QR
// payment; two checkouts of the same amount paid in reverse order; a split
// payment; overpaid; underpaid then the expiry (UNDERPAID); a decoy token
// (never a payment: the checkout expires); the native currency; a late
// payment after the expiry (data.late); a hash submitted for a detected
// payment (counted once); a stranger's flush (the payout gets the funds,
// the settlement is unchanged); and a reorg that drops a detected payment.
func TestDetectionOnAnvil(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			detectionOnAnvil(t, dialect)
		})
	}
}

func detectionOnAnvil(t *testing.T, dialect string) {
	a := testanvil.Start(t, time.Second)
	c := a.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// anvil's dev accounts: 0 deploys the tokens, 1 and 2 pay, 3 is a
	// stranger, 4 makes the payment a reorg drops; the factory's own
	// deployer creates it at its first nonce (testchain.DevFactory).
	owner, payer, other, stranger, dropped := testchain.DevAccount(0), testchain.DevAccount(1), testchain.DevAccount(2), testchain.DevAccount(3), testchain.DevAccount(4)
	d, err := deposit.Deploy(ctx, c.Client(), testchain.KeyAccount(testchain.DevFactoryDeployerKey).Key, 100*time.Millisecond, nil)
	if err != nil || d.Factory != testchain.DevFactory() {
		t.Fatalf("deploying the factory: %+v %v", d, err)
	}
	ownerNonce, err := c.PendingNonceAt(ctx, owner.Address)
	if err != nil {
		t.Fatal(err)
	}
	fromOwner := func(to *common.Address, data []byte) common.Hash {
		t.Helper()
		h, err := testchain.SendNonce(ctx, c, owner, ownerNonce, to, nil, data, 0)
		if err != nil {
			t.Fatal(err)
		}
		ownerNonce++
		return h
	}
	waitOK := func(hs ...common.Hash) {
		t.Helper()
		for _, h := range hs {
			if rc, err := testchain.Wait(ctx, c, h); err != nil || rc.Status != 1 {
				t.Fatalf("transaction %s: %v %v", h.Hex(), rc, err)
			}
		}
	}
	deploys := []common.Hash{
		fromOwner(nil, testchain.DeployTokenData("USD Coin", "USDC", 6)),
		fromOwner(nil, testchain.DeployTokenData("USD Coin", "USDC", 6)),
	}
	waitOK(deploys...)
	var token, decoy common.Address
	for i, p := range []*common.Address{&token, &decoy} {
		rc, _ := c.TransactionReceipt(ctx, deploys[i])
		*p = rc.ContractAddress
	}
	var mints []common.Hash
	for _, acct := range []common.Address{payer.Address, other.Address, dropped.Address} {
		mints = append(mints, fromOwner(&token, testchain.MintData(acct, big.NewInt(1_000_000_000))))
	}
	mints = append(mints, fromOwner(&decoy, testchain.MintData(payer.Address, big.NewInt(1_000_000_000))))
	waitOK(mints...)

	financeFile := writeFile(t, fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "anvil", "type": "evm", "chainId": "1337", "rpcUrl": %q, "confirmations": 2, "pollInterval": "300ms", "depositFactory": %q}],
  "tokens": [
    {"network": "anvil", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "anvil", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}
  ],
  "prices": {"USDC": "1", "ETH": "3000"}
}`, a.URL, d.Factory.Hex(), token.Hex()))
	// Checkouts expire 25 s after creation: the cases paid at once are
	// mined well before; under-then-expiry, the decoy and the late
	// payment wait for it.
	const ttl = 25 * time.Second
	s := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{
		"VOUCHER_FINANCE_FILE": financeFile, "VOUCHER_VOUCHER_TTL": ttl.String(), "VOUCHER_SWEEP_INTERVAL": "500ms",
		"VOUCHER_SWEEP_KEY": "0x" + testchain.DevSweepKey,
	}})

	// The business, its widget (payout: a fresh wallet) and its receiver.
	payout := testchain.NewAccount().Address
	rcv := newSignedReceiver(t)
	member := s.User(t)
	r := s.Do(t, "POST", "/api/v1/businesses/create-business", member.Token, map[string]any{"name": "Shop"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(t)["id"].(string)
	r = s.Do(t, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", member.Token, map[string]any{
		"name":    "Shop",
		"accepts": []map[string]any{{"network": "anvil", "currency": "USDC"}, {"network": "anvil", "currency": "ETH"}},
		"wallets": []map[string]any{{"network": "anvil", "address": payout.Hex()}},
	})
	if r.Status != 200 {
		t.Fatalf("create-widget: %d %s", r.Status, r.Body)
	}
	widgetID, secret := r.Map(t)["id"].(string), r.Map(t)["clientSecret"].(string)
	r = s.Do(t, "POST", "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", member.Token, map[string]any{
		"url": rcv.url + "/hooks", "events": []string{"deposit.created", "deposit.pending", "deposit.confirmed", "deposit.underpaid", "deposit.overpaid", "deposit.failed", "deposit.expired"},
	})
	if r.Status != 200 {
		t.Fatalf("create-endpoint: %d %s", r.Status, r.Body)
	}
	rcv.setSecret(t, r.Map(t)["signingSecret"].(string))

	type co struct {
		id, token string
		addr      common.Address
		currency  string
		expires   time.Time
	}
	checkout := func(currency, amount string) co {
		t.Helper()
		r := s.DoWith(t, "POST", "/api/v1/widgets/"+widgetID+"/create-checkout", "", map[string]any{"network": "anvil", "currency": currency, "amount": amount},
			map[string][]string{"X-Client-Secret": {secret}})
		if r.Status != 200 {
			t.Fatalf("create-checkout: %d %s", r.Status, r.Body)
		}
		var v struct {
			ID, CheckoutURL string
			ExpiresAt       time.Time
			ExpectedPayment struct {
				Wallet struct{ Address string }
			}
		}
		r.JSON(t, &v)
		addr := common.HexToAddress(v.ExpectedPayment.Wallet.Address)
		// The address the page shows is the forwarder's for this payout.
		if want := deposit.ForVoucher(d.Factory, payout, v.ID); addr != want {
			t.Fatalf("checkout %s: pays to %s, want its deposit address %s", v.ID, addr.Hex(), want.Hex())
		}
		return co{id: v.ID, token: v.CheckoutURL[strings.LastIndex(v.CheckoutURL, "/")+1:], addr: addr, currency: currency, expires: v.ExpiresAt}
	}
	units := func(amount string, decimals int32) *big.Int {
		return decimal.RequireFromString(amount).Shift(decimals).BigInt()
	}
	pay := func(from testchain.Account, tk common.Address, to common.Address, amount string) common.Hash {
		t.Helper()
		h, err := testchain.Send(ctx, c, from, &tk, nil, testchain.TransferData(to, units(amount, 6)), 0)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	type settlementView struct {
		Status, PaidAmount string
		Transactions       []struct {
			TransactionHash, Status string
			Detected, Late          bool
		}
	}
	voucher := func(id string) (status string, st *settlementView) {
		t.Helper()
		r := s.Do(t, "GET", "/api/v1/vouchers/"+id, member.Token, nil)
		var v struct {
			Status     string
			Settlement *settlementView
		}
		if r.Status != 200 {
			t.Fatalf("voucher %s: %d %s", id, r.Status, r.Body)
		}
		r.JSON(t, &v)
		return v.Status, v.Settlement
	}
	// expect waits for the checkout's events (deposit.created and events,
	// as a multiset), then checks its status and settlement.
	expect := func(name string, k co, status, settled, paid string, events ...string) *settlementView {
		t.Helper()
		want := append([]string{"deposit.created"}, events...)
		slices.Sort(want)
		got := rcv.waitFor(t, k.id, len(want))
		if !slices.Equal(got, want) {
			_, st := voucher(k.id)
			t.Fatalf("%s: events %v, want %v; settlement %+v", name, got, want, st)
		}
		vs, st := voucher(k.id)
		if vs != status || (settled == "") != (st == nil) || st != nil && (st.Status != settled || st.PaidAmount != paid) {
			t.Fatalf("%s: status %s settlement %+v, want %s %s paid %q", name, vs, st, status, settled, paid)
		}
		return st
	}

	// The cases paid at once, side by side.
	qr := checkout("USDC", "7.25")
	qrHash := pay(payer, token, qr.addr, "7.25")
	revA, revB := checkout("USDC", "5"), checkout("USDC", "5")
	revBHash := pay(payer, token, revB.addr, "5")
	waitOK(revBHash)
	revAHash := pay(other, token, revA.addr, "5")
	split := checkout("USDC", "10")
	pay(payer, token, split.addr, "4")
	pay(other, token, split.addr, "6")
	over := checkout("USDC", "3")
	pay(payer, token, over.addr, "3.5")
	under := checkout("USDC", "8")
	pay(payer, token, under.addr, "2")
	decoyCo := checkout("USDC", "4")
	pay(payer, decoy, decoyCo.addr, "4")
	native := checkout("ETH", "0.25")
	if _, err := testchain.Send(ctx, c, other, &native.addr, units("0.25", 18), nil, 0); err != nil {
		t.Fatal(err)
	}
	submitted := checkout("USDC", "1.5")
	submittedHash := pay(payer, token, submitted.addr, "1.5")
	// A stranger flushes a checkout's deposit address right after its
	// payment, before the verdict (so before the service's sweep).
	flushed := checkout("USDC", "2")
	flushedPay := pay(other, token, flushed.addr, "2")
	strangerFlush, err := testchain.Send(ctx, c, stranger, &d.Factory, nil, deposit.FlushData(deposit.Flush{Payout: payout, Salt: deposit.Salt(flushed.id), Token: token}), 0)
	if err != nil {
		t.Fatal(err)
	}
	late := checkout("USDC", "6")

	st := expect("qr", qr, "RESOLVED", "CONFIRMED", "7.25", "deposit.pending", "deposit.confirmed")
	if len(st.Transactions) != 1 || !strings.EqualFold(st.Transactions[0].TransactionHash, qrHash.Hex()) || !st.Transactions[0].Detected {
		t.Fatalf("qr: transactions %+v", st.Transactions)
	}
	stA := expect("reverse a", revA, "RESOLVED", "CONFIRMED", "5", "deposit.pending", "deposit.confirmed")
	stB := expect("reverse b", revB, "RESOLVED", "CONFIRMED", "5", "deposit.pending", "deposit.confirmed")
	if !strings.EqualFold(stA.Transactions[0].TransactionHash, revAHash.Hex()) || !strings.EqualFold(stB.Transactions[0].TransactionHash, revBHash.Hex()) {
		t.Fatalf("reverse order: each checkout claims its own payment: a %+v b %+v", stA.Transactions, stB.Transactions)
	}
	if st = expect("split", split, "RESOLVED", "CONFIRMED", "10", "deposit.pending", "deposit.confirmed"); len(st.Transactions) != 2 {
		t.Fatalf("split: transactions %+v", st.Transactions)
	}
	expect("over", over, "RESOLVED", "OVERPAID", "3.5", "deposit.pending", "deposit.overpaid")
	expect("native", native, "RESOLVED", "CONFIRMED", "0.25", "deposit.pending", "deposit.confirmed")
	if rcv.paid(native.id, "deposit.confirmed") != "0.25" || rcv.paid(qr.id, "deposit.confirmed") != "7.25" {
		t.Fatalf("paidAmount in the events: %v", rcv.all())
	}

	// A hash submitted for a payment the watcher found: the same
	// transaction, counted once.
	rcv.waitFor(t, submitted.id, 2)
	if r := s.Do(t, "POST", "/api/v1/checkout/"+submitted.token+"/submit-payment", "", map[string]any{"transactionHash": submittedHash.Hex()}); r.Status != 200 {
		t.Fatalf("submit-payment of the detected hash: %d %s", r.Status, r.Body)
	}
	if st = expect("submitted", submitted, "RESOLVED", "CONFIRMED", "1.5", "deposit.pending", "deposit.confirmed"); len(st.Transactions) != 1 {
		t.Fatalf("submitted: counted twice: %+v", st.Transactions)
	}

	// The stranger's flush moved the payment to the payout wallet (the
	// stranger gets nothing), and the settlement is unchanged.
	waitOK(flushedPay, strangerFlush)
	balance := func(tk, holder common.Address) *big.Int {
		t.Helper()
		data, _ := testchain.TokenABI.Pack("balanceOf", holder)
		out, err := c.CallContract(ctx, ethereum.CallMsg{To: &tk, Data: data}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return new(big.Int).SetBytes(out)
	}
	if got := balance(token, flushed.addr); got.Sign() != 0 {
		t.Fatalf("the flushed deposit address still holds %v", got)
	}
	if got := balance(token, stranger.Address); got.Sign() != 0 {
		t.Fatalf("the stranger got %v", got)
	}
	checks := func() float64 {
		return value(scrape(t, s), `voucherd_settlement_checks_total{network="anvil",outcome="ok"}`)
	}
	waitChecks := func(n float64) {
		t.Helper()
		c0 := checks()
		for checks() < c0+n {
			select {
			case <-ctx.Done():
				t.Fatalf("the watcher's checks stopped at %v", checks())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if st = expect("flushed by a stranger", flushed, "RESOLVED", "CONFIRMED", "2", "deposit.pending", "deposit.confirmed"); len(st.Transactions) != 1 {
		t.Fatalf("the flush counted as a payment: %+v", st.Transactions)
	}

	// The expiry: underpaid gets its verdict, the decoy's checkout expires
	// unpaid, and a payment after it is late.
	expect("under then expiry", under, "RESOLVED", "UNDERPAID", "2", "deposit.pending", "deposit.underpaid")
	expect("decoy", decoyCo, "DISCARDED", "", "", "deposit.expired")
	expect("late, expired", late, "DISCARDED", "", "", "deposit.expired")
	// Late is what the chain says: the payment's block time is at or past
	// expiresAt. Block times are whole seconds, and the expiry is seen
	// within the same second, so the payment waits for the next second.
	time.Sleep(time.Until(late.expires.Add(1100 * time.Millisecond)))
	pay(payer, token, late.addr, "6")
	st = expect("late", late, "DISCARDED", "CONFIRMED", "6", "deposit.expired", "deposit.pending", "deposit.confirmed")
	if !st.Transactions[0].Late || !st.Transactions[0].Detected {
		t.Fatalf("late: transactions %+v", st.Transactions)
	}
	for _, e := range rcv.all()[late.id] {
		if wantLate := e.typ == "deposit.pending" || e.typ == "deposit.confirmed"; e.late != wantLate {
			t.Fatalf("late: %s with data.late %v", e.typ, e.late)
		}
	}

	// The sweeps: every checkout with a verdict is flushed to the payout
	// wallet by the service's gas-only key (the stranger's flush left
	// nothing to move: DONE, 0); the decoy's checkout has no verdict and
	// is not swept. The payout wallet holds exactly what the checkouts
	// were paid.
	swept := map[co]string{qr: "7.25", revA: "5", revB: "5", split: "10", over: "3.5", under: "2", native: "0.25", submitted: "1.5", late: "6", flushed: "0"}
	for k, amount := range swept {
		deadline := time.Now().Add(time.Minute)
		for {
			r := s.Do(t, "GET", "/api/v1/vouchers/"+k.id, member.Token, nil)
			var v struct {
				Deposit *struct {
					Address, PayoutAddress string
					Sweep                  struct{ Status, TransactionHash, Amount string }
				}
			}
			r.JSON(t, &v)
			if v.Deposit == nil || !strings.EqualFold(v.Deposit.PayoutAddress, payout.Hex()) || !strings.EqualFold(v.Deposit.Address, k.addr.Hex()) {
				t.Fatalf("%s: deposit %s", k.id, r.Body)
			}
			if sw := v.Deposit.Sweep; sw.Status == "DONE" {
				if sw.Amount != amount {
					t.Fatalf("%s: swept %s, want %s: %s", k.id, sw.Amount, amount, r.Body)
				}
				if rc, err := c.TransactionReceipt(ctx, common.HexToHash(sw.TransactionHash)); err != nil || rc.Status != 1 {
					t.Fatalf("%s: sweep transaction %s: %v %v", k.id, sw.TransactionHash, rc, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never swept: %s", k.id, r.Body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := balance(token, payout); got.Cmp(units("42.25", 6)) != 0 {
		t.Fatalf("the payout wallet holds %v USDC units, want 42250000", got)
	}
	if got, err := c.BalanceAt(ctx, payout, nil); err != nil || got.Cmp(units("0.25", 18)) != 0 {
		t.Fatalf("the payout wallet holds %v wei (%v), want 0.25 ETH", got, err)
	}
	if got := balance(decoy, decoyCo.addr); got.Cmp(units("4", 6)) != 0 || balance(decoy, payout).Sign() != 0 {
		t.Fatalf("the decoy's deposit address holds %v decoy units", got)
	}
	if _, st := voucher(decoyCo.id); st != nil {
		t.Fatalf("decoy: settlement %+v", st)
	}

	// A reorg, last (anvil's evm_revert rewinds its clock): with anvil
	// mining only when told, a payment is found in block N (pending), the
	// chain is reverted to before it, its nonce spent elsewhere, and three
	// other blocks mined. The detection is undone: the payment is back to
	// PENDING, and no verdict comes.
	a.Call(t, "evm_setIntervalMining", 0)
	reorgCo := checkout("USDC", "3")
	var snapshot string
	if err := json.Unmarshal(a.Call(t, "evm_snapshot"), &snapshot); err != nil {
		t.Fatal(err)
	}
	nonce, err := c.PendingNonceAt(ctx, dropped.Address)
	if err != nil {
		t.Fatal(err)
	}
	pay(dropped, token, reorgCo.addr, "3")
	a.Call(t, "anvil_mine", "0x1")
	expect("reorg, before", reorgCo, "RESOLVED", "PENDING", "3", "deposit.pending")
	var reverted bool
	if err := json.Unmarshal(a.Call(t, "evm_revert", snapshot), &reverted); err != nil || !reverted {
		t.Fatalf("evm_revert: %v %v", reverted, err)
	}
	price, err := c.SuggestGasPrice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spend, err := types.SignTx(types.NewTx(&types.LegacyTx{Nonce: nonce, GasPrice: price.Mul(price, big.NewInt(10)), Gas: 21_000, To: &dropped.Address, Value: new(big.Int)}),
		types.LatestSignerForChainID(big.NewInt(1337)), dropped.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendTransaction(ctx, spend); err != nil {
		t.Fatal(err)
	}
	a.Call(t, "anvil_mine", "0x3")
	waitOK(spend.Hash())
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, st := voucher(reorgCo.id)
		if st != nil && len(st.Transactions) == 1 && st.Transactions[0].Status == "PENDING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reorg: the dropped payment is still counted: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.Call(t, "anvil_mine", "0x2")
	waitChecks(2)
	st = expect("reorg, after", reorgCo, "RESOLVED", "PENDING", "", "deposit.pending")
	if st.Transactions[0].Status != "PENDING" {
		t.Fatalf("reorg: %+v", st.Transactions)
	}
}
