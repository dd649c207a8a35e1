package view_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/view"
)

// A settlement (with its transactions) and a deposit's sweep are the
// payment types on REST, without the watcher's and the sweeper's
// bookkeeping.
func TestSettlementAndDepositLeaveBookkeepingOut(t *testing.T) {
	block := int64(7)
	deadline := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	v := &ent.Voucher{
		Settlement: &payment.Settlement{Status: payment.SettlementConfirmed, Verified: true, RequiredConfirmations: 2,
			Confirmations: 3, PaidAmount: "1.5", Currency: "USDT", Network: "ethereum", Deadline: &deadline, Events: []string{"deposit.confirmed"},
			Transactions: []payment.SettlementTransaction{{TransactionHash: "0xab", Status: payment.TxConfirmed, BlockNumber: &block,
				Confirmations: 3, Amount: "1.5", Detected: true, Late: true, BlockHash: "0xcd"}}},
		Deposit: &payment.Deposit{Address: "0x01", PayoutAddress: "0x02", Factory: "0x03",
			Sweep: payment.Sweep{Status: "DONE", TransactionHash: "0xef", Amount: "1.5", Attempts: 2, Swept: "1.5", InFlight: "0x99", Target: "1.5"}},
	}
	for _, c := range []struct {
		name string
		view any
		want string
	}{
		{"settlement", view.SettlementOf(v), `{"status":"CONFIRMED","verified":true,"requiredConfirmations":2,"confirmations":3,"paidAmount":"1.5","currency":"USDT","transactions":[{"transactionHash":"0xab","status":"CONFIRMED","blockNumber":7,"confirmations":3,"amount":"1.5","detected":true,"late":true}]}`},
		{"deposit", view.DepositOf(v), `{"address":"0x01","payoutAddress":"0x02","sweep":{"status":"DONE","transactionHash":"0xef","amount":"1.5"}}`},
	} {
		b, err := json.Marshal(c.view)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
	if v.Settlement.Transactions[0].BlockHash != "0xcd" || v.Settlement.Network != "ethereum" || v.Deposit.Sweep.Attempts != 2 {
		t.Fatal("rendering changed the voucher")
	}
}
