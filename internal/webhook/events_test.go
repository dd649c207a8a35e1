package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/event"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
)

// simple is a business voucher in status st, SIMPLE with an expected
// payment of amount (and a supplied one when supplied != "").
func simple(bizID string, st entvoucher.Status, amount, supplied string, receipts ...payment.Receipt) *ent.Voucher {
	typ := entvoucher.TypeSIMPLE
	v := &ent.Voucher{
		ID: "vch_test", Status: st, Type: &typ, Version: 3, BusinessID: &bizID,
		ExpectedPayment: &payment.Payment{ID: "pmt_1", Network: "polygon", Currency: "USDC", CurrencyAddress: "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", Amount: amount},
		Receipts:        receipts,
	}
	if supplied != "" {
		v.SuppliedPayment = &payment.Payment{ID: "pmt_1", Network: "polygon", Currency: "DAI", CurrencyAddress: "0x8f3Cf7ad23Cd3CaDbD9735AFf958023239c6A063", Amount: supplied}
	}
	return v
}

func with(v *ent.Voucher, fn func(*ent.Voucher)) *ent.Voucher {
	c := *v
	fn(&c)
	return &c
}

func receipt(amount string) payment.Receipt {
	return payment.Receipt{PaymentID: "pmt_1", TransactionHash: "0xabc", Amount: amount}
}

// change records one voucher change through the outbox and returns the
// payloads of the events it wrote, in the order of webhook.EventTypes.
func change(t *testing.T, f *fixture, prev, next *ent.Voucher) []webhook.Payload {
	t.Helper()
	ctx := context.Background()
	old := map[string]bool{}
	for _, id := range f.db.Event.Query().IDsX(ctx) {
		old[id] = true
	}
	err := f.db.Tx(ctx, func(tx *ent.Tx) error { return f.outbox.VoucherChanged(ctx, tx, prev, next) })
	if err != nil {
		t.Fatal(err)
	}
	var rows []*ent.Event
	for _, r := range f.db.Event.Query().AllX(ctx) {
		if !old[r.ID] {
			rows = append(rows, r)
		}
	}
	// One change's events share a millisecond; order them as the table does.
	slices.SortFunc(rows, func(a, b *ent.Event) int {
		return slices.Index(webhook.EventTypes, a.Type) - slices.Index(webhook.EventTypes, b.Type)
	})
	out := make([]webhook.Payload, len(rows))
	for i, r := range rows {
		if err := json.Unmarshal(r.Payload, &out[i]); err != nil {
			t.Fatal(err)
		}
		if out[i].ID != r.ID || out[i].Type != r.Type || r.VoucherVersion != next.Version || r.VoucherID != next.ID || r.BusinessID != f.biz.ID {
			t.Fatalf("row %+v does not match its payload %+v", r, out[i])
		}
	}
	return out
}

func types(ps []webhook.Payload) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Type
	}
	return strings.Join(s, ",")
}

