package settlement_test

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/ent/event"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Mainnet addresses of the default registry; the chain is fake, so they
// only have to be what the registry says.
const (
	usdc        = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"
	usdcChecked = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	dai         = "0x6b175474e89094c44da98b954eedeac495271d0f"
	daiChecked  = "0x6B175474E89094C44Da98b954EedeAC495271d0F"
	nativeEVM   = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"
	payee       = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	payer       = "0x1111111111111111111111111111111111111111"
	stranger    = "0x2222222222222222222222222222222222222222"
	required    = 3
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// published records what reaches voucherUpdated's path.
type published struct {
	mu      sync.Mutex
	changes []pubsub.VoucherChange
}

func (p *published) Publish(c pubsub.VoucherChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes = append(p.changes, c)
}

func (p *published) settlementsOf(id string) []*payment.Settlement {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*payment.Settlement
	for _, c := range p.changes {
		if c.ID == id && c.Voucher != nil {
			out = append(out, c.Voucher.Settlement)
		}
	}
	return out
}

type env struct {
	t        testing.TB
	network  string
	db       *storage.DB
	chain    *fakeChain
	clock    *clock
	fin      *finance.Service
	sessions *session.Service
	vouchers *voucher.Service
	settle   *settlement.Service
	pub      *published
	outbox   *webhook.Outbox
	member   *auth.Principal
	biz      *ent.Business
	// confirmations is the network's required count.
	confirmations int
}

var hashes atomic.Int64

func newHash() string { return fmt.Sprintf("0x%064x", hashes.Add(1)+0xabc000) }

func newEnv(t testing.TB, db *storage.DB, chain *fakeChain) *env {
	t.Helper()
	fin, err := finance.New(finance.Default())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, db, fin, "ethereum", chain)
	e.chain = chain
	return e
}

// newEnvOn is an env whose network is verified on c.
func newEnvOn(t testing.TB, db *storage.DB, fin *finance.Service, network string, c settlement.Chain, opts ...func(*settlement.Options)) *env {
	t.Helper()
	return newEnvConfirming(t, db, fin, network, c, required, opts...)
}

