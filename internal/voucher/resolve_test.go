package voucher_test

import (
	"strings"
	"testing"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func receipts(ids ...string) voucher.ResolveInput {
	in := voucher.ResolveInput{Receipts: []voucher.ReceiptInput{}}
	for _, id := range ids {
		in.Receipts = append(in.Receipts, voucher.ReceiptInput{PaymentID: id})
	}
	return in
}

func ptr(s string) *string { return &s }

func TestResolve(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()

		v := f.redeemed(p, "10")
		pid := v.ExpectedPayment.ID
		in := voucher.ResolveInput{Receipts: []voucher.ReceiptInput{
			{PaymentID: pid, TransactionHash: ptr("0xabc"), Amount: ptr("4.50")},
			{PaymentID: pid, Amount: ptr("5.5")}, // a split payment
		}}
		got, err := f.svc.Resolve(as(p.payer), v.ID, in)
		if err != nil {
			t.Fatal(err)
		}
		want := []payment.Receipt{{PaymentID: pid, TransactionHash: "0xabc", Amount: "4.5"}, {PaymentID: pid, Amount: "5.5"}}
		if got.Status != entvoucher.StatusRESOLVED || got.Version != v.Version+1 || len(got.Receipts) != 2 ||
			got.Receipts[0] != want[0] || got.Receipts[1] != want[1] || got.LiveCode != nil {
			t.Fatalf("resolved %+v", got)
		}
		read, err := f.svc.Get(as(p.payee), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rv := view.OfVoucher(read); rv.Status != "RESOLVED" || len(rv.Receipts) != 2 || rv.Receipts[0] != want[0] {
			t.Fatalf("payee sees %+v", rv)
		}
		_, err = f.svc.Resolve(as(p.payer), v.ID, receipts(pid))
		wantCode(t, err, apperr.AlreadyResolved)

		// A CUSTOM voucher's receipts name its payment; amounts have no
		// token to hold them to.
		c := f.reserve(p)
		c, err = f.svc.Redeem(as(p.payee), c.ID, customBody())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Resolve(as(p.payer), c.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{
			{PaymentID: c.Payments[0].ID, Amount: ptr("0.0000000000000000000001")},
		}}); err != nil {
			t.Fatal(err)
		}

		// After negotiation, amounts are in the supplied token.
		n := f.redeemed(p, "3000")
		if _, err := f.svc.Negotiate(as(p.payer), n.ID, supplied("ethereum", "ETH", nativeEVM)); err != nil {
			t.Fatal(err)
		}
		tooPrecise := voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: n.ExpectedPayment.ID, Amount: ptr("0.0000000000000000001")}}}
		_, err = f.svc.Resolve(as(p.payer), n.ID, tooPrecise)
		wantField(t, err, "receipts[0].amount")
		if _, err := f.svc.Resolve(as(p.payer), n.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{
			{PaymentID: n.ExpectedPayment.ID, Amount: ptr("1.000000000000000001")},
		}}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResolveErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()
		redeemed := f.redeemed(p, "1")
		pid := redeemed.ExpectedPayment.ID
		reserved := f.reserve(p)
		discarded := f.redeemed(p, "1")
		if _, err := f.svc.Discard(as(p.payer), discarded.ID); err != nil {
			t.Fatal(err)
		}
		// A registered user who reserved is the payee, not the payer.
		payeeUser := f.user()
		byUser, err := f.svc.Reserve(as(payeeUser), voucher.ReserveInput{Code: p.session.Code})
		if err != nil {
			t.Fatal(err)
		}
		byUser, err = f.svc.Redeem(as(payeeUser), byUser.ID, simpleBody("1"))
		if err != nil {
			t.Fatal(err)
		}
		six := receipts(pid, pid, pid, pid, pid, pid)
		cases := []struct {
			name  string
			who   *auth.Principal
			id    string
			in    voucher.ResolveInput
			code  apperr.Code
			field string
		}{
			{"anonymous", nil, redeemed.ID, receipts(pid), apperr.Unauthorized, ""},
			{"resource token", p.payee, redeemed.ID, receipts(pid), apperr.Forbidden, ""},
			{"payee user", payeeUser, byUser.ID, receipts(byUser.ExpectedPayment.ID), apperr.NotFound, ""},
			{"stranger", device(), redeemed.ID, receipts(pid), apperr.NotFound, ""},
			{"stranger, bad body", device(), redeemed.ID, receipts(), apperr.NotFound, ""},
			{"unknown voucher", p.payer, ids.New(ids.Voucher), receipts(pid), apperr.NotFound, ""},
			{"no receipts field", p.payer, redeemed.ID, voucher.ResolveInput{}, apperr.ValidationFailed, "receipts"},
			{"zero receipts", p.payer, redeemed.ID, receipts(), apperr.ValidationFailed, "receipts"},
			{"six receipts", p.payer, redeemed.ID, six, apperr.ValidationFailed, "receipts"},
			{"missing paymentId", p.payer, redeemed.ID, receipts(""), apperr.ValidationFailed, "receipts[0].paymentId"},
			{"empty hash", p.payer, redeemed.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: pid, TransactionHash: ptr("")}}}, apperr.ValidationFailed, "receipts[0].transactionHash"},
			{"long hash", p.payer, redeemed.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: pid, TransactionHash: ptr(strings.Repeat("a", 129))}}}, apperr.ValidationFailed, "receipts[0].transactionHash"},
			{"bad amount", p.payer, redeemed.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: pid, Amount: ptr("1,5")}}}, apperr.ValidationFailed, "receipts[0].amount"},
			{"too precise amount", p.payer, redeemed.ID, voucher.ResolveInput{Receipts: []voucher.ReceiptInput{{PaymentID: pid, Amount: ptr("1.0000001")}}}, apperr.ValidationFailed, "receipts[0].amount"},
			{"unknown paymentId", p.payer, redeemed.ID, receipts("pmt_nope"), apperr.ValidationFailed, "receipts[0].paymentId"},
			{"one unknown paymentId of two", p.payer, redeemed.ID, receipts(pid, "pmt_nope"), apperr.ValidationFailed, "receipts[1].paymentId"},
			{"reserved", p.payer, reserved.ID, receipts(pid), apperr.NotRedeemed, ""},
			{"reserved, any paymentId", p.payer, reserved.ID, receipts("pmt_nope"), apperr.NotRedeemed, ""},
			{"reserved, bad body: body first", p.payer, reserved.ID, receipts(), apperr.ValidationFailed, "receipts"},
			{"discarded", p.payer, discarded.ID, receipts(discarded.ExpectedPayment.ID), apperr.Discarded, ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := t.Context()
				if c.who != nil {
					ctx = as(c.who)
				}
				var before []any
				if c.name != "unknown voucher" {
					before = f.row(c.id)
				}
				_, err := f.svc.Resolve(ctx, c.id, c.in)
				if c.field != "" {
					wantField(t, err, c.field)
				} else {
					wantCode(t, err, c.code)
				}
				if before != nil {
					f.unchanged(c.id, before)
				}
			})
		}
		f.clock.Add(ttl)
		_, err = f.svc.Resolve(as(p.payer), redeemed.ID, receipts(pid))
		wantCode(t, err, apperr.Expired)
	})
}