func TestOutboxEventTypes(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		b := f.biz.ID
		reserved := simple(b, entvoucher.StatusRESERVED, "", "")
		reserved.ExpectedPayment, reserved.Type = nil, nil
		redeemed := simple(b, entvoucher.StatusREDEEMED, "10", "")
		negotiated := simple(b, entvoucher.StatusREDEEMED, "10", "10.05")
		resolved := func(v *ent.Voucher, rs ...payment.Receipt) *ent.Voucher { return f.resolve(t, v, rs...) }
		discarded := func(v *ent.Voucher, reason string) *ent.Voucher {
			return with(v, func(c *ent.Voucher) { c.Status, c.DiscardReason = entvoucher.StatusDISCARDED, &reason })
		}
		typ := entvoucher.TypeCUSTOM
		custom := &ent.Voucher{ID: "vch_c", Status: entvoucher.StatusREDEEMED, Type: &typ, Version: 2, BusinessID: &b,
			Networks: []payment.Network{{Network: "base", Type: "evm", ChainID: "8453"}}, Payments: []payment.CustomPayment{{ID: "pmt_c"}}}
		personal := with(redeemed, func(c *ent.Voucher) { c.BusinessID = nil })

		cases := []struct {
			name       string
			prev, next *ent.Voucher
			want       string
			paid       string
		}{
			{"reserve", nil, reserved, "", ""},
			{"redeem", reserved, redeemed, "deposit.created", ""},
			{"negotiate", redeemed, negotiated, "", ""},
			{"resolve exact", redeemed, resolved(redeemed, receipt("10")), "deposit.pending,deposit.confirmed", "10"},
			{"resolve split exact", redeemed, resolved(redeemed, receipt("4"), receipt("6.000")), "deposit.pending,deposit.confirmed", "10"},
			{"resolve below", redeemed, resolved(redeemed, receipt("9.99")), "deposit.pending,deposit.underpaid", "9.99"},
			{"resolve above", redeemed, resolved(redeemed, receipt("10.01")), "deposit.pending,deposit.overpaid", "10.01"},
			{"resolve without amount", redeemed, resolved(redeemed, receipt("")), "deposit.pending,deposit.confirmed", "10"},
			{"amountless fills the gap", redeemed, resolved(redeemed, receipt("3"), receipt("")), "deposit.pending,deposit.confirmed", "10"},
			{"amountless does not hide overpay", redeemed, resolved(redeemed, receipt("11"), receipt("")), "deposit.pending,deposit.overpaid", "11"},
			{"negotiated against supplied", negotiated, resolved(negotiated, receipt("10.05")), "deposit.pending,deposit.confirmed", "10.05"},
			{"negotiated short of supplied", negotiated, resolved(negotiated, receipt("10")), "deposit.pending,deposit.underpaid", "10"},
			{"custom resolve", custom, resolved(custom, payment.Receipt{PaymentID: "pmt_c"}), "deposit.pending,deposit.confirmed", ""},
			{"expired after redeem", redeemed, discarded(redeemed, "expired"), "deposit.expired", ""},
			{"discarded after redeem", redeemed, discarded(redeemed, "discarded"), "deposit.failed", ""},
			{"expired before redeem", reserved, discarded(reserved, "expired"), "", ""},
			{"discarded before redeem", reserved, discarded(reserved, "discarded"), "", ""},
			{"personal voucher", personal, resolved(personal, receipt("10")), "", ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got := change(t, f, c.prev, c.next)
				if types(got) != c.want {
					t.Fatalf("events %q, want %q", types(got), c.want)
				}
				for _, p := range got {
					if !strings.HasPrefix(p.ID, "evt_") || p.Data.BusinessID != b || p.Data.VoucherID != c.next.ID || p.Data.VoucherVersion != c.next.Version {
						t.Fatalf("payload %+v", p)
					}
					if p.Data.Voucher == nil {
						t.Fatal("payload without the voucher")
					}
					settled := p.Type != webhook.DepositCreated && p.Type != webhook.DepositExpired && p.Type != settlement.EventFailed
					if settled && p.Data.PaidAmount != c.paid || !settled && p.Data.PaidAmount != "" {
						t.Fatalf("%s paidAmount %q, want %q", p.Type, p.Data.PaidAmount, c.paid)
					}
				}
			})
		}

		// The payment due is the supplied one once negotiated.
		got := change(t, f, negotiated, resolved(negotiated, receipt("10.05")))
		if d := got[1].Data; d.Network != "polygon" || d.Currency != "DAI" || d.ExpectedAmount != "10.05" {
			t.Fatalf("negotiated data %+v", d)
		}
		got = change(t, f, reserved, redeemed)
		if d := got[0].Data; d.Currency != "USDC" || d.ExpectedAmount != "10" || d.Network != "polygon" {
			t.Fatalf("created data %+v", d)
		}
		got = change(t, f, custom, resolved(custom))
		if d := got[0].Data; d.Network != "base" || d.Currency != "" || d.ExpectedAmount != "" {
			t.Fatalf("custom data %+v", d)
		}
	})
}

