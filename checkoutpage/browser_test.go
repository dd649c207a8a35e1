package checkoutpage_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/common"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testbrowser"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// payee is the widget's wallet on the test chain.
var payee = common.HexToAddress("0x52908400098527886E0F7030069857D2E4169EE7")

// outDir is where the screenshots go for reviewers: $VOUCHER_TEST_OUT,
// else test/out/checkout at the repository root (gitignored).
func outDir(t *testing.T) string {
	dir := os.Getenv("VOUCHER_TEST_OUT")
	if dir == "" {
		dir = filepath.Join("..", "test", "out", "checkout")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// shot writes a full-page PNG (quality 100: chromedp makes a JPEG below it).
func shot(t *testing.T, tab *testbrowser.Tab, name string) {
	t.Helper()
	png, err := chromedp.Run(tab.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(outDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

func post(t *testing.T, srv *testserver.Server, path, secret string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", srv.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Client-Secret", secret)
	}
	resp, err := srv.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, rb)
	}
	var out map[string]any
	_ = json.Unmarshal(rb, &out)
	return out
}

// chain is go-ethereum's simulated chain served as JSON-RPC over HTTP (the
// service dials it as it would any node), with the test ERC-20 deployed and
// a payer holding it. Blocks are made only by Commit, so a test decides
// when a payment is mined and confirmed.
type chain struct {
	sim   *testchain.Sim
	rpc   string
	token common.Address
	payer testchain.Account
	mu    sync.Mutex
}

func newChain(t *testing.T) *chain {
	t.Helper()
	owner, payer := testchain.DevAccount(0), testchain.DevAccount(1)
	sim := testchain.NewSim(owner.Address, payer.Address)
	t.Cleanup(func() { _ = sim.Close() })
	rpc := httptest.NewServer(testchain.Handler(sim.RPC, nil))
	t.Cleanup(rpc.Close)
	c := &chain{sim: sim, rpc: rpc.URL, payer: payer}
	ctx := context.Background()
	h, err := testchain.Send(ctx, sim.Client, owner, nil, nil, testchain.DeployTokenData("USD Coin", "USDC", 6), 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Commit()
	rc, err := sim.Client.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy the token: %v %v", rc, err)
	}
	c.token = rc.ContractAddress
	if _, err := testchain.Send(ctx, sim.Client, owner, &c.token, nil, testchain.MintData(payer.Address, big.NewInt(1_000_000_000_000)), 0); err != nil {
		t.Fatal(err)
	}
	c.Commit()
	return c
}

// Commit seals a block.
func (c *chain) Commit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sim.Commit()
}

// Pay sends a signed ERC-20 transfer of atomic units from the payer to the
// payee and returns its hash (in the pool: mined at the next Commit).
func (c *chain) Pay(t *testing.T, atomic int64) string {
	t.Helper()
	h, err := testchain.Send(context.Background(), c.sim.Client, c.payer, &c.token, nil, testchain.TransferData(payee, big.NewInt(atomic)), 0)
	if err != nil {
		t.Fatal(err)
	}
	return h.Hex()
}