// newEnvConfirming is newEnvOn with another confirmation count.
func newEnvConfirming(t testing.TB, db *storage.DB, fin *finance.Service, network string, c settlement.Chain, confirmations int, opts ...func(*settlement.Options)) *env {
	t.Helper()
	e := &env{t: t, db: db, network: network, fin: fin, clock: &clock{t: time.Now().UTC()}, pub: &published{}, confirmations: confirmations}
	var err error
	outbox := webhook.NewOutbox(db, webhook.OutboxOptions{View: func(v *ent.Voucher) any { return view.OfVoucher(v) }, Now: e.clock.Now})
	e.outbox = outbox
	so := settlement.Options{
		Networks: []settlement.Network{{Name: network, Chain: c, Confirmations: confirmations}},
		Events:   outbox, Publisher: e.pub, Now: e.clock.Now,
	}
	for _, o := range opts {
		o(&so)
	}
	e.settle, err = settlement.NewService(db, e.fin.Registry(), so)
	if err != nil {
		t.Fatal(err)
	}
	e.sessions = session.NewService(db, time.Hour, e.clock.Now)
	e.vouchers, err = voucher.NewService(db, voucher.Options{
		Finance: e.fin, Sessions: e.sessions, Now: e.clock.Now, TTL: time.Hour,
		Events: outbox, Publisher: e.pub, Settlement: e.settle,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u, err := db.User.Create().SetEmail(ids.New("u") + "@example.com").SetPasswordHash("x").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.member = &auth.Principal{Kind: auth.KindUser, ID: u.ID}
	if e.biz, err = db.Business.Create().SetName("Shop").SetStatus(business.StatusACTIVE).Save(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.BusinessUser.Create().SetBusinessID(e.biz.ID).SetUserID(u.ID).
		SetRole(businessuser.RoleOWNER).SetStatus(businessuser.StatusACTIVE).Save(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func as(p *auth.Principal) context.Context { return auth.WithPrincipal(context.Background(), p) }

// deal is a redeemed business voucher and its payer.
type deal struct {
	v     *ent.Voucher
	payer *auth.Principal
}

func tokenBody(network, currency, address, amount string) voucher.RedeemInput {
	return voucher.RedeemInput{ExpectedPayment: &voucher.PaymentInput{
		Network: network, Currency: currency, CurrencyAddress: address, Amount: amount,
		Wallet: &voucher.WalletInput{Address: payee},
	}}
}

func (e *env) redeemed(body voucher.RedeemInput) deal {
	e.t.Helper()
	payerP := &auth.Principal{Kind: auth.KindUser, ID: ids.New(ids.User)}
	u, err := e.db.User.Create().SetEmail(ids.New("p") + "@example.com").SetPasswordHash("x").Save(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	payerP.ID = u.ID
	s, err := e.sessions.Create(as(payerP))
	if err != nil {
		e.t.Fatal(err)
	}
	bid := e.biz.ID
	v, err := e.vouchers.Reserve(as(e.member), voucher.ReserveInput{Code: s.Code, BusinessID: &bid})
	if err != nil {
		e.t.Fatal(err)
	}
	if v, err = e.vouchers.Redeem(as(e.member), v.ID, body); err != nil {
		e.t.Fatal(err)
	}
	return deal{v: v, payer: payerP}
}

func (e *env) resolve(d deal, hashes ...string) (*ent.Voucher, error) {
	pid := ""
	if d.v.ExpectedPayment != nil {
		pid = d.v.ExpectedPayment.ID
	} else {
		pid = d.v.Payments[0].ID
	}
	in := voucher.ResolveInput{Receipts: []voucher.ReceiptInput{}}
	for _, h := range hashes {
		in.Receipts = append(in.Receipts, voucher.ReceiptInput{PaymentID: pid, TransactionHash: &h})
	}
	return e.vouchers.Resolve(as(d.payer), d.v.ID, in)
}

func (e *env) mustResolve(d deal, hashes ...string) *ent.Voucher {
	e.t.Helper()
	v, err := e.resolve(d, hashes...)
	if err != nil {
		e.t.Fatal(err)
	}
	if v.Status != entvoucher.StatusRESOLVED || v.Settlement == nil || !v.Settlement.Verified ||
		v.Settlement.Status != payment.SettlementPending || v.Settlement.RequiredConfirmations != e.confirmations {
		e.t.Fatalf("resolved %+v with settlement %+v", v, v.Settlement)
	}
	return v
}

func (e *env) poll() {
	e.t.Helper()
	if err := e.settle.Poll(context.Background(), e.network); err != nil {
		e.t.Fatal(err)
	}
}

// stored reads the voucher back through the voucher service (the REST
// door's read).
func (e *env) stored(d deal) *ent.Voucher {
	e.t.Helper()
	v, err := e.vouchers.Get(as(d.payer), d.v.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if v.Status != entvoucher.StatusRESOLVED {
		e.t.Fatalf("settlement changed the voucher's status to %s", v.Status)
	}
	return v
}

func (e *env) events(d deal) []string {
	e.t.Helper()
	evs, err := e.db.Event.Query().Where(event.VoucherID(d.v.ID)).Order(ent.Asc(event.FieldID)).All(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// want checks the stored settlement and the voucher's events (after
// deposit.created, which redeem wrote).
func (e *env) want(d deal, status, paid string, events ...string) *payment.Settlement {
	e.t.Helper()
	v := e.stored(d)
	st := v.Settlement
	if st == nil || st.Status != status || st.PaidAmount != paid {
		e.t.Fatalf("settlement %+v, want status %s paid %q", st, status, paid)
	}
	// Events written in one transaction share a timestamp, so their
	// order is not stored: compare them as a multiset.
	got := e.events(d)
	want := append([]string{webhook.DepositCreated}, events...)
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		e.t.Fatalf("events %v, want %v", got, want)
	}
	if final := st.Status != payment.SettlementPending; final != (v.SettlementNetwork == nil) {
		e.t.Fatalf("settlement %s but watched on %v", st.Status, v.SettlementNetwork)
	}
	return st
}

func credit(asset, to string, amount *big.Int) settlement.Credit {
	return settlement.Credit{Asset: asset, From: payer, To: to, Amount: amount}
}

func tokenTx(hash string, credits ...settlement.Credit) settlement.Tx {
	return settlement.Tx{Hash: hash, Success: true, From: payer, To: usdc, Value: new(big.Int), Credits: credits}
}

func TestExactPaymentConfirmsAfterNBlocksAndNotBefore(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		h := newHash()
		e.mustResolve(d, strings.ToUpper(h[:2])[:1]+"x"+strings.ToUpper(h[2:])) // hex case does not matter
		e.want(d, payment.SettlementPending, "")

		e.poll() // not mined yet
		e.want(d, payment.SettlementPending, "")

		block := e.chain.mine(tokenTx(h, credit(usdc, strings.ToLower(payee), units("10", 6))))
		e.poll()
		st := e.want(d, payment.SettlementPending, "10", settlement.EventPending)
		tx := st.Transactions[0]
		if tx.TransactionHash != h || tx.Status != payment.TxMined || tx.Confirmations != 1 || *tx.BlockNumber != int64(block) || tx.Amount != "10" {
			t.Fatalf("transaction %+v", tx)
		}
		e.chain.advance(required - 2) // head − block + 1 = required − 1
		e.poll()
		if st := e.want(d, payment.SettlementPending, "10", settlement.EventPending); st.Confirmations != required-1 {
			t.Fatalf("confirmations %d", st.Confirmations)
		}
		e.chain.advance(1)
		e.poll()
		st = e.want(d, payment.SettlementConfirmed, "10", settlement.EventPending, settlement.EventConfirmed)
		if st.Confirmations != required || st.Transactions[0].Status != payment.TxConfirmed || st.Currency != "USDC" {
			t.Fatalf("settlement %+v", st)
		}
		// A decided settlement is not watched any more: no further events.
		e.chain.advance(5)
		e.poll()
		e.want(d, payment.SettlementConfirmed, "10", settlement.EventPending, settlement.EventConfirmed)

		// Each change went to voucherUpdated's path with the settlement.
		var statuses []string
		for _, s := range e.pub.settlementsOf(d.v.ID) {
			if s != nil {
				statuses = append(statuses, fmt.Sprintf("%s/%d", s.Status, s.Confirmations))
			}
		}
		if got := strings.Join(statuses, " "); got != "PENDING/0 PENDING/1 PENDING/2 CONFIRMED/3" {
			t.Fatalf("published settlements %s", got)
		}
		// The REST view shows the public fields only.
		rv := view.OfVoucher(e.stored(d))
		if rv.Settlement == nil || rv.Settlement.Status != "CONFIRMED" || rv.Settlement.Transactions[0].TransactionHash != h {
			t.Fatalf("view %+v", rv.Settlement)
		}
	})
}

// A block made between a poll's head round trip and its transactions
// round trip holds the payment: it counts one confirmation, never 0 (seen
// on the real binary against the simulated chain).
func TestBlockMadeMidPollCountsOneConfirmation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		h := newHash()
		e.mustResolve(d, h)
		var block uint64
		e.chain.afterHead = func() { block = e.chain.mine(tokenTx(h, credit(usdc, payee, units("10", 6)))) }
		e.poll()
		st := e.want(d, payment.SettlementPending, "10", settlement.EventPending)
		if tx := st.Transactions[0]; tx.Status != payment.TxMined || tx.Confirmations != 1 || st.Confirmations != 1 || *tx.BlockNumber != int64(block) {
			t.Fatalf("settlement %+v, transaction %+v", st, tx)
		}
	})
}

// TestWhatPays runs each payment rule on its own voucher.
func TestWhatPays(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		usdcDeal := func(amount string) deal { return e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, amount)) }
		cases := []struct {
			name   string
			deal   func() deal
			txs    []func(h string, d deal) settlement.Tx
			status string
			paid   string
			reason string
			events []string
		}{
			{name: "decoy token with the same symbol", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return tokenTx(h, credit("0x9999999999999999999999999999999999999999", payee, units("10", 6)))
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonNoTransfer, events: []string{settlement.EventFailed}},
			{name: "transfer to another wallet", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return tokenTx(h, credit(usdc, stranger, units("10", 6)))
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonNoTransfer, events: []string{settlement.EventFailed}},
			{name: "underpaid", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return tokenTx(h, credit(usdc, payee, units("9.99", 6)))
				}},
				status: payment.SettlementUnderpaid, paid: "9.99", events: []string{settlement.EventPending, settlement.EventUnderpaid}},
			{name: "overpaid", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return tokenTx(h, credit(usdc, payee, units("10.5", 6)), credit("0x9999999999999999999999999999999999999999", payee, units("1000", 6)))
				}},
				status: payment.SettlementOverpaid, paid: "10.5", events: []string{settlement.EventPending, settlement.EventOverpaid}},
			{name: "split payment adds up", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{
					func(h string, _ deal) settlement.Tx { return tokenTx(h, credit(usdc, payee, units("4", 6))) },
					func(h string, _ deal) settlement.Tx {
						// two Transfer logs in one transaction add up too
						return tokenTx(h, credit(usdc, payee, units("3", 6)), credit(usdc, payee, units("3", 6)))
					},
				},
				status: payment.SettlementConfirmed, paid: "10", events: []string{settlement.EventPending, settlement.EventConfirmed}},
			{name: "reverted", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					tx := tokenTx(h, credit(usdc, payee, units("10", 6)))
					tx.Success = false
					return tx
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonReverted, events: []string{settlement.EventFailed}},
			{name: "mined before the voucher was reserved", deal: func() deal { return usdcDeal("10") },
				txs: []func(string, deal) settlement.Tx{func(h string, d deal) settlement.Tx {
					tx := tokenTx(h, credit(usdc, payee, units("10", 6)))
					tx.BlockTime = d.v.CreatedAt.Add(-time.Hour)
					return tx
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonBeforeReserved, events: []string{settlement.EventFailed}},
			{name: "native currency", deal: func() deal { return e.redeemed(tokenBody("ethereum", "ETH", nativeEVM, "0.5")) },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return settlement.Tx{Hash: h, Success: true, From: payer, To: strings.ToLower(payee), Value: units("0.5", 18),
						Credits: []settlement.Credit{credit(settlement.Native, payee, units("0.5", 18))}}
				}},
				status: payment.SettlementConfirmed, paid: "0.5", events: []string{settlement.EventPending, settlement.EventConfirmed}},
			{name: "native currency to another address", deal: func() deal { return e.redeemed(tokenBody("ethereum", "ETH", nativeEVM, "0.5")) },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return settlement.Tx{Hash: h, Success: true, From: payer, To: stranger, Value: units("0.5", 18),
						Credits: []settlement.Credit{credit(settlement.Native, stranger, units("0.5", 18))}}
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonNoTransfer, events: []string{settlement.EventFailed}},
			{name: "after negotiation the sender must be the supplied wallet", deal: func() deal { return e.negotiated() },
				txs: []func(string, deal) settlement.Tx{func(h string, d deal) settlement.Tx {
					tx := tokenTx(h, credit(dai, payee, daiUnits(d)))
					tx.From = stranger
					return tx
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonWrongSender, events: []string{settlement.EventFailed}},
			{name: "after negotiation the supplied token from the supplied wallet pays", deal: func() deal { return e.negotiated() },
				txs: []func(string, deal) settlement.Tx{func(h string, d deal) settlement.Tx {
					// USDC (the expected token) no longer counts: DAI is due.
					return tokenTx(h, credit(dai, payee, daiUnits(d)), credit(usdc, payee, units("10", 6)))
				}},
				status: payment.SettlementConfirmed, paid: "negotiated", events: []string{settlement.EventPending, settlement.EventConfirmed}},
			{name: "CUSTOM match", deal: func() deal { return e.custom() },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return settlement.Tx{Hash: h, Success: true, From: payer, To: usdc, Value: big.NewInt(0), Data: []byte{0xa9, 0x05, 0x9c, 0xbb}}
				}},
				status: payment.SettlementConfirmed, events: []string{settlement.EventPending, settlement.EventConfirmed}},
			{name: "CUSTOM mismatch", deal: func() deal { return e.custom() },
				txs: []func(string, deal) settlement.Tx{func(h string, _ deal) settlement.Tx {
					return settlement.Tx{Hash: h, Success: true, From: payer, To: usdc, Value: big.NewInt(0), Data: []byte{0xa9, 0x05, 0x9c, 0xbc}}
				}},
				status: payment.SettlementFailed, reason: settlement.ReasonCustomMismatch, events: []string{settlement.EventFailed}},
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				e.t = t
				d := c.deal()
				var hs []string
				for range c.txs {
					hs = append(hs, newHash())
				}
				e.mustResolve(d, hs...)
				for i, mk := range c.txs {
					e.chain.mine(mk(hs[i], d))
					e.poll()
				}
				e.chain.advance(required)
				e.poll()
				want := c.paid
				if want == "negotiated" {
					want = e.stored(d).SuppliedPayment.Amount
				}
				st := e.want(d, c.status, want, c.events...)
				if c.reason != "" && (st.Transactions[0].Status != payment.TxInvalid || st.Transactions[0].Reason != c.reason) {
					t.Fatalf("transaction %+v, want INVALID: %s", st.Transactions[0], c.reason)
				}
			})
		}
	})
}