// The outbox judges nothing: at resolve it writes deposit.pending and the
// event of the settlement's status; a verified settlement's events are the
// watcher's; a voucher without a settlement has no verdict to report.
func TestOutboxTurnsSettlementIntoEvents(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		ctx := context.Background()
		redeemed := simple(f.biz.ID, entvoucher.StatusREDEEMED, "10", "")
		settled := func(st *payment.Settlement) *ent.Voucher {
			return with(redeemed, func(c *ent.Voucher) {
				c.Status, c.Receipts, c.Settlement = entvoucher.StatusRESOLVED, []payment.Receipt{receipt("10")}, st
			})
		}
		cases := []struct {
			name string
			st   *payment.Settlement
			want string
			paid string
		}{
			{"confirmed", &payment.Settlement{Status: payment.SettlementConfirmed, PaidAmount: "10"}, "deposit.pending,deposit.confirmed", "10"},
			{"underpaid", &payment.Settlement{Status: payment.SettlementUnderpaid, PaidAmount: "7"}, "deposit.pending,deposit.underpaid", "7"},
			{"overpaid", &payment.Settlement{Status: payment.SettlementOverpaid, PaidAmount: "12"}, "deposit.pending,deposit.overpaid", "12"},
			{"failed", &payment.Settlement{Status: payment.SettlementFailed}, "deposit.pending,deposit.failed", ""},
			// The receipts say 10; the outbox reports the settlement's sum.
			{"paid is the settlement's", &payment.Settlement{Status: payment.SettlementUnderpaid, PaidAmount: "9"}, "deposit.pending,deposit.underpaid", "9"},
			{"verified", &payment.Settlement{Status: payment.SettlementPending, Verified: true}, "", ""},
			{"no settlement", nil, "deposit.pending", ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got := change(t, f, redeemed, settled(c.st))
				if types(got) != c.want {
					t.Fatalf("events %q, want %q", types(got), c.want)
				}
				for _, p := range got {
					if p.Type != settlement.EventPending && p.Type != settlement.EventFailed && p.Data.PaidAmount != c.paid {
						t.Fatalf("%s paidAmount %q, want %q", p.Type, p.Data.PaidAmount, c.paid)
					}
				}
			})
		}
		// The settlement watcher's later verdict comes in through
		// SettlementsChanged, in its own transaction.
		confirmed := func() int { return db.Event.Query().Where(event.Type(settlement.EventConfirmed)).CountX(ctx) }
		before, beforeConfirmed := db.Event.Query().CountX(ctx), confirmed()
		v := settled(&payment.Settlement{Status: payment.SettlementConfirmed, Verified: true, PaidAmount: "10"})
		if err := db.Tx(ctx, func(tx *ent.Tx) error {
			return f.outbox.SettlementsChanged(ctx, tx, []*ent.Voucher{v}, [][]string{{settlement.EventConfirmed}})
		}); err != nil {
			t.Fatal(err)
		}
		if db.Event.Query().CountX(ctx) != before+1 || confirmed() != beforeConfirmed+1 {
			t.Fatalf("the watcher's verdict wrote %d events", db.Event.Query().CountX(ctx)-before)
		}
	})
}

