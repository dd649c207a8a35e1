package settlement_test

// A deposit address belongs to its checkout: a payment to it is that
// checkout's whatever else names the same transaction, whether one
// transaction pays several deposit addresses (an exchange's batched
// withdrawal) or another voucher got the transaction's hash first.

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestDetectionOwnsItsDepositAddress(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSimWorldWith(t, db, true)
		run := func(name string, fn func(t *testing.T)) {
			t.Run(name, func(t *testing.T) { w.env.t = t; fn(t) })
		}
		usdc := w.usdc.Hex()
		disperse := w.deploy(t, testchain.DisperseCode)

		run("one_transaction_pays_two_checkouts", func(t *testing.T) {
			a := w.checkout(t, "USDC", usdc, "5")
			b := w.checkout(t, "USDC", usdc, "2.5")
			w.send(t, w.payer, &w.usdc, nil, testchain.ApproveData(disperse, units("7.5", 6)))
			w.sim.Commit()
			h := w.send(t, w.payer, &disperse, nil, testchain.DisperseTokenData(w.usdc,
				[]common.Address{common.HexToAddress(a.addr()), common.HexToAddress(b.addr())},
				[]*big.Int{units("5", 6), units("2.5", 6)})).Hex()
			w.blocks(required)
			va := w.expect(t, a, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "5", settlement.EventPending, settlement.EventConfirmed)
			vb := w.expect(t, b, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "2.5", settlement.EventPending, settlement.EventConfirmed)
			for _, v := range []string{va.Settlement.Transactions[0].TransactionHash, vb.Settlement.Transactions[0].TransactionHash} {
				if v != strings.ToLower(h) {
					t.Fatalf("each checkout records the batch %s: a %+v b %+v", h, va.Settlement.Transactions, vb.Settlement.Transactions)
				}
			}
		})

		run("another_vouchers_claim_does_not_take_it", func(t *testing.T) {
			c := w.checkout(t, "USDC", usdc, "4")
			// A stranger's voucher names the checkout's deposit address as
			// its wallet and hands in the customer's hash before the
			// watcher has seen it.
			body := tokenBody("devnet", "USDC", usdc, "4")
			body.ExpectedPayment.Wallet.Address = c.addr()
			d := w.redeemed(body)
			h := w.transfer(t, w.payer, w.usdc, c.addr(), "4", 6)
			w.mustResolve(d, h)
			w.blocks(required)
			v := w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "4", settlement.EventPending, settlement.EventConfirmed)
			if v.Settlement.Transactions[0].TransactionHash != strings.ToLower(h) {
				t.Fatalf("the checkout records its payment: %+v", v.Settlement.Transactions)
			}
		})
	})
}

// TestDetectionAfterALongStop: a payment made while the service was down,
// however many blocks ago, is found when it comes back: the detection
// cursor is kept in the database, so the restarted watcher (a new
// Service, nothing in memory) scans on from the last scanned block.
func TestDetectionAfterALongStop(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		w := newSimWorldWith(t, db, true)
		w.env.t = t
		c := w.checkout(t, "USDC", w.usdc.Hex(), "6")
		w.blocks(1) // scanned: the cursor is recorded
		// Down: the payment, then far more blocks than a first scan
		// would look back over.
		w.transfer(t, w.payer, w.usdc, c.addr(), "6", 6)
		for i := 0; i < 400; i++ {
			w.sim.Commit()
		}
		c2, err := evm.Dial(context.Background(), w.rpcURL, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		restarted, err := settlement.NewService(db, w.fin.Registry(), settlement.Options{
			Networks: []settlement.Network{{Name: "devnet", Chain: c2, Confirmations: required}},
			Events:   w.outbox, Publisher: w.pub, Now: w.clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		w.settle = restarted
		// It catches up a bounded number of blocks a poll.
		for i := 0; i < 10; i++ {
			w.poll()
		}
		w.expect(t, c, entvoucher.StatusRESOLVED, payment.SettlementConfirmed, "6", settlement.EventPending, settlement.EventConfirmed)
	})
}
