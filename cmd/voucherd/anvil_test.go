package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testanvil"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// End to end against an independent node: anvil (Foundry, from the npm
// package @foundry-rs/anvil, pinned by test/anvil/package-lock.json), real
// ERC-20 contracts, real signed transactions, and the real voucherd binary
// verifying each business voucher's settlement on that node. A business's
// receiver checks every deposit event's signature with the Standard
// Webhooks library. One node, one service, the cases side by side: exact,
// underpaid, overpaid, split, a decoy token with the same symbol, a
// reverted transfer, a hash another voucher already claimed, a fabricated
// hash no transaction has (FAILED once a short settlement window passed),
// the native currency, a negotiated (FX) payment from the payer's wallet
// priced by a Chainlink-compatible feed on anvil and one from another
// sender, the feed fresh (GET /finance/rates shows its answer, source and
// updatedAt) and stale (no ETH price: rates leave it out, negotiation is
// rate_unavailable), confirmations counted against anvil's head and the
// receipt's block, and a payment whose block a reorg drops (anvil's
// evm_snapshot / evm_revert) and that is never mined again.
func TestSettlementOnAnvil(t *testing.T) {
	node := testanvil.Start(t, time.Second)
	rpcURL, c := node.URL, node.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// anvil's dev accounts: 0 deploys, 1 pays, 2 is the payee, 3 has ether
	// but no tokens (its transfer reverts), 4 makes the payment a reorg
	// drops.
	owner, payer, payee, poor, dropped := testchain.DevAccount(0), testchain.DevAccount(1), testchain.DevAccount(2), testchain.DevAccount(3), testchain.DevAccount(4)
	anvilCall := func(method string, args ...any) json.RawMessage {
		t.Helper()
		var out json.RawMessage
		if err := c.Client().CallContext(ctx, &out, method, args...); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return out
	}
	send := func(from testchain.Account, to *common.Address, data []byte, gas uint64) common.Hash {
		t.Helper()
		h, err := testchain.Send(ctx, c, from, to, nil, data, gas)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	deployed := func(h common.Hash) common.Address {
		t.Helper()
		rc, err := testchain.Wait(ctx, c, h)
		if err != nil || rc.Status != 1 {
			t.Fatalf("deploy: %v %v", rc, err)
		}
		return rc.ContractAddress
	}
	// The token, a decoy with the same name and symbol, and a
	// Chainlink-compatible ETH/USD feed (8 decimals) are created in one
	// block; the mints and the feed's first answer (3000, a minute old)
	// in the next. Several of the owner's transactions are in flight at
	// once, so their nonces are counted here, not asked.
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
	deploys := []common.Hash{
		fromOwner(nil, testchain.DeployTokenData("USD Coin", "USDC", 6)),
		fromOwner(nil, testchain.DeployTokenData("USD Coin", "USDC", 6)),
		fromOwner(nil, testchain.DeployAggregatorData(8, "ETH / USD")),
	}
	token, decoy, feed := deployed(deploys[0]), deployed(deploys[1]), deployed(deploys[2])
	const feedAnswer = 3000_00000000 // 3000 USD with the feed's 8 decimals
	feedFresh := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	for _, h := range []common.Hash{
		fromOwner(&token, testchain.MintData(payer.Address, big.NewInt(1_000_000_000))),
		fromOwner(&decoy, testchain.MintData(payer.Address, big.NewInt(1_000_000_000))),
		fromOwner(&token, testchain.MintData(dropped.Address, big.NewInt(1_000_000_000))),
		fromOwner(&feed, testchain.SetAnswerData(big.NewInt(feedAnswer), feedFresh)),
	} {
		if rc, err := testchain.Wait(ctx, c, h); err != nil || rc.Status != 1 {
			t.Fatalf("mint / feed answer: %v %v", rc, err)
		}
	}

	financeFile := writeFile(t, fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "anvil", "type": "evm", "chainId": "1337", "rpcUrl": %q, "confirmations": 2, "pollInterval": "300ms"}],
  "tokens": [
    {"network": "anvil", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "anvil", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}
  ],
  "prices": {"USDC": "1"},
  "priceFeeds": [{"currency": "ETH", "network": "anvil", "address": %q, "maxAge": "1h"}]
}`, rpcURL, token.Hex(), feed.Hex()))
	// The settlement window is measured on the service's clock from each
	// resolve (not on the chain's): short here, so the fabricated hash
	// fails within the test, and still several times what any other case
	// takes from its resolve to its last check.
	const window = 6 * time.Second
	s := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{
		"VOUCHER_FINANCE_FILE": financeFile, "VOUCHER_SETTLEMENT_WINDOW": window.String(),
	}})

	// The feed, fresh, prices ETH: GET /finance/rates shows its answer as
	// a decimal, its source and its updatedAt; USDC keeps its file price.
	type rateSource struct{ Source, UpdatedAt string }
	rates := func() (out struct {
		Rates   map[string]string
		Sources map[string]rateSource
	}) {
		t.Helper()
		r := s.Do(t, "GET", "/api/v1/finance/rates", "", nil)
		if r.Status != 200 {
			t.Fatalf("rates: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &out)
		return out
	}
	if got := rates(); got.Rates["ETH"] != "3000" || got.Sources["ETH"] != (rateSource{"feed", feedFresh.Format("2006-01-02T15:04:05.000Z")}) ||
		got.Rates["USDC"] != "1" || got.Sources["USDC"].Source != "file" {
		t.Fatalf("rates with a fresh feed: %+v", got)
	}

	// The business, its receiver and the payer's session.
	rcv := newSignedReceiver(t)
	member := s.User(t)
	r := s.Do(t, "POST", "/api/v1/businesses/create-business", member.Token, map[string]any{"name": "Shop"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(t)["id"].(string)
	r = s.Do(t, "POST", "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", member.Token, map[string]any{
		"url": rcv.url + "/hooks", "events": []string{"deposit.created", "deposit.pending", "deposit.confirmed", "deposit.underpaid", "deposit.overpaid", "deposit.failed"},
	})
	if r.Status != 200 {
		t.Fatalf("create-endpoint: %d %s", r.Status, r.Body)
	}
	rcv.setSecret(t, r.Map(t)["signingSecret"].(string))
	wallet := s.Device(t)
	_, code := s.Session(t, wallet)

	const ethAddress = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"
	depositIn := func(currency, currencyAddress, amount string) (id, paymentID string) {
		t.Helper()
		id = s.Reserve(t, member.Token, map[string]any{"code": code, "businessId": biz})
		r := s.Do(t, "POST", "/api/v1/vouchers/"+id+"/redeem-voucher", member.Token, map[string]any{"expectedPayment": map[string]any{
			"network": "anvil", "currency": currency, "currencyAddress": currencyAddress, "amount": amount,
			"wallet": map[string]any{"address": payee.Address.Hex()},
		}})
		if r.Status != 200 {
			t.Fatalf("redeem-voucher: %d %s", r.Status, r.Body)
		}
		var v struct {
			ExpectedPayment struct{ ID string } `json:"expectedPayment"`
		}
		r.JSON(t, &v)
		return id, v.ExpectedPayment.ID
	}
	deposit := func(amount string) (id, paymentID string) {
		t.Helper()
		return depositIn("USDC", token.Hex(), amount)
	}
	resolve := func(id, paymentID string, hashes ...common.Hash) *testserver.Response {
		t.Helper()
		var receipts []map[string]any
		for _, h := range hashes {
			receipts = append(receipts, map[string]any{"paymentId": paymentID, "transactionHash": h.Hex()})
		}
		return s.Do(t, "POST", "/api/v1/vouchers/"+id+"/resolve-voucher", wallet.Token, map[string]any{"receipts": receipts})
	}
	pay := func(tk common.Address, micro int64) common.Hash {
		return send(payer, &tk, testchain.TransferData(payee.Address, big.NewInt(micro)), 0)
	}
	payETH := func(from testchain.Account, wei *big.Int) common.Hash {
		t.Helper()
		h, err := testchain.Send(ctx, c, from, &payee.Address, wei, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	settlementOf := func(id string) (st struct {
		Status, PaidAmount    string
		Verified              bool
		Confirmations         int
		RequiredConfirmations int
		Transactions          []struct {
			Status, Reason string
			BlockNumber    *int64
			Confirmations  int
		}
	}) {
		t.Helper()
		r := s.Do(t, "GET", "/api/v1/vouchers/"+id, member.Token, nil)
		var v struct {
			Status     string
			Settlement *json.RawMessage
		}
		r.JSON(t, &v)
		if r.Status != 200 || v.Status != "RESOLVED" || v.Settlement == nil {
			t.Fatalf("voucher %s: %d %s", id, r.Status, r.Body)
		}
		if err := json.Unmarshal(*v.Settlement, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// waitTx waits until the voucher's one transaction shows status.
	waitTx := func(id, status string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := settlementOf(id)
			if len(st.Transactions) == 1 && st.Transactions[0].Status == status {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("voucher %s: transaction never %s: %+v", id, status, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	type want struct {
		status, paid, txReason string
		events                 []string
	}
	cases := map[string]want{}
	ids := map[string]string{}
	settle := func(name, id, pid string, w want, hashes ...common.Hash) {
		t.Helper()
		if r := resolve(id, pid, hashes...); r.Status != 200 {
			t.Fatalf("%s: resolve-voucher: %d %s", name, r.Status, r.Body)
		}
		cases[id], ids[name] = w, id
	}
	add := func(name, amount string, w want, hashes ...common.Hash) {
		t.Helper()
		id, pid := deposit(amount)
		settle(name, id, pid, w, hashes...)
	}
	// A fabricated hash, first (its window runs beside the other cases):
	// well formed, but no transaction has it. The watcher looks it up at
	// each poll and finds nothing; it is checked at the end.
	fabricated, fabricatedPID := deposit("5")
	fabricatedAt := time.Now() // the service's resolve, and its deadline, come after this
	if r := resolve(fabricated, fabricatedPID, crypto.Keccak256Hash([]byte("no transaction has this hash: "+fabricated))); r.Status != 200 {
		t.Fatalf("fabricated: resolve-voucher: %d %s", r.Status, r.Body)
	}
	exact := pay(token, 12_500_000)
	add("exact", "12.5", want{"CONFIRMED", "12.5", "", []string{"deposit.confirmed", "deposit.created", "deposit.pending"}}, exact)
	add("underpaid", "5", want{"UNDERPAID", "4", "", []string{"deposit.created", "deposit.pending", "deposit.underpaid"}}, pay(token, 4_000_000))
	add("overpaid", "5", want{"OVERPAID", "6", "", []string{"deposit.created", "deposit.overpaid", "deposit.pending"}}, pay(token, 6_000_000))
	add("split", "5", want{"CONFIRMED", "5", "", []string{"deposit.confirmed", "deposit.created", "deposit.pending"}}, pay(token, 2_000_000), pay(token, 3_000_000))
	add("decoy", "5", want{"FAILED", "", "moves none of the due currency to the payee's wallet", []string{"deposit.created", "deposit.failed"}}, pay(decoy, 5_000_000))
	// More than the sender holds, with a fixed gas (estimation would
	// refuse it): mined with status 0.
	add("reverted", "5", want{"FAILED", "", "the transaction reverted", []string{"deposit.created", "deposit.failed"}},
		send(poor, &token, testchain.TransferData(payee.Address, big.NewInt(5_000_000)), 100_000))

	// The native currency, and a negotiated payment: 30 USDC owed, the
	// payer's wallet offers ETH (3000 USD, the feed's answer) from its own
	// address, so 0.01 ETH is due from that address; the same paid from
	// another account does not pay.
	wei := func(eth string) *big.Int {
		w, ok := new(big.Int).SetString(strings.TrimSuffix(eth, "e16")+"0000000000000000", 10)
		if !ok {
			t.Fatalf("wei %s", eth)
		}
		return w
	}
	negotiateETH := func(id string) *testserver.Response {
		t.Helper()
		return s.Do(t, "POST", "/api/v1/vouchers/"+id+"/negotiate-voucher", wallet.Token, map[string]any{"suppliedPayment": map[string]any{
			"network": "anvil", "currency": "ETH", "currencyAddress": ethAddress, "amount": "1",
			"wallet": map[string]any{"address": payer.Address.Hex()},
		}})
	}
	negotiate := func(id string) string {
		t.Helper()
		r := negotiateETH(id)
		var v struct {
			SuppliedPayment struct{ Amount string } `json:"suppliedPayment"`
		}
		r.JSON(t, &v)
		if r.Status != 200 {
			t.Fatalf("negotiate-voucher: %d %s", r.Status, r.Body)
		}
		return v.SuppliedPayment.Amount
	}
	id, pid := depositIn("ETH", ethAddress, "0.5")
	settle("native", id, pid, want{"CONFIRMED", "0.5", "", []string{"deposit.confirmed", "deposit.created", "deposit.pending"}}, payETH(payer, wei("50e16")))
	id, pid = deposit("30")
	if due := negotiate(id); due != "0.01" {
		t.Fatalf("30 USDC negotiated into ETH at 3000: %s ETH", due)
	}
	settle("negotiated", id, pid, want{"CONFIRMED", "0.01", "", []string{"deposit.confirmed", "deposit.created", "deposit.pending"}}, payETH(payer, wei("1e16")))
	id, pid = deposit("30")
	negotiate(id)
	settle("another sender", id, pid, want{"FAILED", "", "not sent from suppliedPayment.wallet.address", []string{"deposit.created", "deposit.failed"}}, payETH(poor, wei("1e16")))
	// The negotiations done, the feed's answer is dated past its maxAge
	// (1h). The service measures an answer's age on its own clock against
	// the answer's updatedAt (the aggregator's, not a block's time), so
	// moving anvil's clock would not age it: the answer's date does.
	stale := fromOwner(&feed, testchain.SetAnswerData(big.NewInt(feedAnswer), time.Now().Add(-time.Hour-time.Minute)))

	// A hash another voucher claimed is refused at once, nothing stored.
	reused, reusedPID := deposit("12.5")
	r = resolve(reused, reusedPID, exact)
	if r.Status != 400 || r.Code() != "validation_failed" || !strings.Contains(string(r.Body), "transactionHash") {
		t.Fatalf("a claimed hash resolved another voucher: %d %s", r.Status, r.Body)
	}
	if r = s.Do(t, "GET", "/api/v1/vouchers/"+reused, member.Token, nil); r.Status != 200 || r.Map(t)["status"] != "REDEEMED" {
		t.Fatalf("the refused resolve changed the voucher: %d %s", r.Status, r.Body)
	}

	// The service follows anvil until every settlement is decided: the
	// verdict's event reaches the business (signed, each event once), and
	// the voucher, written in the same transaction, shows the settlement.
	names := map[string]string{}
	for name, id := range ids {
		names[id] = name
	}
	for id, w := range cases {
		if got := rcv.waitFor(t, id, len(w.events)); !slices.Equal(got, w.events) {
			t.Fatalf("%s: events %v, want %v; voucher %s", names[id], got, w.events, s.Do(t, "GET", "/api/v1/vouchers/"+id, member.Token, nil).Body)
		}
		r = s.Do(t, "GET", "/api/v1/vouchers/"+id, member.Token, nil)
		var v struct {
			Status     string
			Settlement struct {
				Status, PaidAmount    string
				Verified              bool
				Confirmations         int
				RequiredConfirmations int
				Transactions          []struct{ Status, Reason string }
			}
		}
		r.JSON(t, &v)
		st := v.Settlement
		if r.Status != 200 || v.Status != "RESOLVED" || !st.Verified || st.Status != w.status || st.PaidAmount != w.paid || st.RequiredConfirmations != 2 ||
			w.txReason != "" && (len(st.Transactions) != 1 || st.Transactions[0].Status != "INVALID" || st.Transactions[0].Reason != w.txReason) ||
			w.txReason == "" && st.Confirmations < 2 {
			t.Fatalf("%s: settlement %s, want %+v", id, r.Body, w)
		}
	}
	// The refused resolve caused no event but its deposit.created.
	if got := rcv.waitFor(t, reused, 1); !slices.Equal(got, []string{"deposit.created"}) {
		t.Fatalf("reused: events %v", got)
	}
	if rcv.paid(ids["exact"], "deposit.confirmed") != "12.5" || rcv.paid(ids["underpaid"], "deposit.underpaid") != "4" ||
		rcv.paid(ids["native"], "deposit.confirmed") != "0.5" || rcv.paid(ids["negotiated"], "deposit.confirmed") != "0.01" {
		t.Fatalf("paidAmount in the events: %v", rcv.all())
	}

	// The feed stale: ETH has no price (a currency with a feed has no file
	// price to fall back on). The rates leave it out, and a negotiation
	// into ETH is 400 rate_unavailable with the voucher unchanged.
	if rc, err := testchain.Wait(ctx, c, stale); err != nil || rc.Status != 1 {
		t.Fatalf("the feed's stale answer: %v %v", rc, err)
	}
	if got := rates(); got.Rates["ETH"] != "" || got.Sources["ETH"] != (rateSource{}) || got.Rates["USDC"] != "1" || got.Sources["USDC"].Source != "file" {
		t.Fatalf("rates with a stale feed: %+v", got)
	}
	if r = negotiateETH(reused); r.Status != 400 || r.Code() != "rate_unavailable" {
		t.Fatalf("negotiated with a stale feed: %d %s", r.Status, r.Body)
	}
	if r = s.Do(t, "GET", "/api/v1/vouchers/"+reused, member.Token, nil); r.Status != 200 || r.Map(t)["status"] != "REDEEMED" || r.Map(t)["suppliedPayment"] != nil {
		t.Fatalf("the refused negotiation changed the voucher: %d %s", r.Status, r.Body)
	}

	// Confirmations counted, against anvil's own numbers: from here anvil
	// mines only when told, so no block comes between anvil's head and
	// receipt reads and the service's next poll. A payment mined in one
	// block shows MINED with head − block + 1 = 1 confirmation, and after
	// one more block CONFIRMED with 2, the settlement's count and the
	// transaction's alike, at the receipt's block. (Should a last interval
	// block have taken the payment already, the first count is 2.)
	anvilCall("evm_setIntervalMining", 0)
	countedID, countedPID := deposit("1")
	counted := pay(token, 1_000_000)
	if r := resolve(countedID, countedPID, counted); r.Status != 200 {
		t.Fatalf("counted: resolve-voucher: %d %s", r.Status, r.Body)
	}
	for status := ""; status != "CONFIRMED"; {
		anvilCall("anvil_mine", "0x1")
		rc, err := c.TransactionReceipt(ctx, counted)
		if err != nil {
			t.Fatal(err)
		}
		head, err := c.BlockNumber(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := int(head - rc.BlockNumber.Uint64() + 1)
		if status = "MINED"; want >= 2 {
			status = "CONFIRMED"
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := settlementOf(countedID)
			tx := st.Transactions[0]
			if tx.Status == status && st.Confirmations == want && tx.Confirmations == want && tx.BlockNumber != nil &&
				*tx.BlockNumber == rc.BlockNumber.Int64() && st.PaidAmount == "1" && (status == "MINED") == (st.Status == "PENDING") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("counted: head %d, receipt in block %d: %d confirmations (%s) never shown: settlement %+v", head, rc.BlockNumber, want, status, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := rcv.waitFor(t, countedID, 3); !slices.Equal(got, []string{"deposit.confirmed", "deposit.created", "deposit.pending"}) {
		t.Fatalf("counted: events %v", got)
	}

	// A reorg, last (anvil's evm_revert rewinds its clock to the snapshot,
	// so blocks mined after it are stamped in the past: a payment mined
	// there would be "mined before the voucher was reserved"), while
	// anvil still mines only when told. A payment mined in block N is seen
	// (MINED, 1 of 2 confirmations: deposit.pending); the chain is
	// reverted to before it, its nonce spent on another transaction (so
	// it can never be mined again), and three other blocks are mined from
	// N: a watcher blind to the reorg would count 3 confirmations. The
	// service puts the payment back to PENDING, and after two more blocks
	// and a completed check of them it still is, and the business got
	// deposit.pending and nothing after it.
	var snapshot string
	if err := json.Unmarshal(anvilCall("evm_snapshot"), &snapshot); err != nil {
		t.Fatal(err)
	}
	reorgID, reorgPID := deposit("7")
	nonce, err := c.PendingNonceAt(ctx, dropped.Address)
	if err != nil {
		t.Fatal(err)
	}
	reorged := send(dropped, &token, testchain.TransferData(payee.Address, big.NewInt(7_000_000)), 0)
	if r := resolve(reorgID, reorgPID, reorged); r.Status != 200 {
		t.Fatalf("reorg: resolve-voucher: %d %s", r.Status, r.Body)
	}
	anvilCall("anvil_mine", "0x1")
	if got := rcv.waitFor(t, reorgID, 2); !slices.Equal(got, []string{"deposit.created", "deposit.pending"}) {
		t.Fatalf("reorg: events before the reorg %v", got)
	}
	if st := settlementOf(reorgID); st.Status != "PENDING" || st.Transactions[0].Status != "MINED" || st.Transactions[0].Confirmations != 1 || st.PaidAmount != "7" {
		t.Fatalf("reorg: settlement before the reorg %+v", st)
	}
	var reverted bool
	if err := json.Unmarshal(anvilCall("evm_revert", snapshot), &reverted); err != nil || !reverted {
		t.Fatalf("evm_revert: %v %v", reverted, err)
	}
	// Priced well above the payment, so it replaces it even if the node
	// put the payment back in its pool.
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
		t.Fatalf("the reorged payment's nonce: %v", err)
	}
	anvilCall("anvil_mine", "0x3")
	if rc, err := testchain.Wait(ctx, c, spend.Hash()); err != nil || rc.Status != 1 {
		t.Fatalf("the transaction spending the payment's nonce: %v %v", rc, err)
	}
	waitTx(reorgID, "PENDING")
	// Two more blocks, then two completed checks (the second began after
	// the first ended, so after these blocks were mined).
	checks := func() float64 {
		return value(scrape(t, s), `voucherd_settlement_checks_total{network="anvil",outcome="ok"}`)
	}
	anvilCall("anvil_mine", "0x2")
	ok0 := checks()
	for checks() < ok0+2 {
		select {
		case <-ctx.Done():
			t.Fatalf("reorg: the watcher's checks stopped at %v", checks())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The settlement and its events commit together: PENDING now means no
	// verdict was written.
	if st := settlementOf(reorgID); st.Status != "PENDING" || st.PaidAmount != "" || st.Transactions[0].Status != "PENDING" || st.Transactions[0].BlockNumber != nil {
		t.Fatalf("reorg: settlement %+v", st)
	}
	if got := rcv.all()[reorgID]; len(got) != 2 || got[0].typ != "deposit.created" || got[1].typ != "deposit.pending" {
		t.Fatalf("reorg: events %v", got)
	}

	// The fabricated hash never confirmed: once the window passed, its
	// settlement is FAILED, the transaction INVALID "not confirmed within
	// the settlement window", and the business got deposit.failed (what a
	// FAILED settlement sends), never before the window's end, and no
	// deposit.pending nor a confirmation. Its window ran beside the cases
	// above: this waits only for what is left of it.
	if got := rcv.waitFor(t, fabricated, 2); !slices.Equal(got, []string{"deposit.created", "deposit.failed"}) {
		t.Fatalf("fabricated: events %v", got)
	}
	if e := rcv.all()[fabricated]; e[1].typ != "deposit.failed" || e[1].at.Sub(fabricatedAt) < window {
		t.Fatalf("fabricated: deposit.failed %v after its resolve, window %v", e[1].at.Sub(fabricatedAt), window)
	}
	if st := settlementOf(fabricated); st.Status != "FAILED" || st.PaidAmount != "" || len(st.Transactions) != 1 ||
		st.Transactions[0].Status != "INVALID" || st.Transactions[0].Reason != "not confirmed within the settlement window" || st.Transactions[0].BlockNumber != nil {
		t.Fatalf("fabricated: settlement %+v", st)
	}
}

// signedReceiver is a business's webhook receiver: it keeps the events
// whose Standard Webhooks signature verifies and fails the test on any
// other.
type signedReceiver struct {
	url    string
	mu     sync.Mutex
	wh     *standardwebhooks.Webhook
	events map[string][]receivedEvent // by voucher
	bad    []string
	got    chan struct{}
}

type receivedEvent struct {
	typ, paid string
	late      bool
	at        time.Time // when it was received
}

func newSignedReceiver(t *testing.T) *signedReceiver {
	r := &signedReceiver{events: map[string][]receivedEvent{}, got: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.wh == nil {
			http.Error(w, "no secret yet", http.StatusServiceUnavailable)
			return
		}
		if err := r.wh.Verify(body, req.Header); err != nil {
			r.bad = append(r.bad, err.Error())
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		var p struct {
			Type string
			Data struct {
				VoucherID, PaidAmount string
				Late                  bool
			}
		}
		if err := json.Unmarshal(body, &p); err != nil {
			r.bad = append(r.bad, err.Error())
			return
		}
		r.events[p.Data.VoucherID] = append(r.events[p.Data.VoucherID], receivedEvent{p.Type, p.Data.PaidAmount, p.Data.Late, time.Now()})
		select {
		case r.got <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *signedReceiver) setSecret(t *testing.T, secret string) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.wh = wh
	r.mu.Unlock()
}

// waitFor waits until the voucher has at least n events, or a verdict,
// and returns their types, sorted (events of one commit share a
// timestamp).
func (r *signedReceiver) waitFor(t *testing.T, voucherID string, n int) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		if len(r.bad) > 0 {
			r.mu.Unlock()
			t.Fatalf("deliveries that do not verify: %v", r.bad)
		}
		var types []string
		for _, e := range r.events[voucherID] {
			types = append(types, e.typ)
		}
		r.mu.Unlock()
		if len(types) >= n || slices.ContainsFunc(types, verdict) {
			slices.Sort(types)
			return types
		}
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("voucher %s: %d events, want %d: %v", voucherID, len(types), n, types)
		}
	}
}

// verdict tells the events after which a voucher gets no other.
func verdict(typ string) bool {
	switch typ {
	case "deposit.confirmed", "deposit.underpaid", "deposit.overpaid", "deposit.failed":
		return true
	}
	return false
}

func (r *signedReceiver) paid(voucherID, typ string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events[voucherID] {
		if e.typ == typ {
			return e.paid
		}
	}
	return ""
}

func (r *signedReceiver) all() map[string][]receivedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]receivedEvent, len(r.events))
	for id, es := range r.events {
		out[id] = slices.Clone(es)
	}
	return out
}