func TestOutboxDeliveries(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		ctx := context.Background()
		all := f.endpoint(t, "https://a.example.com/")
		createdOnly := f.endpoint(t, "https://b.example.com/", webhook.DepositCreated)
		confirmedOnly := f.endpoint(t, "https://c.example.com/", settlement.EventConfirmed)
		disabled := f.endpoint(t, "https://d.example.com/")
		if _, err := f.svc.UpdateEndpoint(f.owner, f.biz.ID, disabled.ID, webhook.UpdateEndpointInput{Enabled: ptr(false)}); err != nil {
			t.Fatal(err)
		}
		deleted := f.endpoint(t, "https://e.example.com/")
		if _, err := f.svc.DeleteEndpoint(f.owner, f.biz.ID, deleted.ID); err != nil {
			t.Fatal(err)
		}
		other := newFixture(t, db, fixtureOptions{})
		otherEndpoint := other.endpoint(t, "https://f.example.com/")

		reserved := simple(f.biz.ID, entvoucher.StatusRESERVED, "10", "")
		redeemed := simple(f.biz.ID, entvoucher.StatusREDEEMED, "10", "")
		resolved := f.resolve(t, redeemed, receipt("10"))
		change(t, f, reserved, redeemed)
		change(t, f, redeemed, resolved)

		byEndpoint := map[string][]string{}
		for _, d := range db.WebhookDelivery.Query().AllX(ctx) {
			byEndpoint[d.EndpointID] = append(byEndpoint[d.EndpointID], d.EventType)
			if d.Status != webhookdelivery.StatusPENDING || d.NextAttemptAt == nil || d.Attempts != 0 || d.BusinessID != f.biz.ID {
				t.Fatalf("new delivery %+v", d)
			}
		}
		for id := range byEndpoint {
			slices.Sort(byEndpoint[id])
		}
		want := map[string]string{
			all.ID:           "deposit.confirmed,deposit.created,deposit.pending",
			createdOnly.ID:   "deposit.created",
			confirmedOnly.ID: "deposit.confirmed",
		}
		if len(byEndpoint) != len(want) {
			t.Fatalf("deliveries by endpoint %v", byEndpoint)
		}
		for id, w := range want {
			if got := strings.Join(byEndpoint[id], ","); got != w {
				t.Fatalf("endpoint %s got %s, want %s", id, got, w)
			}
		}
		_ = otherEndpoint

		// An INACTIVE business still records its events but queues nothing.
		f.setBusinessStatus(t, entbusiness.StatusINACTIVE)
		n := db.WebhookDelivery.Query().CountX(ctx)
		if got := change(t, f, reserved, redeemed); len(got) != 1 {
			t.Fatalf("events %v", got)
		}
		if db.WebhookDelivery.Query().CountX(ctx) != n {
			t.Fatal("deliveries queued for an INACTIVE business")
		}

		// Rolled back with the change.
		f.setBusinessStatus(t, entbusiness.StatusACTIVE)
		events, deliveries := db.Event.Query().CountX(ctx), db.WebhookDelivery.Query().CountX(ctx)
		boom := errors.New("voucher update failed")
		err := db.Tx(ctx, func(tx *ent.Tx) error {
			if err := f.outbox.VoucherChanged(ctx, tx, reserved, redeemed); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || db.Event.Query().CountX(ctx) != events || db.WebhookDelivery.Query().CountX(ctx) != deliveries {
			t.Fatal("a rolled-back change left events or deliveries")
		}
	})
}

func TestOutboxPayloadBytesAreStable(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		ctx := context.Background()
		f.endpoint(t, "https://a.example.com/")
		change(t, f, simple(f.biz.ID, entvoucher.StatusRESERVED, "10", ""), simple(f.biz.ID, entvoucher.StatusREDEEMED, "10", ""))
		ev := db.Event.Query().OnlyX(ctx)
		var m map[string]any
		if err := json.Unmarshal(ev.Payload, &m); err != nil {
			t.Fatal(err)
		}
		data := m["data"].(map[string]any)
		for _, k := range []string{"businessId", "voucherId", "voucherVersion", "network", "currency", "expectedAmount", "voucher"} {
			if _, ok := data[k]; !ok {
				t.Fatalf("data lacks %s: %s", k, ev.Payload)
			}
		}
		if _, ok := data["paidAmount"]; ok {
			t.Fatal("deposit.created carries a paidAmount")
		}
		created, err := time.Parse(time.RFC3339, m["createdAt"].(string))
		if err != nil || !strings.HasSuffix(m["createdAt"].(string), "Z") || time.Since(created) > time.Minute {
			t.Fatalf("createdAt %v", m["createdAt"])
		}
		if _, ok := data["expectedAmount"].(string); !ok {
			t.Fatal("amounts must be strings")
		}
	})
}
