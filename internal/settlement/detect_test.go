package settlement_test

// Detection on the simulated chain: checkouts with deposit addresses paid
// with no hash handed back, found by the watcher alone, on SQLite and
// PostgreSQL.

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/event"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/widget"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// checkout is a checkout with a deposit address and its token's hash.
type checkout struct {
	v         *ent.Voucher
	tokenHash string
}

func (w *simWorld) checkout(t *testing.T, currency, address, amount string) checkout {
	t.Helper()
	payerP := &auth.Principal{Kind: auth.KindUser}
	u, err := w.db.User.Create().SetEmail(ids.New("p") + "@example.com").SetPasswordHash("x").Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	payerP.ID = u.ID
	sess, err := w.sessions.Create(as(payerP))
	if err != nil {
		t.Fatal(err)
	}
	hash := ids.New("tok")
	v, err := w.vouchers.CreateCheckout(context.Background(), voucher.CheckoutInput{
		BusinessID: w.biz.ID, WidgetID: "wgt_test", SessionID: sess.ID,
		Payment: voucher.PaymentInput{
			Network: "devnet", Currency: currency, CurrencyAddress: address, Amount: amount,
			Wallet: &voucher.WalletInput{Address: payee},
		},
		TokenHash: hash, WatchNetwork: "devnet", DepositFor: widget.DepositFor(w.factory.Hex(), payee),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := deposit.ForVoucher(w.factory, common.HexToAddress(payee), v.ID).Hex()
	if v.Deposit == nil || v.Deposit.Address != want || v.ExpectedPayment.Wallet.Address != want || v.Deposit.PayoutAddress != payee ||
		v.Deposit.Sweep.Status != payment.SweepNone {
		t.Fatalf("checkout deposit %+v, payment %+v; want the deposit address %s", v.Deposit, v.ExpectedPayment, want)
	}
	return checkout{v: v, tokenHash: hash}
}

func (c checkout) addr() string { return c.v.Deposit.Address }

// read is the checkout as every read shows it.
func (w *simWorld) read(t *testing.T, c checkout) *ent.Voucher {
	t.Helper()
	v, err := w.vouchers.Checkout(context.Background(), c.tokenHash)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// payload is one stored event's payload.
type payload struct {
	Type string `json:"type"`
	Data struct {
		PaidAmount string `json:"paidAmount"`
		Late       bool   `json:"late"`
	} `json:"data"`
}

func (w *simWorld) payloads(t *testing.T, id string) []payload {
	t.Helper()
	evs, err := w.db.Event.Query().Where(event.VoucherID(id)).Order(ent.Asc(event.FieldCreatedAt), ent.Asc(event.FieldID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]payload, len(evs))
	for i, ev := range evs {
		if err := json.Unmarshal(ev.Payload, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// expect checks the checkout's status, settlement and events (as a
// multiset, after deposit.created).
func (w *simWorld) expect(t *testing.T, c checkout, status entvoucher.Status, settled, paid string, events ...string) *ent.Voucher {
	t.Helper()
	v := w.read(t, c)
	if v.Status != status {
		t.Fatalf("status %s, want %s (settlement %+v)", v.Status, status, v.Settlement)
	}
	switch {
	case settled == "" && v.Settlement != nil:
		t.Fatalf("settlement %+v, want none", v.Settlement)
	case settled != "" && (v.Settlement == nil || v.Settlement.Status != settled || v.Settlement.PaidAmount != paid):
		t.Fatalf("settlement %+v, want %s paid %q", v.Settlement, settled, paid)
	}
	var got []string
	for _, p := range w.payloads(t, v.ID) {
		got = append(got, p.Type)
	}
	want := append([]string{webhook.DepositCreated}, events...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	return v
}

func TestDetectionOnSimulatedChain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSimWorldWith(t, db, true)
		run := func(name string, fn func(t *testing.T)) {
			t.Run(name, func(t *testing.T) { w.env.t = t; fn(t) })
		}
		usdc := w.usdc.Hex()

		run("qr_payment_detected_with_no_hash", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "7.25")
			h := w.transfer(t, w.payer, w.usdc, c.addr(), "7.25", 6)
			w.poll() // in the pool, not mined: nothing yet
			w.expect(t, c, entvoucher.StatusREDEEMED, "", "")
			w.blocks(1)
			v := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "7.25", settlement.EventPending)
			tx := v.Settlement.Transactions[0]
			if len(v.Settlement.Transactions) != 1 || tx.TransactionHash != strings.ToLower(h) || !tx.Detected || tx.Late || tx.Status != payment.TxMined {
				t.Fatalf("detected %+v", v.Settlement.Transactions)
			}
			if len(v.Receipts) != 1 || v.Receipts[0].TransactionHash != strings.ToLower(h) || v.LiveCode != nil {
				t.Fatalf("resolved as submit-payment would: receipts %+v live code %v", v.Receipts, v.LiveCode)
			}
			w.blocks(required - 1)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "7.25", settlement.EventPending, settlement.EventConfirmed)
			// Decided; further blocks change nothing.
			w.blocks(2)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "7.25", settlement.EventPending, settlement.EventConfirmed)
		})

		run("same_amount_paid_in_reverse_order", func(t *testing.T) {
			a := w.checkout(t, "USDC", usdc, "5")
			b := w.checkout(t, "USDC", usdc, "5")
			hb := w.transfer(t, w.payer, w.usdc, b.addr(), "5", 6)
			w.blocks(1)
			w.expect(t, a, entvoucher.StatusREDEEMED, "", "")
			w.expect(t, b, entvoucher.StatusRESOLVED, payment.SettlementPending, "5", settlement.EventPending)
			ha := w.transfer(t, w.other, w.usdc, a.addr(), "5", 6)
			w.blocks(required)
			va := w.expect(t, a, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "5", settlement.EventPending, settlement.EventConfirmed)
			vb := w.expect(t, b, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "5", settlement.EventPending, settlement.EventConfirmed)
			if va.Settlement.Transactions[0].TransactionHash != strings.ToLower(ha) || vb.Settlement.Transactions[0].TransactionHash != strings.ToLower(hb) {
				t.Fatalf("each checkout claims its own payment: a %+v b %+v", va.Settlement.Transactions, vb.Settlement.Transactions)
			}
		})

		run("split_payment_waits_for_the_sum", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "10")
			w.transfer(t, w.payer, w.usdc, c.addr(), "4", 6)
			w.blocks(required + 1)
			// Confirmed but short, the checkout still open: no verdict.
			v := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "4", settlement.EventPending)
			if v.Settlement.Transactions[0].Status != payment.TxConfirmed {
				t.Fatalf("first part %+v", v.Settlement.Transactions[0])
			}
			st := w.widgetState(t, c)
			if st.Remaining != "6" || st.Status != widget.StatusPending {
				t.Fatalf("the page: status %s remaining %q", st.Status, st.Remaining)
			}
			w.transfer(t, w.payer, w.usdc, c.addr(), "6", 6)
			w.blocks(required)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "10", settlement.EventPending, settlement.EventConfirmed)
		})

		run("overpaid", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "3")
			w.transfer(t, w.payer, w.usdc, c.addr(), "3.5", 6)
			w.blocks(required)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementOverpaid, "3.5", settlement.EventPending, settlement.EventOverpaid)
		})

		run("underpaid_at_expiry", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "8")
			w.transfer(t, w.payer, w.usdc, c.addr(), "2", 6)
			w.blocks(required)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "2", settlement.EventPending)
			w.later(t, time.Hour) // the voucher TTL
			w.blocks(1)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementUnderpaid, "2", settlement.EventPending, settlement.EventUnderpaid)
		})

		run("decoy_token_is_not_a_payment", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "4")
			w.transfer(t, w.payer, w.decoy, c.addr(), "4", 6)
			w.transfer(t, w.payer, w.daiTk, c.addr(), "4", 18)
			w.blocks(required)
			w.expect(t, c, entvoucher.StatusREDEEMED, "", "")
		})

		run("native_currency", func(t *testing.T) {
			c := w.checkout(t, "ETH", "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "0.25")
			to := common.HexToAddress(c.addr())
			w.send(t, w.payer, &to, units("0.25", 18), nil)
			w.blocks(1)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "0.25", settlement.EventPending)
			w.blocks(required - 1)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "0.25", settlement.EventPending, settlement.EventConfirmed)
		})

		run("hash_submitted_for_a_detected_payment", func(t *testing.T) {
			// Detected first, then submitted.
			c := w.checkout(t, "USDC", usdc, "1.5")
			h := w.transfer(t, w.payer, w.usdc, c.addr(), "1.5", 6)
			w.blocks(1)
			if _, err := w.vouchers.SubmitCheckoutPayment(context.Background(), c.tokenHash, h); err != nil {
				t.Fatal(err)
			}
			w.blocks(required)
			v := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "1.5", settlement.EventPending, settlement.EventConfirmed)
			if len(v.Settlement.Transactions) != 1 {
				t.Fatalf("counted twice: %+v", v.Settlement.Transactions)
			}
			// Submitted first, then found by the watcher.
			c = w.checkout(t, "USDC", usdc, "1.5")
			h = w.transfer(t, w.payer, w.usdc, c.addr(), "1.5", 6)
			if _, err := w.vouchers.SubmitCheckoutPayment(context.Background(), c.tokenHash, h); err != nil {
				t.Fatal(err)
			}
			w.blocks(required)
			v = w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "1.5", settlement.EventPending, settlement.EventConfirmed)
			if len(v.Settlement.Transactions) != 1 || v.Settlement.Transactions[0].Detected {
				t.Fatalf("counted twice, or not as the receipt: %+v", v.Settlement.Transactions)
			}
		})

		run("late_payment_after_expiry", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "6")
			w.later(t, time.Hour+time.Minute)
			if _, err := w.vouchers.SweepExpired(context.Background()); err != nil {
				t.Fatal(err)
			}
			w.expect(t, c, entvoucher.StatusDISCARDED, "", "", webhook.DepositExpired)
			w.transfer(t, w.payer, w.usdc, c.addr(), "6", 6)
			w.blocks(1)
			v := w.expect(t, c, entvoucher.StatusDISCARDED, payment.SettlementPending, "6", webhook.DepositExpired, settlement.EventPending)
			if !v.Settlement.Transactions[0].Late || !v.Settlement.Transactions[0].Detected {
				t.Fatalf("late payment %+v", v.Settlement.Transactions[0])
			}
			if st := w.widgetState(t, c); st.Status != widget.StatusPending {
				t.Fatalf("the page shows %s for a late payment", st.Status)
			}
			w.blocks(required)
			w.expect(t, c, entvoucher.StatusDISCARDED, payment.SettlementConfirmed, "6", webhook.DepositExpired, settlement.EventPending, settlement.EventConfirmed)
			for _, p := range w.payloads(t, c.v.ID) {
				if late := p.Type == settlement.EventPending || p.Type == settlement.EventConfirmed; p.Data.Late != late {
					t.Fatalf("%s: data.late %v", p.Type, p.Data.Late)
				}
			}
		})

		run("reorg_undoes_a_detection", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "3")
			parent, err := w.sim.Client.HeaderByNumber(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			h := w.transfer(t, w.payer, w.usdc, c.addr(), "3", 6)
			w.blocks(1)
			w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "3", settlement.EventPending)
			tx, _, err := w.sim.Client.TransactionByHash(context.Background(), common.HexToHash(h))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.sim.Fork(parent.Hash()); err != nil {
				t.Fatal(err)
			}
			w.sim.Rollback()
			// The payer spends the payment's nonce elsewhere on the fork.
			other := common.HexToAddress(stranger)
			if _, err := testchain.SendNonce(context.Background(), w.sim.Client, w.payer, tx.Nonce(), &other, big.NewInt(1), nil, 21000); err != nil {
				t.Fatal(err)
			}
			w.blocks(required + 2)
			v := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "", settlement.EventPending)
			if v.Settlement.Transactions[0].Status != payment.TxPending {
				t.Fatalf("after the reorg %+v", v.Settlement.Transactions[0])
			}
		})
	})
}

