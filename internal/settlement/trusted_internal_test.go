package settlement

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/payment"
)

// The settlement of a network without a chain is what the receipts report:
// their sum against the due amount, a receipt without an amount paying
// whatever the others left unpaid (so it never makes a deposit under- or
// overpaid by itself).
func TestTrustedReceipts(t *testing.T) {
	r := func(amount string) payment.Receipt {
		return payment.Receipt{PaymentID: "pmt_1", TransactionHash: "0xabc", Amount: amount}
	}
	ten := due{network: "polygon", currency: "USDC", amount: decimal.RequireFromString("10")}
	cases := []struct {
		name   string
		d      due
		rs     []payment.Receipt
		status string
		paid   string
	}{
		{"exact", ten, []payment.Receipt{r("10")}, payment.SettlementConfirmed, "10"},
		{"split exact", ten, []payment.Receipt{r("4"), r("6.000")}, payment.SettlementConfirmed, "10"},
		{"below", ten, []payment.Receipt{r("9.99")}, payment.SettlementUnderpaid, "9.99"},
		{"above", ten, []payment.Receipt{r("10.01")}, payment.SettlementOverpaid, "10.01"},
		{"without amount", ten, []payment.Receipt{r("")}, payment.SettlementConfirmed, "10"},
		{"amountless fills the gap", ten, []payment.Receipt{r("3"), r("")}, payment.SettlementConfirmed, "10"},
		{"amountless does not hide overpay", ten, []payment.Receipt{r("11"), r("")}, payment.SettlementOverpaid, "11"},
		{"custom", due{network: "base", custom: &payment.CustomPayment{}}, []payment.Receipt{{PaymentID: "pmt_c"}}, payment.SettlementConfirmed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := trusted(c.d, c.rs)
			if st.Verified || st.Status != c.status || st.PaidAmount != c.paid {
				t.Fatalf("settlement %+v, want %s paid %q", st, c.status, c.paid)
			}
		})
	}
}
