package checkoutpage_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/checkoutpage"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testbrowser"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// deployFactory puts the deposit factory on the chain.
func (c *chain) deployFactory(t *testing.T) common.Address {
	t.Helper()
	ctx := context.Background()
	h, err := testchain.Send(ctx, c.sim.Client, testchain.DevAccount(0), nil, nil, deposit.FactoryCode, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Commit()
	rc, err := c.sim.Client.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy the factory: %v %v", rc, err)
	}
	return rc.ContractAddress
}

// depositFinanceFile is financeFile with the network's depositFactory.
func (c *chain) depositFinanceFile(t *testing.T, factory common.Address) string {
	t.Helper()
	b, err := os.ReadFile(c.financeFile(t))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Replace(string(b), `"pollInterval": "200ms"}`, fmt.Sprintf(`"pollInterval": "200ms", "depositFactory": %q}`, factory.Hex()), 1)
	p := filepath.Join(t.TempDir(), "finance-deposits.json")
	if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// PayTo sends atomic units of the token from the payer to addr, as a
// phone wallet that scanned the QR code does: nobody hands the hash back.
func (c *chain) PayTo(t *testing.T, addr string, atomic int64) {
	t.Helper()
	if _, err := testchain.Send(context.Background(), c.sim.Client, c.payer, &c.token, nil, testchain.TransferData(common.HexToAddress(addr), big.NewInt(atomic)), 0); err != nil {
		t.Fatal(err)
	}
}

type depositState struct {
	Status, Address, Remaining string
	RemainingShown, LateShown  bool
	PayShown                   bool
}

const readDeposit = `(() => {
  const root = document.getElementById("checkout");
  const rest = document.querySelector("[data-remaining-line]");
  const late = document.querySelector("[data-late]");
  return {
    Status: root.dataset.status,
    Address: document.querySelector("[data-address]").dataset.address,
    Remaining: document.querySelector("[data-remaining-amount]").textContent,
    RemainingShown: !rest.hidden && rest.offsetParent !== null,
    LateShown: !late.hidden && late.offsetParent !== null,
    PayShown: document.querySelector("section.pay").offsetParent !== null,
  };
})()`

// The page of a checkout with a deposit address, through the real binary
// on the simulated chain: a payment sent to the address shown, with no
// hash handed back, moves the page to pending then confirmed, and the
// business's receiver verifies each event; a partial payment shows what
// remains; a payment after expiry is shown as late.
func TestCheckoutPageDetectsPayments(t *testing.T) {
	b := testbrowser.Start(t)
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			c := newChain(t)
			factory := c.deployFactory(t)
			srv := testserver.Start(t, testserver.Options{Dialect: dialect, Env: map[string]string{"VOUCHER_FINANCE_FILE": c.depositFinanceFile(t, factory)}})
			s := newShop(t, srv, "local")

			t.Run("qr payment with no hash", func(t *testing.T) {
				co := s.Checkout(t, "7.25")
				tb := tab(t, b)
				open(t, tb, srv, co)
				var st depositState
				tb.Eval(t, readDeposit, &st)
				want := deposit.ForVoucher(factory, payee, co.id).Hex()
				if st.Status != "awaiting_payment" || st.Address != want {
					t.Fatalf("page %+v, want the deposit address %s", st, want)
				}
				c.PayTo(t, st.Address, 7_250_000)
				c.Commit()
				waitStatus(t, tb, "pending")
				c.Commit()
				waitStatus(t, tb, "confirmed")
				s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 7.25", "deposit.confirmed 7.25")
				shot(t, tb, dialect+"-detected.png")
				// The voucher and the checkout's public view show the
				// deposit (each answer checked against the OpenAPI document).
				var v struct {
					Status   string `json:"status"`
					Receipts []struct {
						TransactionHash string `json:"transactionHash"`
					} `json:"receipts"`
					Deposit struct {
						Address, PayoutAddress string
						Sweep                  struct{ Status string }
					} `json:"deposit"`
					Settlement struct {
						Transactions []struct{ Detected bool } `json:"transactions"`
					} `json:"settlement"`
				}
				r := srv.Do(t, "GET", "/api/v1/vouchers/"+co.id, s.owner.Token, nil)
				r.JSON(t, &v)
				if v.Status != "RESOLVED" || v.Deposit.Address != want || v.Deposit.PayoutAddress != payee.Hex() || v.Deposit.Sweep.Status != "NONE" ||
					len(v.Receipts) != 1 || len(v.Settlement.Transactions) != 1 || !v.Settlement.Transactions[0].Detected {
					t.Fatalf("voucher: %s", r.Body)
				}
				r = srv.Do(t, "GET", "/api/v1/checkout/"+co.token, "", nil)
				if r.Status != 200 || !strings.Contains(string(r.Body), `"deposit":{"address":"`+want+`"`) {
					t.Fatalf("public view: %d %s", r.Status, r.Body)
				}
			})

			t.Run("partial then the rest", func(t *testing.T) {
				co := s.Checkout(t, "10")
				tb := tab(t, b)
				open(t, tb, srv, co)
				var st depositState
				tb.Eval(t, readDeposit, &st)
				c.PayTo(t, st.Address, 4_000_000)
				c.Commit()
				c.Commit()
				waitStatus(t, tb, "pending")
				tb.Run(t, chromedp.WaitVisible(`[data-remaining-line]`))
				tb.Eval(t, readDeposit, &st)
				if st.Remaining != "6" || !st.RemainingShown || !st.PayShown {
					t.Fatalf("after a partial payment the page shows %+v", st)
				}
				askedForTheRest(t, tb, srv, co, st.Address)
				shot(t, tb, dialect+"-partial.png")
				c.PayTo(t, st.Address, 6_000_000)
				c.Commit()
				c.Commit()
				waitStatus(t, tb, "confirmed")
				tb.Eval(t, readDeposit, &st)
				if st.RemainingShown {
					t.Fatalf("confirmed page still shows a remainder: %+v", st)
				}
				s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 4", "deposit.confirmed 10")
			})
		})
	}
	t.Run("late", func(t *testing.T) {
		c := newChain(t)
		factory := c.deployFactory(t)
		srv := testserver.Start(t, testserver.Options{Dialect: testdb.Dialects[0], Env: map[string]string{
			"VOUCHER_FINANCE_FILE": c.depositFinanceFile(t, factory), "VOUCHER_VOUCHER_TTL": "5s", "VOUCHER_SWEEP_INTERVAL": "1s",
		}})
		s := newShop(t, srv, "local")
		co := s.Checkout(t, "3")
		tb := tab(t, b)
		open(t, tb, srv, co)
		var st depositState
		tb.Eval(t, readDeposit, &st)
		waitStatus(t, tb, "expired")
		// Block times are whole seconds: one past expiresAt is after it.
		time.Sleep(1500 * time.Millisecond)
		c.PayTo(t, st.Address, 3_000_000)
		c.Commit()
		waitStatus(t, tb, "pending")
		tb.Run(t, chromedp.WaitVisible(`[data-late]`))
		c.Commit()
		waitStatus(t, tb, "confirmed")
		tb.Eval(t, readDeposit, &st)
		if !st.LateShown {
			t.Fatalf("late payment not shown: %+v", st)
		}
		shot(t, tb, "late.png")
		s.hooks.wait(t, co.id, "deposit.created ", "deposit.pending 3 late", "deposit.confirmed 3 late")
	})
}