// negotiated is a USDC voucher the payer negotiated into DAI from payer.
func (e *env) negotiated() deal {
	e.t.Helper()
	d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
	v, err := e.vouchers.Negotiate(as(d.payer), d.v.ID, voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{
		Network: "ethereum", Currency: "DAI", CurrencyAddress: daiChecked, Amount: "1", Wallet: &voucher.WalletInput{Address: payer},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	d.v = v
	return d
}

func daiUnits(d deal) *big.Int { return units(d.v.SuppliedPayment.Amount, 18) }

func (e *env) custom() deal {
	return e.redeemed(voucher.RedeemInput{
		Networks: []voucher.NetworkInput{{Network: "ethereum", Type: "evm", ChainID: "1"}},
		Payments: []voucher.CustomPaymentInput{{Type: "send_transaction", Input: &voucher.TransactionInputInput{
			From: "{payer}", To: usdcChecked, Value: "0", Data: "0xA9059CBB",
		}}},
	})
}

func TestResolveChecks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		first := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		h := newHash()
		e.mustResolve(first, h)

		second := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		for name, hs := range map[string][]string{
			"claimed by another voucher":            {h},
			"claimed, another spelling":             {"0x" + strings.ToUpper(h[2:])},
			"malformed":                             {"0xabc"},
			"not hex":                               {"0x" + strings.Repeat("g", 64)},
			"missing":                               {""},
			"twice in one resolve":                  {newHash() + "", ""},
			"a good one then one claimed elsewhere": {newHash(), h},
		} {
			if name == "twice in one resolve" {
				x := newHash()
				hs = []string{x, x}
			}
			_, err := e.resolve(second, hs...)
			if apperr.CodeOf(err) != apperr.ValidationFailed {
				t.Fatalf("%s: want validation_failed, got %v", name, err)
			}
			if !strings.Contains(fmt.Sprint(apperr.From(err).Details), "transactionHash") {
				t.Fatalf("%s: details %v", name, apperr.From(err).Details)
			}
			v, err := e.vouchers.Get(as(second.payer), second.v.ID)
			if err != nil || v.Status != entvoucher.StatusREDEEMED || v.Settlement != nil || v.Version != second.v.Version {
				t.Fatalf("%s: a refused resolve changed the voucher: %+v", name, v)
			}
		}
		n, err := db.SettlementClaim.Query().Count(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("claims %d %v", n, err)
		}
		// The first voucher's claim stands; the second resolves with its own.
		e.mustResolve(second, newHash())
	})
}

