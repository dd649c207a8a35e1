package graph_test

import (
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
)

// What REST leaves out is null on the graph, never "": a receipt sent
// without its hash or amount, a device's email. One field middleware
// (nullForAbsent) applies the rule to every nullable field; no resolver
// repeats it.
func TestAbsentIsNull(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	v := h.resolve(payer, h.redeem(payee, h.reserve(payee, ses.Code, nil).ID, "12.5"))
	if len(v.Receipts) != 1 || v.Receipts[0].TransactionHash != "" || v.Receipts[0].Amount != "" {
		t.Fatalf("the fixture's receipt should have neither hash nor amount: %+v", v.Receipts)
	}
	status, r := h.post(payer.token, `query($id: ID!) {
		voucher(id: $id) { status receipts { paymentId transactionHash amount } }
		viewer { kind email }
	}`, map[string]any{"id": v.ID})
	if status != 200 || len(r.Errors) > 0 {
		t.Fatalf("%d %s", status, r.raw)
	}
	for _, want := range []string{`"transactionHash":null,"amount":null`, `"email":null`, `"status":"RESOLVED"`} {
		if !strings.Contains(string(r.Data), want) {
			t.Errorf("answer lacks %s: %s", want, r.Data)
		}
	}
}