func (w *simWorld) widgetState(t *testing.T, c checkout) *widget.PublicState {
	t.Helper()
	ws, err := widget.NewService(w.db, widget.Options{Vouchers: w.vouchers, Finance: w.fin})
	if err != nil {
		t.Fatal(err)
	}
	return ws.PublicOf(w.read(t, c), "Shop")
}

// Detection's cost: with many open deposit addresses, a new block is at
// most three round trips (head, the scan, the found transactions).
var _ settlement.Scanner = nil

// simSweeper flushes deposit addresses on the simulated chain with the
// factory's flushMany, sent from an account that only pays gas, and reads
// what moved from the Flushed logs (what the sweep key's sender does).
type simSweeper struct {
	w        *simWorld
	fail     atomic.Bool // Send refuses (a node error, no gas)
	failures atomic.Int64
	sent     atomic.Int64
}

func (s *simSweeper) MaxBatch() int { return 30 }

func (s *simSweeper) Send(ctx context.Context, orders []settlement.SweepOrder) (string, error) {
	if s.fail.Load() {
		return "", errors.New("insufficient funds for gas")
	}
	fs := make([]deposit.Flush, len(orders))
	for i, o := range orders {
		fs[i] = deposit.Flush{Payout: common.HexToAddress(o.Payout), Salt: deposit.Salt(o.VoucherID), Token: common.HexToAddress(o.Token)}
	}
	h, err := testchain.Send(ctx, s.w.sim.Client, s.w.other, &s.w.factory, nil, deposit.FlushManyData(fs), uint64(100_000+600_000*len(fs)))
	if err != nil {
		return "", err
	}
	s.sent.Add(1)
	return h.Hex(), nil
}