func TestDiscard(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		p := f.parties()

		byPayee := f.reserve(p)
		got, err := f.svc.Discard(as(p.payee), byPayee.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != entvoucher.StatusDISCARDED || *got.DiscardReason != voucher.ReasonDiscarded || got.Version != 2 || got.LiveCode != nil {
			t.Fatalf("discarded %+v", got)
		}
		if v := view.OfVoucher(got); v.DiscardReason == nil || *v.DiscardReason != "discarded" {
			t.Fatalf("view %+v", v)
		}
		byPayer := f.redeemed(p, "1")
		if _, err := f.svc.Discard(as(p.payer), byPayer.ID); err != nil {
			t.Fatal(err)
		}
		resolved := f.redeemed(p, "1")
		if _, err := f.svc.Resolve(as(p.payer), resolved.ID, receipts(resolved.ExpectedPayment.ID)); err != nil {
			t.Fatal(err)
		}
		live := f.reserve(p)
		for _, c := range []struct {
			name string
			who  string
			id   string
			code apperr.Code
		}{
			{"again", "payee", byPayee.ID, apperr.Discarded},
			{"redeem a discarded voucher", "", byPayee.ID, apperr.Discarded},
			{"resolved", "payer", resolved.ID, apperr.AlreadyResolved},
			{"stranger", "stranger", live.ID, apperr.NotFound},
			{"unknown", "payer", ids.New(ids.Voucher), apperr.NotFound},
		} {
			t.Run(c.name, func(t *testing.T) {
				var err error
				if c.who == "" {
					_, err = f.svc.Redeem(as(p.payee), c.id, simpleBody("1"))
				} else {
					_, err = f.svc.Discard(p.as(c.who), c.id)
				}
				wantCode(t, err, c.code)
			})
		}
		f.clock.Add(ttl)
		_, err = f.svc.Discard(as(p.payer), live.ID)
		wantCode(t, err, apperr.Expired)
	})
}