// A receipt whose transaction never shows up fails after the window.
func TestFabricatedHashFailsAfterWindow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		e.mustResolve(d, newHash())
		e.chain.advance(10)
		e.clock.Add(settlement.DefaultWindow - time.Second)
		e.poll()
		e.want(d, payment.SettlementPending, "")
		e.clock.Add(time.Second)
		e.poll()
		st := e.want(d, payment.SettlementFailed, "", settlement.EventFailed)
		if st.Transactions[0].Status != payment.TxInvalid || st.Transactions[0].Reason != settlement.ReasonWindow {
			t.Fatalf("transaction %+v", st.Transactions[0])
		}
	})
}

// A reorg before confirmation sends the payment back to PENDING; it never
// confirms from the dropped block.
func TestReorgBeforeConfirmation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		h := newHash()
		e.mustResolve(d, h)
		tx := tokenTx(h, credit(usdc, payee, units("10", 6)))
		block := e.chain.mine(tx)
		e.chain.advance(required - 2)
		e.poll()
		e.want(d, payment.SettlementPending, "10", settlement.EventPending)

		e.chain.reorg(block) // the fork does not hold the payment
		e.chain.advance(required + 2)
		e.poll()
		st := e.want(d, payment.SettlementPending, "", settlement.EventPending)
		if st.Transactions[0].Status != payment.TxPending || st.Transactions[0].BlockNumber != nil {
			t.Fatalf("after the reorg %+v", st.Transactions[0])
		}
		// Mined again on the new chain, it confirms from there, once.
		again := e.chain.mine(tx)
		e.chain.advance(required - 1)
		e.poll()
		st = e.want(d, payment.SettlementConfirmed, "10", settlement.EventPending, settlement.EventConfirmed)
		if *st.Transactions[0].BlockNumber != int64(again) {
			t.Fatalf("confirmed in block %d, want %d", *st.Transactions[0].BlockNumber, again)
		}
	})
}