func (s *simSweeper) Outcome(ctx context.Context, h string) (settlement.SweepOutcome, error) {
	r, err := s.w.sim.Client.TransactionReceipt(ctx, common.HexToHash(h))
	if err != nil {
		return settlement.SweepOutcome{}, nil // not mined yet
	}
	if r.Status != 1 {
		return settlement.SweepOutcome{}, settlement.ErrSweepFailed
	}
	out := settlement.SweepOutcome{Mined: true, Moved: map[string]*big.Int{}}
	for _, l := range r.Logs {
		if l.Address == s.w.factory && len(l.Topics) == 4 && l.Topics[0] == deposit.FlushedTopic {
			out.Moved[strings.ToLower(common.BytesToAddress(l.Topics[1].Bytes()).Hex())] = new(big.Int).SetBytes(l.Data)
		}
	}
	return out, nil
}

func (w *simWorld) sweep(t *testing.T) {
	t.Helper()
	if err := w.settle.Sweep(context.Background(), "devnet"); err != nil {
		t.Fatal(err)
	}
}

func (w *simWorld) balanceOf(t *testing.T, tk, who common.Address) *big.Int {
	t.Helper()
	data, err := testchain.TokenABI.Pack("balanceOf", who)
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.sim.Client.CallContract(context.Background(), ethereum.CallMsg{To: &tk, Data: data}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return new(big.Int).SetBytes(out)
}

func TestSweepOnSimulatedChain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSimWorldWith(t, db, true)
		w.env.t = t
		usdc := w.usdc.Hex()
		payout := common.HexToAddress(payee)
		before := w.balanceOf(t, w.usdc, payout)

		c := w.checkout(t, "USDC", usdc, "2.5")
		w.transfer(t, w.payer, w.usdc, c.addr(), "2.5", 6)
		w.blocks(1)
		w.sweep(t) // no verdict yet: nothing to sweep
		if v := w.read(t, c); v.Deposit.Sweep.Status != payment.SweepNone || w.sweeper.sent.Load() != 0 {
			t.Fatalf("swept before the verdict: %+v", v.Deposit.Sweep)
		}
		w.blocks(required)
		w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "2.5", settlement.EventPending, settlement.EventConfirmed)
		if v := w.read(t, c); v.Deposit.Sweep.Status != payment.SweepPending {
			t.Fatalf("a verdict makes the sweep due: %+v", v.Deposit.Sweep)
		}

		// A failed send: FAILED, counted, the funds where they were.
		w.sweeper.fail.Store(true)
		w.sweep(t)
		v := w.read(t, c)
		if v.Deposit.Sweep.Status != payment.SweepFailed || w.sweeper.failures.Load() != 1 {
			t.Fatalf("failed sweep: %+v (failures %d)", v.Deposit.Sweep, w.sweeper.failures.Load())
		}
		if got := w.balanceOf(t, w.usdc, common.HexToAddress(c.addr())); got.Cmp(units("2.5", 6)) != 0 {
			t.Fatalf("deposit address holds %s after a failed sweep", got)
		}
		// Retried after its backoff: sent, then DONE once mined.
		w.sweeper.fail.Store(false)
		w.later(t, time.Hour)
		w.sweep(t)
		v = w.read(t, c)
		if v.Deposit.Sweep.Status != payment.SweepPending || v.Deposit.Sweep.InFlight == "" {
			t.Fatalf("sweep in flight: %+v", v.Deposit.Sweep)
		}
		w.sim.Commit()
		w.sweep(t)
		v = w.read(t, c)
		if v.Deposit.Sweep.Status != payment.SweepDone || v.Deposit.Sweep.Amount != "2.5" || v.Deposit.Sweep.TransactionHash == "" || v.SweepNetwork != nil {
			t.Fatalf("sweep done: %+v (watched %v)", v.Deposit.Sweep, v.SweepNetwork)
		}
		if got := new(big.Int).Sub(w.balanceOf(t, w.usdc, payout), before); got.Cmp(units("2.5", 6)) != 0 {
			t.Fatalf("the payout received %s, want 2.5 USDC", got)
		}
		// A later payment to the same address: recorded, a new verdict,
		// swept again.
		w.transfer(t, w.other, w.usdc, c.addr(), "1", 6)
		w.blocks(required)
		v = w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementOverpaid, "3.5", settlement.EventPending, settlement.EventConfirmed, settlement.EventOverpaid)
		if v.Deposit.Sweep.Status != payment.SweepPending {
			t.Fatalf("a later payment makes a sweep due: %+v", v.Deposit.Sweep)
		}
		w.sweep(t)
		w.sim.Commit()
		w.sweep(t)
		v = w.read(t, c)
		if v.Deposit.Sweep.Status != payment.SweepDone || v.Deposit.Sweep.Amount != "1" || v.SweepNetwork != nil {
			t.Fatalf("second sweep: %+v", v.Deposit.Sweep)
		}
		if got := new(big.Int).Sub(w.balanceOf(t, w.usdc, payout), before); got.Cmp(units("3.5", 6)) != 0 {
			t.Fatalf("the payout received %s, want 3.5 USDC", got)
		}
	})
}