// askedForTheRest: after 4 of 10 USDC, the public view, the page's wallet
// link, its QR code (swapped in by the live event) and its wallet button
// ask for the 6 that remain, not for the 10 again.
func askedForTheRest(t *testing.T, tb *testbrowser.Tab, srv *testserver.Server, co checkout, addr string) {
	t.Helper()
	var pub struct {
		CurrencyAddress string `json:"currencyAddress"`
		ChainID         string `json:"chainId"`
		AmountAtomic    string `json:"amountAtomic"`
		RemainingAtomic string `json:"remainingAtomic"`
		PaymentURI      string `json:"paymentUri"`
	}
	r := srv.Do(t, "GET", "/api/v1/checkout/"+co.token, "", nil)
	r.JSON(t, &pub)
	want := "ethereum:" + pub.CurrencyAddress + "@" + pub.ChainID + "/transfer?address=" + addr + "&uint256=6000000"
	if pub.PaymentURI != want || pub.RemainingAtomic != "6000000" || pub.AmountAtomic != "10000000" {
		t.Fatalf("public view after a partial payment: %s, want paymentUri %s", r.Body, want)
	}
	var page struct {
		URI, Href, QR string
		QRWidth       int
		Due           string
	}
	const read = `(() => {
  const a = document.querySelector("[data-payment-uri]"), img = document.querySelector("[data-qr]");
  const d = document.getElementById("checkout").dataset;
  return {URI: a.dataset.paymentUri, Href: a.getAttribute("href"), QR: img.getAttribute("src"),
    QRWidth: img.complete ? img.naturalWidth : 0, Due: d.remainingAtomic || d.amountAtomic};
})()`
	deadline := time.Now().Add(10 * time.Second)
	for {
		tb.Eval(t, read, &page)
		if page.QRWidth > 0 && strings.Contains(page.QR, "/qr.png") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if page.URI != want || page.Href != want || page.Due != "6000000" || !strings.HasPrefix(page.QR, "/checkout/"+co.token+"/qr.png?v=") || page.QRWidth != 256 {
		t.Fatalf("the page after a partial payment: %+v, want %s", page, want)
	}
	res, err := http.Get(srv.URL + page.QR)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	wantPNG, err := checkoutpage.QR(want)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" || !bytes.Equal(got, wantPNG) {
		t.Fatalf("%s: %d %s, %d bytes: not the QR code of %s", page.QR, res.StatusCode, res.Header.Get("Content-Type"), len(got), want)
	}
}