// While the node is down nothing is recorded; once it is back every event
// comes, once.
func TestRPCDownAndBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "10"))
		h := newHash()
		e.mustResolve(d, h)
		e.chain.mine(tokenTx(h, credit(usdc, payee, units("10", 6))))
		e.chain.setDown(true)
		for i := 0; i < 3; i++ {
			if err := e.settle.Poll(context.Background(), "ethereum"); err == nil {
				t.Fatal("a poll with the node down succeeded")
			}
			e.chain.advance(1)
		}
		e.want(d, payment.SettlementPending, "")
		e.chain.setDown(false)
		e.poll()
		e.poll()
		e.want(d, payment.SettlementConfirmed, "10", settlement.EventPending, settlement.EventConfirmed)
	})
}

// The watcher's cost per poll grows with blocks and unmined transactions,
// not with vouchers: 30 vouchers paid in 2 blocks are three round trips.
func TestPollCostGrowsWithBlocksNotVouchers(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		var ds []deal
		var txs []settlement.Tx
		for i := 0; i < 30; i++ {
			d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "1"))
			h := newHash()
			e.mustResolve(d, h)
			ds = append(ds, d)
			txs = append(txs, tokenTx(h, credit(usdc, payee, units("1", 6))))
		}
		e.chain.mine(txs[0])
		e.chain.mu.Lock()
		// the other 29 in the same block as the first, and one block later
		for i, tx := range txs[1:] {
			tx.Found, tx.BlockNumber, tx.BlockHash, tx.BlockTime = true, e.chain.head, e.chain.blocks[e.chain.head], time.Now()
			if i >= 15 {
				tx.BlockNumber, tx.BlockHash = e.chain.head+1, "0xblock"+fmt.Sprint(e.chain.head+1)
			}
			e.chain.txs[tx.Hash] = tx
		}
		e.chain.mu.Unlock()
		e.chain.advance(1)
		e.poll() // first sight: the head, then 30 lookups in one batch
		calls0, asked0 := e.chain.roundTrips()
		e.chain.advance(1)
		e.poll() // mined: the head and the 2 distinct blocks, no lookups
		calls1, asked1 := e.chain.roundTrips()
		if calls1-calls0 != 2 || asked1-asked0 != 3 {
			t.Fatalf("a poll of 30 mined payments in 2 blocks: %d round trips asking %d items, want 2 asking 3", calls1-calls0, asked1-asked0)
		}
		e.chain.advance(1)
		e.poll() // the first block's payments confirmed: one block left
		calls2, asked2 := e.chain.roundTrips()
		if calls2-calls1 != 2 || asked2-asked1 != 2 {
			t.Fatalf("round trips %d asking %d items, want 2 asking 2 (head + 1 block)", calls2-calls1, asked2-asked1)
		}
		for _, d := range ds {
			e.want(d, payment.SettlementConfirmed, "1", settlement.EventPending, settlement.EventConfirmed)
		}
	})
}

