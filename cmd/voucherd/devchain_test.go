package main_test

import (
	"bufio"
	"context"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// What README.md and docs/settlement.md promise a newcomer about the dev
// chain, checked on the real binary over JSON-RPC: chain id 1337, the five
// documented accounts funded, USDC and DAI at their documented addresses
// holding 1,000,000 for each account, the ETH/USD feed answering 3000, and
// the documented `voucherd devchain send` paying a real transfer; and a voucher
// settling on it through the real voucherd, configured as `make run` does.
func TestDevChainServesWhatTheDocsSay(t *testing.T) {
	// The dev chain is a voucherd subcommand compiled in with the devchain
	// tag, as make run builds it; the service's own build refuses it.
	if out, err := exec.Command(testserver.Binary(t), "devchain").CombinedOutput(); err == nil || !strings.Contains(string(out), "built without the dev chain") {
		t.Fatalf("voucherd devchain on the service's own build: %v %s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "voucherd")
	if out, err := exec.Command("go", "build", "-tags", "devchain", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags devchain: %v\n%s", err, out)
	}
	// As `make run` starts it (scripts/run-dev.sh), on a free port.
	cmd := exec.Command(bin, "devchain", "-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The ready line names the endpoint (the port was free, so not 8545).
	ready := regexp.MustCompile(`devchain ready"? rpc=(http://127\.0\.0\.1:\d+)`)
	var rpcURL string
	// A binary that never says so is killed, which ends the scan below.
	killer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	var said strings.Builder
	for sc.Scan() {
		if m := ready.FindStringSubmatch(sc.Text()); m != nil {
			rpcURL = m[1]
			break
		}
		said.WriteString(sc.Text() + "\n")
	}
	killer.Stop()
	if rpcURL == "" {
		t.Fatalf("devchain never said it was ready: %v\n%s", sc.Err(), said.String())
	}
	go func() { // keep draining its log
		for sc.Scan() {
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if id, err := c.ChainID(ctx); err != nil || id.Int64() != 1337 {
		t.Fatalf("chain id %v %v", id, err)
	}

	// docs/settlement.md, "The dev chain".
	accounts := []string{
		"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266", "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
		"0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
	}
	tokens := map[string]struct {
		address  string
		decimals int64
	}{
		"USDC": {"0x5FbDB2315678afecb367f032d93F642f64180aa3", 6},
		"DAI":  {"0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", 18},
	}
	const feed = "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0"
	balanceOf := func(token, holder string) *big.Int {
		t.Helper()
		data, err := testchain.TokenABI.Pack("balanceOf", common.HexToAddress(holder))
		if err != nil {
			t.Fatal(err)
		}
		to := common.HexToAddress(token)
		out, err := c.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
		if err != nil || len(out) != 32 {
			t.Fatalf("balanceOf(%s) on %s: %x %v", holder, token, out, err)
		}
		return new(big.Int).SetBytes(out)
	}
	ether := new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)
	for i, a := range accounts {
		if testchain.DevAccount(i).Address != common.HexToAddress(a) {
			t.Fatalf("dev account %d is %s, the docs say %s", i, testchain.DevAccount(i).Address.Hex(), a)
		}
		bal, err := c.BalanceAt(ctx, common.HexToAddress(a), nil)
		if err != nil || bal.Cmp(new(big.Int).Mul(big.NewInt(9_999), ether)) < 0 {
			t.Fatalf("account %s holds %v wei (%v), want about 10,000 ETH", a, bal, err)
		}
		for sym, tk := range tokens {
			want := new(big.Int).Mul(big.NewInt(1_000_000), new(big.Int).Exp(big.NewInt(10), big.NewInt(tk.decimals), nil))
			if got := balanceOf(tk.address, a); got.Cmp(want) != 0 {
				t.Fatalf("%s holds %v %s units, want %v", a, got, sym, want)
			}
		}
	}
	// The deposit factory at its documented address (dev/finance.json names
	// it for network local), and the dev sweep account, whose key make run
	// passes as VOUCHER_SWEEP_KEY, funded for gas.
	const factory, sweepAccount = "0x95bD8D42f30351685e96C62EDdc0d0613bf9a87A", "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	if err := deposit.Verify(ctx, c.Client(), common.HexToAddress(factory)); err != nil {
		t.Fatalf("the deposit factory the docs name: %v", err)
	}
	finance, err := os.ReadFile(filepath.Join("..", "..", "dev", "finance.json"))
	if err != nil || !strings.Contains(string(finance), `"depositFactory": "`+factory+`"`) {
		t.Fatalf("dev/finance.json does not name the dev chain's deposit factory %s (%v)", factory, err)
	}
	runDev, err := os.ReadFile(filepath.Join("..", "..", "scripts", "run-dev.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VOUCHER_SWEEP_KEY:-0x([0-9a-f]{64})`).FindSubmatch(runDev)
	if m == nil || testchain.KeyAccount(string(m[1])).Address != common.HexToAddress(sweepAccount) {
		t.Fatalf("scripts/run-dev.sh's VOUCHER_SWEEP_KEY is not the dev sweep account %s", sweepAccount)
	}
	if bal, err := c.BalanceAt(ctx, common.HexToAddress(sweepAccount), nil); err != nil || bal.Cmp(new(big.Int).Mul(big.NewInt(9_999), ether)) < 0 {
		t.Fatalf("the dev sweep account holds %v wei (%v)", bal, err)
	}

	ch, err := evm.Dial(ctx, rpcURL, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	answer, decimals, updated, err := ch.LatestRound(ctx, strings.ToLower(feed))
	if err != nil || answer.Cmp(big.NewInt(3000_00000000)) != 0 || decimals != 8 || time.Since(updated) > 2*time.Minute {
		t.Fatalf("ETH/USD feed: %v %d %v %v", answer, decimals, updated, err)
	}

	// The README's payment: `bin/voucherd devchain send -to … -currency USDC -amount 12.5`.
	payee := testchain.NewAccount().Address
	out, err := exec.CommandContext(ctx, bin, "devchain", "send", "-rpc", rpcURL, "-to", payee.Hex(), "-currency", "USDC", "-amount", "12.5").Output()
	if err != nil {
		t.Fatalf("voucherd devchain send: %v %s", err, out)
	}
	h := common.HexToHash(strings.TrimSpace(string(out)))
	rc, err := c.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("the sent transfer %s: %v %v", out, rc, err)
	}
	if got := balanceOf(tokens["USDC"].address, payee.Hex()); got.Cmp(big.NewInt(12_500_000)) != 0 {
		t.Fatalf("payee holds %v USDC units after the transfer, want 12500000", got)
	}

	// A first session on it, through the real voucherd on each database.
	t.Run("voucher", func(t *testing.T) {
		for i, dialect := range []string{"sqlite", "postgres"} {
			t.Run(dialect, func(t *testing.T) {
				t.Parallel()
				// Each from its own dev account, so their nonces never race.
				settleOnDevChain(t, bin, rpcURL, dialect, fmt.Sprint(1+i))
			})
		}
	})
	// README's checkout session: paid by a plain transfer to the deposit
	// address, no hash handed back, swept to the payout wallet.
	t.Run("checkout", func(t *testing.T) {
		for i, dialect := range []string{"sqlite", "postgres"} {
			t.Run(dialect, func(t *testing.T) {
				t.Parallel()
				checkoutOnDevChain(t, c, bin, rpcURL, dialect, fmt.Sprint(3+i))
			})
		}
	})
}

// devService starts make run's voucherd (bin) configured as `make run`
// configures it: dev/finance.json with network local pointed at the dev
// chain, and the VOUCHER_SWEEP_KEY of scripts/run-dev.sh.
func devService(t *testing.T, bin, rpcURL, dialect string) *testserver.Server {
	finance, err := os.ReadFile(filepath.Join("..", "..", "dev", "finance.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(finance), `"rpcUrl": "http://127.0.0.1:8545"`) {
		t.Fatal("dev/finance.json no longer points network local at 127.0.0.1:8545, as make run's dev chain serves")
	}
	file := filepath.Join(t.TempDir(), "finance.json")
	if err := os.WriteFile(file, []byte(strings.Replace(string(finance), "http://127.0.0.1:8545", rpcURL, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	runDev, err := os.ReadFile(filepath.Join("..", "..", "scripts", "run-dev.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VOUCHER_SWEEP_KEY:-(0x[0-9a-f]{64})`).FindSubmatch(runDev)
	if m == nil {
		t.Fatal("scripts/run-dev.sh sets no VOUCHER_SWEEP_KEY")
	}
	return testserver.Start(t, testserver.Options{Binary: bin, Dialect: dialect, Env: map[string]string{"VOUCHER_FINANCE_FILE": file, "VOUCHER_SWEEP_KEY": string(m[1])}})
}

// checkoutOnDevChain is README's checkout session: a business creates a
// widget paying out to its wallet on local and a checkout for 7.25 USDC;
// the customer pays what the page's QR code says with `voucherd devchain send` to
// the deposit address and hands back no hash; the page (its data-status)
// and the voucher confirm, and the payout wallet receives the sweep.
func checkoutOnDevChain(t *testing.T, c *ethclient.Client, bin, rpcURL, dialect, from string) {
	s := devService(t, bin, rpcURL, dialect)
	owner := s.User(t)
	r := s.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(t)["id"].(string)
	payout := testchain.NewAccount().Address
	r = s.Do(t, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", owner.Token, map[string]any{
		"name": "Web shop", "accepts": []map[string]any{{"network": "local", "currency": "USDC"}},
		"wallets": []map[string]any{{"network": "local", "address": payout.Hex()}},
	})
	if r.Status != 200 {
		t.Fatalf("create-widget: %d %s", r.Status, r.Body)
	}
	widgetID, secret := r.Map(t)["id"].(string), r.Map(t)["clientSecret"].(string)
	r = s.DoWith(t, "POST", "/api/v1/widgets/"+widgetID+"/create-checkout", "", map[string]any{"network": "local", "currency": "USDC", "amount": "7.25", "reference": "order-1001"},
		http.Header{"X-Client-Secret": {secret}})
	if r.Status != 200 {
		t.Fatalf("create-checkout: %d %s", r.Status, r.Body)
	}
	var co struct {
		ID, CheckoutURL string
		ExpectedPayment struct{ Wallet struct{ Address string } }
	}
	r.JSON(t, &co)
	token := co.CheckoutURL[strings.LastIndex(co.CheckoutURL, "/")+1:]
	depositAddr := co.ExpectedPayment.Wallet.Address
	if common.HexToAddress(depositAddr) != deposit.ForVoucher(testchain.DevFactory(), payout, co.ID) {
		t.Fatalf("the checkout pays to %s, not its deposit address", depositAddr)
	}
	page := func() string {
		t.Helper()
		r := s.Do(t, "GET", "/checkout/"+token, "", nil)
		if r.Status != 200 {
			t.Fatalf("the page: %d", r.Status)
		}
		m := regexp.MustCompile(`id="checkout"[^>]*data-status="([a-z_]+)"|data-status="([a-z_]+)"[^>]*id="checkout"`).FindStringSubmatch(string(r.Body))
		if m == nil {
			t.Fatalf("the page has no #checkout data-status: %s", r.Body)
		}
		return m[1] + m[2]
	}
	if st := page(); st != "awaiting_payment" {
		t.Fatalf("the page before payment: %s", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "devchain", "send", "-rpc", rpcURL, "-from", from, "-to", depositAddr, "-currency", "USDC", "-amount", "7.25").Output(); err != nil {
		t.Fatalf("voucherd devchain send: %v %s", err, out)
	}
	usdc := common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3")
	for {
		var v struct {
			Status     string
			Settlement *struct{ Status, PaidAmount string }
			Deposit    *struct {
				Address, PayoutAddress string
				Sweep                  struct{ Status, TransactionHash, Amount string }
			}
		}
		r = s.Do(t, "GET", "/api/v1/vouchers/"+co.ID, owner.Token, nil)
		if r.Status != 200 {
			t.Fatalf("voucher: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &v)
		if v.Settlement != nil && v.Settlement.Status != "PENDING" && v.Settlement.Status != "CONFIRMED" {
			t.Fatalf("settlement: %s", r.Body)
		}
		if v.Deposit != nil && v.Deposit.Sweep.Status == "DONE" {
			if v.Status != "RESOLVED" || v.Settlement == nil || v.Settlement.Status != "CONFIRMED" || v.Settlement.PaidAmount != "7.25" ||
				v.Deposit.Sweep.Amount != "7.25" || !strings.EqualFold(v.Deposit.PayoutAddress, payout.Hex()) {
				t.Fatalf("voucher: %s", r.Body)
			}
			rc, err := c.TransactionReceipt(ctx, common.HexToHash(v.Deposit.Sweep.TransactionHash))
			if err != nil || rc.Status != 1 {
				t.Fatalf("the sweep transaction %s: %v %v", v.Deposit.Sweep.TransactionHash, rc, err)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never confirmed and swept: %s", r.Body)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if st := page(); st != "confirmed" {
		t.Fatalf("the page after the payment: %s", st)
	}
	data, _ := testchain.TokenABI.Pack("balanceOf", payout)
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &usdc, Data: data}, nil)
	if err != nil || new(big.Int).SetBytes(out).Cmp(big.NewInt(7_250_000)) != 0 {
		t.Fatalf("the payout wallet holds %x USDC units (%v), want 7250000", out, err)
	}
}

// settleOnDevChain is README's first session: voucherd configured as
// `make run` configures it (dev/finance.json, its network local pointed at
// the dev chain), a payer's wallet opens a context, the payee signs in with
// its code, reserves and redeems a voucher for 12.5 USDC on local, the
// payer pays it with `voucherd devchain send` from a prefunded dev account and
// resolves it with the printed hash, and the voucher's settlement becomes
// CONFIRMED because the chain confirmed it.
func settleOnDevChain(t *testing.T, bin, rpcURL, dialect, from string) {
	s := devService(t, bin, rpcURL, dialect)

	wallet := s.Device(t)
	_, code := s.Session(t, wallet)
	payee := s.Resource(t, code)
	id := s.Reserve(t, payee.Token, map[string]any{"code": code})
	payeeWallet := testchain.NewAccount().Address.Hex()
	r := s.Do(t, "POST", "/api/v1/vouchers/"+id+"/redeem-voucher", payee.Token, map[string]any{"expectedPayment": map[string]any{
		"network": "local", "currency": "USDC", "currencyAddress": "0x5FbDB2315678afecb367f032d93F642f64180aa3", "amount": "12.5",
		"wallet": map[string]any{"address": payeeWallet},
	}})
	if r.Status != 200 {
		t.Fatalf("redeem-voucher: %d %s", r.Status, r.Body)
	}
	var v struct {
		ExpectedPayment struct{ ID string } `json:"expectedPayment"`
	}
	r.JSON(t, &v)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "devchain", "send", "-rpc", rpcURL, "-from", from, "-to", payeeWallet, "-currency", "USDC", "-amount", "12.5").Output()
	if err != nil {
		t.Fatalf("voucherd devchain send: %v %s", err, out)
	}
	hash := strings.TrimSpace(string(out))
	r = s.Do(t, "POST", "/api/v1/vouchers/"+id+"/resolve-voucher", wallet.Token, map[string]any{"receipts": []map[string]any{{"paymentId": v.ExpectedPayment.ID, "transactionHash": hash}}})
	if r.Status != 200 {
		t.Fatalf("resolve-voucher: %d %s", r.Status, r.Body)
	}

	// The payee polls the voucher, as the spec's GET is meant to be used,
	// until its settlement is decided (the dev chain seals a block every
	// 2 s; 2 confirmations).
	type settlement struct {
		Status, PaidAmount, Currency string
		Verified                     bool
		Confirmations                int
		RequiredConfirmations        int
		Transactions                 []struct{ TransactionHash, Status string }
	}
	for {
		r = s.Do(t, "GET", "/api/v1/vouchers/"+id, payee.Token, nil)
		var got struct {
			Status     string
			Settlement *settlement
		}
		r.JSON(t, &got)
		if r.Status != 200 || got.Status != "RESOLVED" || got.Settlement == nil {
			t.Fatalf("voucher: %d %s", r.Status, r.Body)
		}
		if st := got.Settlement; st.Status != "PENDING" {
			if st.Status != "CONFIRMED" || !st.Verified || st.PaidAmount != "12.5" || st.Currency != "USDC" || st.RequiredConfirmations != 2 ||
				st.Confirmations < 2 || len(st.Transactions) != 1 || st.Transactions[0].Status != "CONFIRMED" || !strings.EqualFold(st.Transactions[0].TransactionHash, hash) {
				t.Fatalf("settlement: %s", r.Body)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the settlement never left PENDING: %s", r.Body)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
