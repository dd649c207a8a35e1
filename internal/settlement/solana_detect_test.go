package settlement_test

// Detection on Solana: checkouts paid with Solana Pay (the wallet adds the
// checkout's reference key to the transfer) and no signature handed back,
// found by the watcher through the Solana adapter alone, on SQLite and
// PostgreSQL. No validator runs offline: the node is the adapter's
// recorded-shape replies (internal/settlement/solana/testdata, written by
// hand from the documented reply shapes, not captured live), served over
// JSON-RPC with the fixture's reference keys replaced by the checkouts'
// fresh ones.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/event"
	"github.com/voucherd/voucherd/ent/settlementclaim"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/solana"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/widget"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// solNode serves the Solana adapter's fixtures as a JSON-RPC node.
type solNode struct {
	t     *testing.T
	mu    sync.Mutex
	names map[string]string
	slot  uint64
	txs   map[string]json.RawMessage
	stats map[string]json.RawMessage
	block map[string]json.RawMessage
	sigs  map[string][]json.RawMessage
	// signatureBatches counts the HTTP requests that asked
	// getSignaturesForAddress (Detect's round trips).
	signatureBatches int
}

// newSolNode loads the fixtures with each fixture reference (refUSDC,
// refSOL, refIdle) replaced by the key refs names for it.
func newSolNode(t *testing.T, refs map[string]string) (*solNode, string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile("solana/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	main, sigs := read("mainnet.json"), read("references.json")
	var names struct {
		Names map[string]string `json:"names"`
	}
	if err := json.Unmarshal([]byte(main), &names); err != nil {
		t.Fatal(err)
	}
	var more struct {
		Names map[string]string `json:"names"`
	}
	if err := json.Unmarshal([]byte(sigs), &more); err != nil {
		t.Fatal(err)
	}
	for k, v := range more.Names {
		names.Names[k] = v
	}
	for fixtureName, key := range refs {
		old := names.Names[fixtureName]
		if old == "" {
			t.Fatalf("no %s in the fixtures", fixtureName)
		}
		main, sigs = strings.ReplaceAll(main, old, key), strings.ReplaceAll(sigs, old, key)
		names.Names[fixtureName] = key
	}
	var fx struct {
		Slot     uint64                     `json:"getSlot"`
		Txs      map[string]json.RawMessage `json:"getTransaction"`
		Statuses struct {
			Value map[string]json.RawMessage `json:"value"`
		} `json:"getSignatureStatuses"`
		Blocks map[string]json.RawMessage `json:"getBlock"`
	}
	if err := json.Unmarshal([]byte(main), &fx); err != nil {
		t.Fatal(err)
	}
	var sx struct {
		Sigs map[string][]json.RawMessage `json:"getSignaturesForAddress"`
	}
	if err := json.Unmarshal([]byte(sigs), &sx); err != nil {
		t.Fatal(err)
	}
	n := &solNode{t: t, names: names.Names, slot: fx.Slot, txs: fx.Txs, stats: fx.Statuses.Value, block: fx.Blocks, sigs: sx.Sigs}
	srv := httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(srv.Close)
	return n, srv.URL
}

// finalize makes the node report sig as finalized (it was confirmed).
func (n *solNode) finalize(sig string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var st map[string]any
	if err := json.Unmarshal(n.stats[sig], &st); err != nil {
		n.t.Fatal(err)
	}
	st["confirmationStatus"], st["confirmations"] = "finalized", nil
	n.stats[sig], _ = json.Marshal(st)
}

func (n *solNode) serve(w http.ResponseWriter, r *http.Request) {
	var reqs []struct {
		ID     json.RawMessage   `json:"id"`
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&reqs); err != nil {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []map[string]any
	counted := false
	for _, q := range reqs {
		str := func(i int) string {
			var s string
			_ = json.Unmarshal(q.Params[i], &s)
			return s
		}
		m := map[string]any{"jsonrpc": "2.0", "id": q.ID}
		switch q.Method {
		case "getSlot":
			m["result"] = n.slot
		case "getTransaction":
			if tx, ok := n.txs[str(0)]; ok {
				m["result"] = tx
			} else {
				m["result"] = nil
			}
		case "getSignatureStatuses":
			var sigs []string
			_ = json.Unmarshal(q.Params[0], &sigs)
			vals := make([]any, len(sigs))
			for i, s := range sigs {
				if st, ok := n.stats[s]; ok && string(st) != "null" {
					vals[i] = st
				}
			}
			m["result"] = map[string]any{"context": map[string]any{"slot": n.slot}, "value": vals}
		case "getBlock":
			var slot uint64
			_ = json.Unmarshal(q.Params[0], &slot)
			if b, ok := n.block[strconv.FormatUint(slot, 10)]; ok && !strings.Contains(string(b), `"error"`) {
				m["result"] = b
			} else {
				m["error"] = map[string]any{"code": -32004, "message": "Block not available for slot " + strconv.FormatUint(slot, 10)}
			}
		case "getSignaturesForAddress":
			if !counted {
				n.signatureBatches++
				counted = true
			}
			var opt struct {
				MinContextSlot uint64 `json:"minContextSlot"`
			}
			_ = json.Unmarshal(q.Params[1], &opt)
			if opt.MinContextSlot > n.slot {
				m["error"] = map[string]any{"code": -32016, "message": "Minimum context slot has not been reached"}
				break
			}
			list := []json.RawMessage{}
			for _, e := range n.sigs[str(0)] {
				var s struct {
					Slot uint64 `json:"slot"`
				}
				_ = json.Unmarshal(e, &s)
				if s.Slot <= n.slot {
					list = append(list, e)
				}
			}
			m["result"] = list
		default:
			m["error"] = map[string]any{"code": -32601, "message": "Method not found"}
		}
		out = append(out, m)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// solWorld is an env on the default finance file's "solana" network
// (USDC is the mint of the fixtures), verified by the Solana adapter over
// a solNode, with a widget paying out to the fixtures' payee.
type solWorld struct {
	*env
	chain   *lateChain
	widgets *widget.Service
	wid     string
	secret  string
}

// solCheckout is a checkout made through the widget service.
type solCheckout struct {
	id, tokenHash, ref string
}

func newSolWorld(t *testing.T, db *storage.DB, start time.Time) *solWorld {
	t.Helper()
	fin, err := finance.New(finance.Default())
	if err != nil {
		t.Fatal(err)
	}
	// The chain is dialed once the checkouts' references are known
	// (attach); the watcher holds this adapter from the start.
	w := &solWorld{chain: &lateChain{}}
	w.env = newEnvOn(t, db, fin, "solana", w.chain)
	w.clock.t = start
	if w.widgets, err = widget.NewService(db, widget.Options{Vouchers: w.vouchers, Finance: w.fin, Now: w.clock.Now}); err != nil {
		t.Fatal(err)
	}
	name := "Shop"
	ws, err := w.widgets.Create(as(w.member), w.biz.ID, widget.CreateInput{
		Name:    &name,
		Accepts: []payment.Accept{{Network: "solana", Currency: "USDC"}, {Network: "solana", Currency: "SOL"}},
		Wallets: []payment.NetworkWallet{{Network: "solana", Address: solPayee}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.wid, w.secret = ws.ID, ws.ClientSecret
	return w
}

// solPayee is the fixtures' payee (names.payee in mainnet.json).
const solPayee = "5JvJZvy4SiS9PhiQUUu2jrizKXFKLVmYdkay3fJsAv7R"

// lateChain is the Solana adapter once attach has dialed it.
type lateChain struct{ *solana.Chain }

func (w *solWorld) attach(t *testing.T, refs map[string]string) *solNode {
	t.Helper()
	n, url := newSolNode(t, refs)
	c, err := solana.New(url, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w.chain.Chain = c
	return n
}

func (w *solWorld) checkout(t *testing.T, currency, amount string) solCheckout {
	t.Helper()
	co, err := w.widgets.CreateCheckout(context.Background(), w.wid, w.secret, widget.CheckoutInput{Network: "solana", Currency: currency, Amount: amount})
	if err != nil {
		t.Fatal(err)
	}
	v := co.Voucher
	if v.SolanaPayReference == nil || v.WatchNetwork == nil || *v.WatchNetwork != "solana" || v.Deposit != nil || v.ExpectedPayment.Wallet.Address != solPayee {
		t.Fatalf("a Solana checkout: reference %v, watched on %v, deposit %+v, wallet %s", v.SolanaPayReference, v.WatchNetwork, v.Deposit, v.ExpectedPayment.Wallet.Address)
	}
	token := co.URL[strings.LastIndex(co.URL, "/")+1:]
	return solCheckout{id: v.ID, tokenHash: widget.TokenHash(token), ref: *v.SolanaPayReference}
}

func (w *solWorld) read(t *testing.T, c solCheckout) *ent.Voucher {
	t.Helper()
	v, err := w.vouchers.Checkout(context.Background(), c.tokenHash)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// expect checks a checkout's status, settlement and events (as a
// multiset after deposit.created), and returns it with the events' late
// flags by type.
func (w *solWorld) expect(t *testing.T, c solCheckout, status entvoucher.Status, settled, paid string, events ...string) (*ent.Voucher, map[string]bool) {
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
	evs, err := w.db.Event.Query().Where(event.VoucherID(v.ID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	late := map[string]bool{}
	var got []string
	for _, ev := range evs {
		var p struct {
			Type string `json:"type"`
			Data struct {
				Late bool `json:"late"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Type)
		late[p.Type] = p.Data.Late
	}
	want := append([]string{webhook.DepositCreated}, events...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	return v, late
}

// The fixtures' block times are 2024-12-02 (1733140001 and on); the
// service's clock is set before them, so the payments are not "mined
// before the voucher was reserved".
var (
	solEarly = time.Unix(1733136000, 0).UTC() // a checkout made then expired at 1733139600: before sig_sol
	solNow   = time.Unix(1733139900, 0).UTC()
)

// TestSolanaDetection: a Solana Pay payment (the reference in the
// transfer, no signature handed back) resolves and confirms its checkout;
// a transaction that names the reference but pays another mint (the decoy)
// is neither recorded nor claimed, nor is a failed one; a payment after
// the checkout expired is recorded as late and confirmed with data.late;
// an idle reference leaves its checkout alone; the signature submitted
// afterwards adds nothing.
func TestSolanaDetection(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSolWorld(t, db, solEarly)
		late := w.checkout(t, "SOL", "0.25")
		w.clock.t = solNow
		paid, idle := w.checkout(t, "USDC", "12.5"), w.checkout(t, "USDC", "3")
		if paid.ref == late.ref || paid.ref == idle.ref {
			t.Fatal("two checkouts share a reference")
		}
		n := w.attach(t, map[string]string{"refUSDC": paid.ref, "refSOL": late.ref, "refIdle": idle.ref})

		w.poll()
		if n.signatureBatches != 1 {
			t.Fatalf("Detect took %d round trips, want 1", n.signatureBatches)
		}
		// The USDC payment: finalized at once (its slot is finalized), so
		// resolved and confirmed in one poll, with its receipt.
		v, _ := w.expect(t, paid, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "12.5", settlement.EventPending, settlement.EventConfirmed)
		sigUSDC := n.names["sig_usdc"]
		if len(v.Settlement.Transactions) != 1 || v.Settlement.Transactions[0].TransactionHash != sigUSDC || !v.Settlement.Transactions[0].Detected ||
			v.Settlement.Transactions[0].Late || v.Settlement.Transactions[0].Status != payment.TxConfirmed {
			t.Fatalf("paid: transactions %+v (the decoy and the failed one must not be there)", v.Settlement.Transactions)
		}
		if len(v.Receipts) != 1 || v.Receipts[0].TransactionHash != sigUSDC {
			t.Fatalf("paid: receipts %+v", v.Receipts)
		}
		for _, sig := range []string{n.names["sig_decoy"], n.names["sig_failed"]} {
			if ok, err := w.db.SettlementClaim.Query().Where(settlementclaim.TransactionHash(sig)).Exist(context.Background()); err != nil || ok {
				t.Fatalf("%s claimed: %v %v", sig, ok, err)
			}
		}
		// The SOL payment came after its checkout expired: recorded on
		// it, late, mined (confirmed, not yet finalized).
		v, flags := w.expect(t, late, entvoucher.StatusDISCARDED, payment.SettlementPending, "0.25", settlement.EventPending)
		if tx := v.Settlement.Transactions; len(tx) != 1 || !tx[0].Late || tx[0].Status != payment.TxMined || !flags[settlement.EventPending] {
			t.Fatalf("late: %+v, events late %v", tx, flags)
		}
		w.expect(t, idle, entvoucher.StatusREDEEMED, "", "")

		// The customer pastes the detected signature: nothing is added.
		before := w.read(t, paid)
		got, err := w.vouchers.SubmitCheckoutPayment(context.Background(), paid.tokenHash, sigUSDC)
		if err != nil || got.Version != before.Version {
			t.Fatalf("submitting the detected signature: %v (version %d → %d)", err, before.Version, got.Version)
		}
		// Another signature on a resolved checkout is refused, as on any.
		if _, err := w.vouchers.SubmitCheckoutPayment(context.Background(), paid.tokenHash, n.names["sig_unknown"]); err == nil {
			t.Fatal("a second signature was taken on a resolved checkout")
		}

		// The late payment is finalized: its verdict, late.
		n.finalize(n.names["sig_sol"])
		w.poll()
		_, flags = w.expect(t, late, entvoucher.StatusDISCARDED, payment.SettlementConfirmed, "0.25", settlement.EventPending, settlement.EventConfirmed)
		if !flags[settlement.EventConfirmed] {
			t.Fatal("the late payment's verdict does not say late")
		}
		// Polls with nothing new change nothing.
		w.poll()
		w.expect(t, paid, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "12.5", settlement.EventPending, settlement.EventConfirmed)
		w.expect(t, late, entvoucher.StatusDISCARDED, payment.SettlementConfirmed, "0.25", settlement.EventPending, settlement.EventConfirmed)
		w.expect(t, idle, entvoucher.StatusREDEEMED, "", "")
	})
}

// TestSolanaPartialThenExpiry: 12.5 USDC paid with the reference of a
// 20 USDC checkout keeps the settlement PENDING with what remains shown,
// and the one verdict (UNDERPAID) comes at the checkout's expiry.
func TestSolanaPartialThenExpiry(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSolWorld(t, db, solNow)
		c := w.checkout(t, "USDC", "20")
		n := w.attach(t, map[string]string{"refUSDC": c.ref})
		// The watcher starts long after the payment (1,000 slots, about
		// seven minutes, as after a restart): it is found all the same.
		n.mu.Lock()
		n.slot += 1000
		n.mu.Unlock()
		w.poll()
		v, _ := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "12.5", settlement.EventPending)
		if st := w.widgets.PublicOf(v, "Shop"); st.Remaining != "7.5" || st.Status != widget.StatusPending {
			t.Fatalf("page: remaining %q, status %s", st.Remaining, st.Status)
		}
		w.poll()
		w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "12.5", settlement.EventPending)
		w.clock.Add(time.Hour + time.Second)
		w.poll()
		w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementUnderpaid, "12.5", settlement.EventPending, settlement.EventUnderpaid)
	})
}

// TestSolanaOneTransactionTwoReferences: a Solana checkout is paid to the
// widget's own wallet, which its other checkouts share, so a transaction
// naming two checkouts' references (anyone may name a public key) pays one
// of them, never both.
func TestSolanaOneTransactionTwoReferences(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSolWorld(t, db, solNow)
		a, b := w.checkout(t, "USDC", "12.5"), w.checkout(t, "USDC", "12.5")
		n := w.attach(t, map[string]string{"refUSDC": a.ref})
		n.mu.Lock()
		n.sigs[b.ref] = n.sigs[a.ref] // the same transaction lists b's reference too
		n.mu.Unlock()
		w.poll()
		va, vb := w.read(t, a), w.read(t, b)
		paid := 0
		for _, v := range []*ent.Voucher{va, vb} {
			if v.Settlement != nil && len(v.Settlement.Transactions) > 0 {
				paid++
			}
		}
		if paid != 1 {
			t.Fatalf("one payment recorded on %d checkouts: a %+v, b %+v", paid, va.Settlement, vb.Settlement)
		}
		// Still one after another poll.
		w.poll()
		va, vb = w.read(t, a), w.read(t, b)
		if (va.Settlement != nil) == (vb.Settlement != nil) {
			t.Fatalf("after a second poll: a %+v, b %+v", va.Settlement, vb.Settlement)
		}
	})
}

// TestSolanaClaimedFirst: a payment's signature another checkout's customer
// submitted first stays with that checkout, whatever reference the
// transaction names; and which checkout a payment naming two references
// went to does not change when a restarted watcher rescans every slot and
// finds it again for both.
func TestSolanaClaimedFirst(t *testing.T) {
	// Each case has its own name: a second testdb.Each in one test would
	// name its subtests "sqlite3#01", and the '#' cuts the SQLite file's
	// URL short (a database shared between runs).
	t.Run("submitted_first", func(t *testing.T) { testdb.Each(t, solanaSubmittedFirst) })
	t.Run("restart", func(t *testing.T) { testdb.Each(t, solanaClaimSurvivesRestart) })
}

func solanaSubmittedFirst(t *testing.T, db *storage.DB) {
	w := newSolWorld(t, db, solNow)
	a, b, c := w.checkout(t, "USDC", "12.5"), w.checkout(t, "USDC", "12.5"), w.checkout(t, "SOL", "0.25")
	n := w.attach(t, map[string]string{"refUSDC": a.ref, "refSOL": c.ref})
	n.mu.Lock()
	n.sigs[b.ref] = n.sigs[a.ref] // the USDC payment names a's and b's references
	n.mu.Unlock()
	// c's customer submitted sig_usdc first (a real payment to the same
	// wallet, though not in SOL).
	if _, err := w.vouchers.SubmitCheckoutPayment(context.Background(), c.tokenHash, n.names["sig_usdc"]); err != nil {
		t.Fatal(err)
	}
	w.poll()
	// sig_usdc is c's (claimed first; it pays c nothing: INVALID), so
	// neither a nor b gets it; c's own SOL payment is detected beside.
	w.expect(t, a, entvoucher.StatusREDEEMED, "", "")
	w.expect(t, b, entvoucher.StatusREDEEMED, "", "")
	v, _ := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementPending, "0.25", settlement.EventPending)
	if len(v.Settlement.Transactions) != 2 || v.Settlement.Transactions[0].Status != payment.TxInvalid {
		t.Fatalf("c: %+v", v.Settlement.Transactions)
	}
}

func solanaClaimSurvivesRestart(t *testing.T, db *storage.DB) {
	w := newSolWorld(t, db, solNow)
	a, b := w.checkout(t, "USDC", "12.5"), w.checkout(t, "USDC", "12.5")
	n := w.attach(t, map[string]string{"refUSDC": a.ref})
	n.mu.Lock()
	n.sigs[b.ref] = n.sigs[a.ref]
	n.mu.Unlock()
	w.poll()
	paid, other := a, b
	if w.read(t, a).Settlement == nil {
		paid, other = b, a
	}
	check := func() {
		t.Helper()
		w.expect(t, paid, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "12.5", settlement.EventPending, settlement.EventConfirmed)
		w.expect(t, other, entvoucher.StatusREDEEMED, "", "")
		cl, err := w.db.SettlementClaim.Query().Where(settlementclaim.TransactionHash(n.names["sig_usdc"])).Only(context.Background())
		if err != nil || cl.VoucherID != paid.id {
			t.Fatalf("claim %+v %v, want %s's", cl, err, paid.id)
		}
	}
	check()
	restarted, err := settlement.NewService(db, w.fin.Registry(), settlement.Options{
		Networks: []settlement.Network{{Name: "solana", Chain: w.chain, Confirmations: w.confirmations}},
		Events:   w.outbox, Publisher: w.pub, Now: w.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.Poll(context.Background(), "solana"); err != nil {
		t.Fatal(err)
	}
	check()
}