// financeFile names the chain as the network "local" (chain id 1337, two
// confirmations) with its USDC, so the service verifies every payment on
// it with its settlement watcher.
func (c *chain) financeFile(t *testing.T) string {
	t.Helper()
	f := fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "local", "type": "evm", "chainId": "%d", "rpcUrl": %q, "confirmations": 2, "pollInterval": "200ms"}],
  "tokens": [
    {"network": "local", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "local", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}
  ],
  "prices": {"ETH": "3000", "USDC": "1"}
}`, testchain.SimChainID, c.rpc, c.token.Hex())
	p := filepath.Join(t.TempDir(), "finance.json")
	if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// shop is a business with a widget taking USDC on network.
type shop struct {
	srv           *testserver.Server
	owner         testserver.Identity
	widget        string
	secret        string
	network, coin string
	hooks         *hooks
}

// hooks is the business's webhook receiver: every delivery is checked
// with the Standard Webhooks library against the endpoint's signing secret.
type hooks struct {
	mu      sync.Mutex
	wh      *standardwebhooks.Webhook
	got     map[string][]string // voucher id → event types that verified, in order
	bad     []string
	changed chan struct{}
}

func (h *hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p struct {
		Type string `json:"type"`
		Data struct {
			VoucherID  string `json:"voucherId"`
			PaidAmount string `json:"paidAmount"`
			Late       bool   `json:"late"`
		} `json:"data"`
	}
	h.mu.Lock()
	if err := h.wh.Verify(body, r.Header); err != nil || json.Unmarshal(body, &p) != nil {
		h.bad = append(h.bad, fmt.Sprintf("%v: %s", err, body))
	} else {
		e := p.Type + " " + p.Data.PaidAmount
		if p.Data.Late {
			e += " late"
		}
		h.got[p.Data.VoucherID] = append(h.got[p.Data.VoucherID], e)
	}
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusOK)
}

// wait waits until the receiver has exactly want for voucher id, in any
// order (deliveries are concurrent; each carries its own createdAt), each
// delivery verified; it wakes at each delivery.
func (h *hooks) wait(t *testing.T, id string, want ...string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	sort.Strings(want)
	for {
		h.mu.Lock()
		types := append([]string(nil), h.got[id]...)
		bad := h.bad
		h.mu.Unlock()
		sort.Strings(types)
		got := strings.Join(types, ", ")
		if len(bad) > 0 {
			t.Fatalf("deliveries that do not verify: %v", bad)
		}
		if got == strings.Join(want, ", ") {
			return
		}
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("webhooks for %s: got [%s], want [%s]", id, got, strings.Join(want, ", "))
		}
	}
}

func newShop(t *testing.T, srv *testserver.Server, network string) *shop {
	t.Helper()
	owner := srv.User(t)
	r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	biz := r.Map(t)["id"].(string)
	r = srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/widgets/create-widget", owner.Token, map[string]any{
		"name":    "Shop",
		"accepts": []map[string]any{{"network": network, "currency": "USDC"}},
		"wallets": []map[string]any{{"network": network, "address": payee.Hex()}},
	})
	if r.Status != 200 {
		t.Fatalf("create-widget: %d %s", r.Status, r.Body)
	}
	w := r.Map(t)
	h := &hooks{got: map[string][]string{}, changed: make(chan struct{}, 1)}
	rcv := httptest.NewServer(h)
	t.Cleanup(rcv.Close)
	r = srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", owner.Token, map[string]any{
		"url": rcv.URL + "/hooks", "events": []string{"deposit.created", "deposit.pending", "deposit.confirmed", "deposit.underpaid"},
	})
	if r.Status != 200 {
		t.Fatalf("create-endpoint: %d %s", r.Status, r.Body)
	}
	var err error
	if h.wh, err = standardwebhooks.NewWebhook(r.Map(t)["signingSecret"].(string)); err != nil {
		t.Fatal(err)
	}
	return &shop{srv: srv, owner: owner, widget: w["id"].(string), secret: w["clientSecret"].(string), network: network, coin: "USDC", hooks: h}
}

// checkout is one checkout: its voucher and its capability token.
type checkout struct{ id, token string }

// Checkout creates a checkout as the merchant's server does (client secret).
func (s *shop) Checkout(t *testing.T, amount string) checkout {
	t.Helper()
	co := post(t, s.srv, "/api/v1/widgets/"+s.widget+"/create-checkout", s.secret,
		map[string]any{"network": s.network, "currency": s.coin, "amount": amount})
	u := co["checkoutUrl"].(string)
	return checkout{id: co["id"].(string), token: u[strings.LastIndex(u, "/")+1:]}
}

// Voucher is the checkout's voucher as the business's dashboard reads it.
func (s *shop) Voucher(t *testing.T, c checkout) (settlement string, paid string, updatedAt time.Time) {
	t.Helper()
	r := s.srv.Do(t, "GET", "/api/v1/vouchers/"+c.id, s.owner.Token, nil)
	var v struct {
		UpdatedAt  time.Time `json:"updatedAt"`
		Settlement *struct {
			Status     string `json:"status"`
			PaidAmount string `json:"paidAmount"`
		} `json:"settlement"`
	}
	if r.Status != 200 {
		t.Fatalf("get voucher: %d %s", r.Status, r.Body)
	}
	r.JSON(t, &v)
	if v.Settlement == nil {
		return "", "", v.UpdatedAt
	}
	return v.Settlement.Status, v.Settlement.PaidAmount, v.UpdatedAt
}

// instrument runs in every document of a tab before the page's own
// script: it records each value data-status takes with the wall-clock time
// (ms since the epoch, sub-millisecond) the DOM changed, and notes when
// the page's event stream delivered its first event.
const instrument = `(() => {
  window.__statuses = [];
  let streamed;
  window.__streamReady = new Promise(res => { streamed = res; });
  const ES = window.EventSource;
  if (ES) {
    window.EventSource = function (u, o) {
      const es = new ES(u, o);
      es.addEventListener("checkout", () => streamed(true), {once: true});
      return es;
    };
    window.EventSource.prototype = ES.prototype;
  }
  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("checkout");
    if (!root) return;
    const note = () => {
      const s = root.dataset.status, l = window.__statuses;
      if (!l.length || l[l.length - 1].status !== s) l.push({status: s, at: performance.timeOrigin + performance.now()});
    };
    note();
    new MutationObserver(note).observe(root, {attributes: true, attributeFilter: ["data-status"]});
  });
  window.__waitStatus = (want, ms) => new Promise(res => {
    const seen = () => (window.__statuses || []).find(x => x.status === want);
    if (seen()) return res(seen());
    const root = document.getElementById("checkout");
    const o = new MutationObserver(() => { if (seen()) { o.disconnect(); res(seen()); } });
    o.observe(root, {attributes: true, attributeFilter: ["data-status"]});
    setTimeout(() => { o.disconnect(); res(seen() || null); }, ms);
  });
})()`

// tab opens a tab whose documents carry instrument (and extra scripts,
// such as an injected wallet).
func tab(t *testing.T, b *testbrowser.Browser, scripts ...string) *testbrowser.Tab {
	t.Helper()
	tb := b.Tab(t)
	for _, s := range append([]string{instrument}, scripts...) {
		if _, err := chromedp.Call(tb.Ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: s}); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

// open loads a checkout's page at 360 px and waits until its event stream
// is live.
func open(t *testing.T, tb *testbrowser.Tab, srv *testserver.Server, c checkout) {
	t.Helper()
	tb.Run(t, chromedp.EmulateViewport(360, 800), chromedp.Navigate(srv.URL+"/checkout/"+c.token), chromedp.WaitVisible(`[data-message]`))
	var ok bool
	tb.Eval(t, `Promise.race([window.__streamReady, new Promise(r => setTimeout(() => r(false), 10000))])`, &ok)
	if !ok {
		t.Fatal("the page's event stream sent nothing within 10 s")
	}
}

type statusAt struct {
	Status string  `json:"status"`
	At     float64 `json:"at"`
}

// waitStatus waits, in the browser (no polling), until the page's
// data-status has been want, and returns when the DOM took that value.
func waitStatus(t *testing.T, tb *testbrowser.Tab, want string) time.Time {
	t.Helper()
	var got *statusAt
	tb.Eval(t, fmt.Sprintf(`window.__waitStatus(%q, 20000)`, want), &got)
	if got == nil {
		var seen []statusAt
		tb.Eval(t, `window.__statuses`, &seen)
		t.Fatalf("page status: want %s, the page went through %+v", want, seen)
	}
	return time.UnixMicro(int64(got.At * 1000))
}

type pageState struct {
	Status, Amount, Address, PaymentURI, Message, TxHash string
	QRLoaded, QRData, WalletHidden, WalletShown          bool
	FormShown                                            bool
	ScrollWidth                                          int
}

const readState = `(() => {
  const root = document.getElementById("checkout");
  const qr = document.querySelector("img[data-qr]");
  const form = document.querySelector('[data-form="submit-hash"]');
  const wallet = document.querySelector('[data-action="pay-with-wallet"]');
  return {
    Status: root.dataset.status,
    Amount: document.querySelector("[data-amount]").dataset.amount,
    Address: document.querySelector("[data-address]").dataset.address,
    PaymentURI: document.querySelector("[data-payment-uri]").dataset.paymentUri,
    Message: document.querySelector("[data-message]").textContent,
    TxHash: document.querySelector("[data-tx-hash]").textContent,
    QRLoaded: qr.complete && qr.naturalWidth > 0,
    QRData: qr.src.startsWith("data:image/png;base64,"),
    WalletHidden: wallet.hidden && wallet.offsetParent === null,
    WalletShown: !wallet.hidden && wallet.offsetParent !== null,
    FormShown: form.offsetParent !== null,
    ScrollWidth: document.documentElement.scrollWidth,
  };
})()`

func state(t *testing.T, tb *testbrowser.Tab) pageState {
	t.Helper()
	var s pageState
	tb.Eval(t, readState, &s)
	return s
}

// latencies collects settlement change → page samples: from the watcher's
// verdict (the voucher's updatedAt, stamped in the transaction that
// records it) to the DOM's data-status change in the open page.
type latencies struct {
	mu sync.Mutex
	ms []float64
	// measured is set once the rounds of open pages ran (a -run filter
	// may leave them out).
	measured bool
}

// confirm seals the two blocks that confirm a payment already in the
// pool, waits for the page to show want, checks what the business sees,
// and records the verdict → DOM time.
func (l *latencies) confirm(t *testing.T, c *chain, s *shop, tb *testbrowser.Tab, co checkout, want, settlement, paid string) {
	t.Helper()
	c.Commit() // mined: 1 of 2 confirmations, still pending
	c.Commit() // confirmed
	l.measure(t, s, tb, co, want, settlement, paid)
}

// measure waits for the page to show want, checks the settlement the
// business sees, and records the time from its verdict to the DOM change.
func (l *latencies) measure(t *testing.T, s *shop, tb *testbrowser.Tab, co checkout, want, settlement, paid string) {
	t.Helper()
	domAt := waitStatus(t, tb, want)
	st, amount, verdictAt := s.Voucher(t, co)
	if st != settlement || amount != paid {
		t.Fatalf("settlement %s paid %q, want %s %s", st, amount, settlement, paid)
	}
	d := float64(domAt.Sub(verdictAt).Microseconds()) / 1000
	if d < -1 { // updatedAt has millisecond precision
		t.Fatalf("the page changed %.1f ms before the verdict it shows", -d)
	}
	l.mu.Lock()
	l.ms = append(l.ms, d)
	l.mu.Unlock()
}

// injectedWallet is a minimal EIP-1193 provider whose requests go to the
// Go test (an exposed function, not a request to any host).
const injectedWallet = `window.ethereum = {
  isTestWallet: true,
  request: ({method, params}) => window.testWallet({method, params: params || []}),
};`

type walletRequest struct {
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

// wallet is the Go side of injectedWallet: it holds the payer's key, starts
// on chain id 1 (so the page must ask it to switch), and signs and sends
// what eth_sendTransaction asks on the simulated chain.
type wallet struct {
	c     *chain
	mu    sync.Mutex
	chain string
	calls []string
	sent  map[string]any
	hash  string
}

func (w *wallet) handle(ctx context.Context, req walletRequest) (any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, req.Method)
	switch req.Method {
	case "eth_requestAccounts", "eth_accounts":
		return []string{w.c.payer.Address.Hex()}, nil
	case "eth_chainId":
		return w.chain, nil
	case "wallet_switchEthereumChain":
		var p []struct {
			ChainID string `json:"chainId"`
		}
		if b, _ := json.Marshal(req.Params); json.Unmarshal(b, &p) != nil || len(p) != 1 {
			return nil, fmt.Errorf("wallet_switchEthereumChain: bad params %s", b)
		}
		if p[0].ChainID != fmt.Sprintf("0x%x", testchain.SimChainID) {
			return nil, fmt.Errorf("unrecognized chain %s", p[0].ChainID)
		}
		w.chain = p[0].ChainID
		return nil, nil
	case "eth_sendTransaction":
		var txs []struct{ From, To, Value, Data string }
		if b, _ := json.Marshal(req.Params); json.Unmarshal(b, &txs) != nil || len(txs) != 1 {
			return nil, fmt.Errorf("eth_sendTransaction: bad params %s", b)
		}
		tx := txs[0]
		w.sent = map[string]any{"from": tx.From, "to": tx.To, "value": tx.Value, "data": tx.Data}
		if !strings.EqualFold(tx.From, w.c.payer.Address.Hex()) || !common.IsHexAddress(tx.To) {
			return nil, fmt.Errorf("eth_sendTransaction: from %s to %s", tx.From, tx.To)
		}
		data, err := hex.DecodeString(strings.TrimPrefix(tx.Data, "0x"))
		if err != nil {
			return nil, fmt.Errorf("eth_sendTransaction: data: %v", err)
		}
		value, ok := new(big.Int).SetString(strings.TrimPrefix(tx.Value, "0x"), 16)
		if !ok {
			return nil, fmt.Errorf("eth_sendTransaction: value %q", tx.Value)
		}
		to := common.HexToAddress(tx.To)
		h, err := testchain.Send(ctx, w.c.sim.Client, w.c.payer, &to, value, data, 0)
		if err != nil {
			return nil, err
		}
		w.hash = h.Hex()
		return w.hash, nil
	}
	return nil, fmt.Errorf("the method %s is not supported", req.Method)
}

// weigh records, for one tab, every request's URL and the bytes of every
// response (decoded, and as received on the wire).
type weigh struct {
	mu      sync.Mutex
	urls    []string
	decoded map[string]int64
	wire    map[string]float64
	byID    map[network.RequestID]string
}

func record(t *testing.T, tb *testbrowser.Tab) *weigh {
	t.Helper()
	w := &weigh{decoded: map[string]int64{}, wire: map[string]float64{}, byID: map[network.RequestID]string{}}
	if err := chromedp.Listen(tb.Ctx, func(ev any) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			w.urls = append(w.urls, e.Request.URL)
			w.byID[e.RequestID] = e.Request.URL
		case *network.EventDataReceived:
			w.decoded[w.byID[e.RequestID]] += e.DataLength
		case *network.EventLoadingFinished:
			w.wire[w.byID[e.RequestID]] += e.EncodedDataLength
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tb.Ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	// The browser must not answer from a cache: every byte is counted.
	if _, err := chromedp.Call(tb.Ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestCheckoutPage opens the hosted page in headless Chromium against the
// real binary whose settlement watcher follows a real chain (go-ethereum's
// simulated chain over JSON-RPC with a real ERC-20), on SQLite and
// PostgreSQL, plus an expiring checkout. One browser serves every subtest.
func TestCheckoutPage(t *testing.T) {
	b := testbrowser.Start(t)
	lat := &latencies{}
	t.Run("group", func(t *testing.T) {
		for _, dialect := range testdb.Dialects {
			t.Run(dialect, func(t *testing.T) {
				t.Parallel()
				onChain(t, b, dialect, lat)
			})
		}
		t.Run("expired", func(t *testing.T) {
			t.Parallel()
			expired(t, b)
		})
	})
	if t.Failed() || !lat.measured {
		return
	}
	// Settlement change → open page, every sample of both databases.
	sort.Float64s(lat.ms)
	n := len(lat.ms)
	if n < 15 {
		t.Fatalf("%d latency samples, want at least 15", n)
	}
	p := func(q int) float64 { return lat.ms[(n*q+99)/100-1] }
	t.Logf("watcher verdict → page data-status, %d settlements: p50 %.0f ms, p99 %.0f ms, max %.0f ms", n, p(50), p(99), lat.ms[n-1])
	// The budget is 1 s at p99 (docs/widgets.md has the figure measured);
	// the test's bound is coarse so a loaded CI machine does not flap.
	if p(99) >= 5000 {
		t.Fatalf("settlement change → page p99 %.0f ms, over 5 s", p(99))
	}
}

func onChain(t *testing.T, b *testbrowser.Browser, dialect string, lat *latencies) {
	c := newChain(t)
	srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{"VOUCHER_FINANCE_FILE": c.financeFile(t)}})
	s := newShop(t, srv, "local")
	name := func(n string) string { return dialect + "-" + n + ".png" }

	t.Run("page, one origin, weight, pasted hash", func(t *testing.T) {
		co := s.Checkout(t, "12.5")
		tb := tab(t, b)
		w := record(t, tb)
		open(t, tb, srv, co)
		st := state(t, tb)
		wantURI := "ethereum:" + c.token.Hex() + "@1337/transfer?address=" + payee.Hex() + "&uint256=12500000"
		if st.Status != "awaiting_payment" || st.Amount != "12.5" || st.Address != payee.Hex() || st.PaymentURI != wantURI {
			t.Fatalf("hooks: %+v", st)
		}
		if !st.QRLoaded || !st.QRData {
			t.Fatalf("QR code: %+v", st)
		}
		if !st.WalletHidden {
			t.Fatalf("pay-with-wallet shown without window.ethereum: %+v", st)
		}
		if !st.FormShown || st.ScrollWidth > 360 {
			t.Fatalf("at 360 px: form shown %v, scroll width %d", st.FormShown, st.ScrollWidth)
		}
		shot(t, tb, name("awaiting_payment"))

		// Everything the page loaded: one origin, at most 150 KiB.
		tb.Eval(t, `true`, nil) // the events so far have reached the recorder
		w.mu.Lock()
		origin, _ := url.Parse(srv.URL)
		var decoded int64
		var wire float64
		for _, u := range w.urls {
			if pu, err := url.Parse(u); err != nil || (pu.Scheme != "data" && pu.Host != origin.Host) {
				t.Errorf("request to another host: %s", u)
			}
		}
		for u, n := range w.decoded {
			decoded += n
			wire += w.wire[u]
		}
		urls := append([]string(nil), w.urls...)
		pageBytes, js, css := w.decoded[srv.URL+"/checkout/"+co.token], w.decoded[srv.URL+"/checkout-assets/page.js"], w.decoded[srv.URL+"/checkout-assets/page.css"]
		w.mu.Unlock()
		if pageBytes == 0 || js == 0 || css == 0 || len(urls) < 4 {
			t.Fatalf("the recorder missed the page's loads (page %d, js %d, css %d bytes; requests %v)", pageBytes, js, css, urls)
		}
		t.Logf("the page loaded %d resources, %d bytes decoded (page %d, script %d, style %d), %.0f bytes on the wire: %v",
			len(urls), decoded, pageBytes, js, css, wire, urls)
		if decoded > 150*1024 || wire > 150*1024 {
			t.Fatalf("the page and its assets weigh %d bytes (%.0f on the wire), over 150 KiB", decoded, wire)
		}

		// A malformed hash, typed and entered: the page says why and
		// nothing changes.
		tb.Run(t, chromedp.Focus(`input[name="transactionHash"]`), chromedp.KeyEvent("0x12\r"))
		var errText string
		tb.Eval(t, `new Promise(res => { const e = document.querySelector("[data-error]");
		  if (!e.hidden) return res(e.textContent);
		  const o = new MutationObserver(() => { if (!e.hidden) res(e.textContent) }); o.observe(e, {attributes: true, childList: true});
		  setTimeout(() => res(e.textContent), 10000); })`, &errText)
		if !strings.Contains(errText, "transactionHash") {
			t.Fatalf("malformed hash: error %q", errText)
		}
		if st := state(t, tb); st.Status != "awaiting_payment" {
			t.Fatalf("after a malformed hash: %+v", st)
		}

		// The customer pays from another wallet (a signed transfer on the
		// chain) and pastes its hash: pending at once, confirmed when the
		// chain has confirmed it.
		hash := c.Pay(t, 12_500_000)
		tb.Eval(t, `(() => { document.querySelector('input[name="transactionHash"]').value = ""; return true; })()`, nil)
		tb.Run(t, chromedp.Focus(`input[name="transactionHash"]`), chromedp.KeyEvent(hash+"\r"))
		waitStatus(t, tb, "pending")
		if st := state(t, tb); st.TxHash != hash || !strings.Contains(st.Message, "Waiting for the network") {
			t.Fatalf("pending: %+v", st)
		}
		if st, _, _ := s.Voucher(t, co); st != "PENDING" {
			t.Fatalf("settlement before any block: %s", st)
		}
		shot(t, tb, name("pending"))
		lat.confirm(t, c, s, tb, co, "confirmed", "CONFIRMED", "12.5")
		shot(t, tb, name("confirmed"))
		// The merchant learns it from its signed webhooks, each once.
		s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 12.5", "deposit.confirmed 12.5")
		tb.Run(t, chromedp.Navigate(srv.URL+"/checkout/"+co.token), chromedp.WaitVisible(`[data-message]`))
		if st := state(t, tb); st.Status != "confirmed" || !strings.Contains(st.Message, "Paid") || st.TxHash != hash {
			t.Fatalf("after a reload: %+v", st)
		}
	})

	t.Run("browser wallet (EIP-1193)", func(t *testing.T) {
		co := s.Checkout(t, "7.25")
		wl := &wallet{c: c, chain: "0x1"}
		tb := tab(t, b, injectedWallet)
		tb.Run(t, chromedp.ExposeFunc("testWallet", wl.handle))
		open(t, tb, srv, co)
		if st := state(t, tb); !st.WalletShown || st.Status != "awaiting_payment" {
			t.Fatalf("pay-with-wallet with a provider: %+v", st)
		}
		tb.Run(t, chromedp.Click(`[data-action="pay-with-wallet"]`))
		waitStatus(t, tb, "pending")
		wl.mu.Lock()
		calls, sent, hash := strings.Join(wl.calls, " "), wl.sent, wl.hash
		wl.mu.Unlock()
		if calls != "eth_requestAccounts eth_chainId wallet_switchEthereumChain eth_chainId eth_sendTransaction" {
			t.Fatalf("the page asked the wallet: %s", calls)
		}
		wantData := "0x" + hex.EncodeToString(testchain.TransferData(payee, big.NewInt(7_250_000)))
		if !strings.EqualFold(sent["to"].(string), c.token.Hex()) || sent["data"] != wantData || sent["value"] != "0x0" {
			t.Fatalf("eth_sendTransaction %v, want the token's transfer(%s, 7250000) %s", sent, payee.Hex(), wantData)
		}
		if st := state(t, tb); st.TxHash != hash {
			t.Fatalf("the page submitted %q, the wallet sent %s", st.TxHash, hash)
		}
		shot(t, tb, name("wallet_pending"))
		lat.confirm(t, c, s, tb, co, "confirmed", "CONFIRMED", "7.25")
		shot(t, tb, name("wallet_confirmed"))
		s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 7.25", "deposit.confirmed 7.25")
	})

	if dialect != storage.SQLite {
		return
	}
	t.Run("underpaid", func(t *testing.T) {
		co := s.Checkout(t, "10")
		tb := tab(t, b)
		open(t, tb, srv, co)
		hash := c.Pay(t, 4_000_000)
		post(t, srv, "/api/v1/checkout/"+co.token+"/submit-payment", "", map[string]any{"transactionHash": hash})
		waitStatus(t, tb, "pending")
		lat.confirm(t, c, s, tb, co, "underpaid", "UNDERPAID", "4")
		if st := state(t, tb); !strings.Contains(st.Message, "Do not pay again") {
			t.Fatalf("underpaid: %+v", st)
		}
		shot(t, tb, name("underpaid"))
		s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 4", "deposit.underpaid 4")
	})

	t.Run("settlement changes reach the open page", func(t *testing.T) {
		// Four open pages at a time (a browser holds 6 connections per
		// host), paid in one block and confirmed by one verdict; each
		// round's tabs close with its subtest.
		for round := range 3 {
			t.Run(fmt.Sprint(round), func(t *testing.T) {
				cos := make([]checkout, 4)
				tabs := make([]*testbrowser.Tab, 4)
				for i := range cos {
					cos[i] = s.Checkout(t, "1")
					tabs[i] = tab(t, b)
					open(t, tabs[i], srv, cos[i])
				}
				for i, co := range cos {
					hash := c.Pay(t, 1_000_000)
					post(t, srv, "/api/v1/checkout/"+co.token+"/submit-payment", "", map[string]any{"transactionHash": hash})
					waitStatus(t, tabs[i], "pending")
				}
				c.Commit()
				c.Commit()
				for i, co := range cos {
					lat.measure(t, s, tabs[i], co, "confirmed", "CONFIRMED", "1")
				}
			})
		}
		lat.mu.Lock()
		lat.measured = !t.Failed()
		lat.mu.Unlock()
	})
}

// expired: a checkout nobody pays turns expired on its open page (the
// countdown, then the sweeper's change over the stream), shows it after a
// reload, and refuses a payment.
func expired(t *testing.T, b *testbrowser.Browser) {
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: map[string]string{
		"VOUCHER_VOUCHER_TTL": "8s", "VOUCHER_SWEEP_INTERVAL": "1s",
	}})
	s := newShop(t, srv, "ethereum")
	co := s.Checkout(t, "5")
	tb := tab(t, b)
	open(t, tb, srv, co)
	if st := state(t, tb); st.Status != "awaiting_payment" {
		t.Fatalf("fresh checkout: %+v", st)
	}
	waitStatus(t, tb, "expired")
	shot(t, tb, "expired_live.png")
	tb.Run(t, chromedp.Navigate(srv.URL+"/checkout/"+co.token), chromedp.WaitVisible(`[data-message]`))
	st := state(t, tb)
	if st.Status != "expired" || !strings.Contains(st.Message, "expired") || st.FormShown {
		t.Fatalf("expired checkout: %+v", st)
	}
	shot(t, tb, "expired.png")
	r := srv.Do(t, "POST", "/api/v1/checkout/"+co.token+"/submit-payment", "", map[string]any{"transactionHash": "0x" + strings.Repeat("cd", 32)})
	if r.Status != 400 || r.Code() != "expired" {
		t.Fatalf("submit on expired: %d %s", r.Status, r.Body)
	}
}
