package graph

import (
	"bytes"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/operation"
)

// writeEnum writes what the ent enums' MarshalGQL writes: every value the
// schema declares, and anything else (through MarshalGQL itself).
func TestWriteEnumAsMarshalGQL(t *testing.T) {
	var values []string
	for _, s := range []voucher.Status{voucher.StatusRESERVED, voucher.StatusREDEEMED, voucher.StatusRESOLVED, voucher.StatusDISCARDED} {
		values = append(values, string(s))
	}
	for _, ty := range []voucher.Type{voucher.TypeSIMPLE, voucher.TypeCUSTOM} {
		values = append(values, string(ty))
	}
	values = append(values, "", "a\"b", "é", "x\ny", "_9", "9a")
	for _, s := range values {
		var got, want bytes.Buffer
		writeEnum(&got, voucher.Status(s))
		voucher.Status(s).MarshalGQL(&want)
		if got.String() != want.String() {
			t.Errorf("%q: wrote %s, MarshalGQL %s", s, got.String(), want.String())
		}
	}
}

// A subscription's rendering runs the whole field rules around every
// field, keyScopes included, for whoever rendered first; a plan runs none.
// So the plans know no field keyScopes judges, and a selection naming
// one, at any depth, is left to gqlgen.
func TestSubscriptionPlansSkipNoFieldRule(t *testing.T) {
	for typ, names := range map[string][]string{"Voucher": keys(voucherFields), "Payment": keys(paymentFields), "Wallet": keys(walletFields)} {
		for _, name := range names {
			if _, judged := operation.ByNestedField(typ + "." + name); judged {
				t.Errorf("%s.%s is planned, and keyScopes judges it", typ, name)
			}
		}
	}
	field := func(typ, name string, sel ...ast.Selection) *ast.Field {
		return &ast.Field{Name: name, Alias: name, ObjectDefinition: &ast.Definition{Name: typ},
			Definition: &ast.FieldDefinition{Name: name}, SelectionSet: sel}
	}
	root := func(sel ...ast.Selection) *ast.Field { return field("Subscription", "voucherUpdated", sel...) }
	if _, judged := operation.ByNestedField("Business.webhookEndpoints"); !judged {
		t.Fatal("the test needs a field keyScopes judges")
	}
	judged := field("Business", "webhookEndpoints", field("WebhookEndpoint", "id"))
	plans := newReadPlans(nil)
	if plans.subscription(root(field("Voucher", "id"), field("Voucher", "code"))) == nil {
		t.Fatal("{ id code } not planned")
	}
	for _, sel := range []ast.SelectionSet{
		{field("Voucher", "id"), judged},
		{field("Voucher", "id"), field("Voucher", "expectedPayment", field("Payment", "id"), judged)},
	} {
		if !keyScoped(sel) {
			t.Fatalf("keyScoped missed the judged field in %v", sel)
		}
		if plans.subscription(root(sel...)) != nil {
			t.Fatalf("a selection with a field keyScopes judges planned")
		}
	}
}

func keys[T any](t fieldTable[T]) []string {
	out := make([]string, 0, len(t))
	for k := range t {
		out = append(out, k)
	}
	return out
}