// On a network without a chain the receipts are trusted as before
// (development): settlement.verified is false and the events come at
// resolve.
func TestUnverifiedNetworkTrustsReceipts(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		d := e.redeemed(tokenBody("polygon", "USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", "10"))
		amount := "12"
		v, err := e.vouchers.Resolve(as(d.payer), d.v.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{
			{PaymentID: d.v.ExpectedPayment.ID, TransactionHash: ptr("0xanything"), Amount: &amount},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if st := v.Settlement; st == nil || st.Verified || st.Status != payment.SettlementOverpaid || st.PaidAmount != "12" || v.SettlementNetwork != nil {
			t.Fatalf("settlement %+v", v.Settlement)
		}
		e.want(d, payment.SettlementOverpaid, "12", settlement.EventPending, settlement.EventOverpaid)
	})
}

func ptr(s string) *string { return &s }

// Two replicas on one PostgreSQL watch one network: polling at the same
// time, every event is written once.
func TestTwoReplicasEachEventOnce(t *testing.T) {
	db, url := testdb.OpenURL(t, storage.Postgres)
	chain := newFakeChain()
	e := newEnv(t, db, chain)
	db2, err := storage.Open(context.Background(), url, storage.Options{MaxOpenConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	other, err := settlement.NewService(db2, e.fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "ethereum", Chain: chain, Confirmations: required}},
		Events:   webhook.NewOutbox(db2, webhook.OutboxOptions{}), Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ds []deal
	for i := 0; i < 8; i++ {
		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "2"))
		h := newHash()
		e.mustResolve(d, h)
		chain.mine(tokenTx(h, credit(usdc, payee, units("2", 6))))
		ds = append(ds, d)
	}
	for round := 0; round < required+2; round++ {
		var wg sync.WaitGroup
		for _, s := range []*settlement.Service{e.settle, other, e.settle, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Poll(context.Background(), "ethereum"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		chain.advance(1)
	}
	for _, d := range ds {
		e.want(d, payment.SettlementConfirmed, "2", settlement.EventPending, settlement.EventConfirmed)
	}
}
