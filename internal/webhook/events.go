package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
)

// NotifyChannel is the PostgreSQL NOTIFY channel that wakes every replica's
// dispatcher after a commit queued deliveries. The outbox's Wake sends it
// after commit (pubsub.Notifier.Signal), not inside the transaction: a
// notifying transaction holds a cluster-wide lock through its WAL flush.
// A lost wake-up costs at most a poll interval (DefaultPollInterval).
const NotifyChannel = "webhook_deliveries"

// OutboxOptions configure the Outbox.
type OutboxOptions struct {
	// View renders a voucher as the REST door does; its JSON is the
	// payload's data.voucher.
	View func(*ent.Voucher) any
	// Wake is called after a commit that queued deliveries (the local
	// dispatcher's Wake, and on PostgreSQL a NotifyChannel signal to the
	// other replicas), so the first attempt does not wait for a poll.
	Wake func()
	Now  func() time.Time
}

// Outbox turns business voucher changes into deposit events and queues
// their deliveries, inside the transaction of the change (the voucher
// service's EventSink). A change that commits has its events; one that rolls
// back has none. It judges no payment: whether a deposit is confirmed,
// underpaid, overpaid or failed is the settlement domain's verdict
// (internal/settlement), which the outbox only turns into events.
type Outbox struct {
	db   *storage.DB
	view func(*ent.Voucher) any
	wake func()
	now  func() time.Time
}

// NewOutbox returns the outbox writing to db.
func NewOutbox(db *storage.DB, opts OutboxOptions) *Outbox {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.View == nil {
		opts.View = func(v *ent.Voucher) any { return map[string]string{"id": v.ID} }
	}
	return &Outbox{db: db, view: opts.View, wake: opts.Wake, now: opts.Now}
}

// Discard reasons the voucher service records.
const (
	discardExpired = "expired"
)

// VoucherChanged records the deposit events a change causes (see
// docs/webhooks.md for the table). Only business vouchers have deposits;
// a voucher that was never redeemed never became a deposit and has no
// events.
func (o *Outbox) VoucherChanged(ctx context.Context, tx *ent.Tx, prev, next *ent.Voucher) error {
	if next == nil || next.BusinessID == nil {
		return nil
	}
	var types []string
	switch {
	case prev == nil:
		// A checkout (internal/widget) is born REDEEMED: it is a deposit
		// from its first row on.
		if next.Status != voucher.StatusREDEEMED {
			return nil
		}
		types = []string{DepositCreated}
	case prev.Status == voucher.StatusRESERVED && next.Status == voucher.StatusREDEEMED:
		types = []string{DepositCreated}
	case prev.Status == voucher.StatusREDEEMED && next.Status == voucher.StatusRESOLVED:
		// Which events a resolve causes is the settlement's decision:
		// none on a network checked on chain (the watcher records them
		// through SettlementsChanged), pending and the verdict for
		// trusted receipts.
		types = settlement.ResolveEvents(next.Settlement)
	case prev.Status == voucher.StatusREDEEMED && next.Status == voucher.StatusDISCARDED:
		if next.DiscardReason != nil && *next.DiscardReason == discardExpired {
			types = []string{DepositExpired}
		} else {
			types = []string{settlement.EventFailed}
		}
	}
	return o.record(ctx, tx, next, types)
}

// deposit is what an event says about the payment: the due terms, and the
// paid sum as the settlement found it.
type deposit struct {
	network, currency string
	// due is the amount the payer owes: the supplied (negotiated) amount,
	// else the expected one. Empty for CUSTOM vouchers, which name no amount.
	due string
	// paid is the settlement's paid sum (from the chain on a verified
	// network, as reported otherwise); empty before, and for CUSTOM.
	paid string
}

func depositOf(v *ent.Voucher) deposit {
	var d deposit
	if v.Type == nil || *v.Type != voucher.TypeSIMPLE {
		if len(v.Networks) == 1 {
			d.network = v.Networks[0].Network
		}
		return d
	}
	due := v.ExpectedPayment
	if v.SuppliedPayment != nil && v.SuppliedPayment.Amount != "" {
		due = v.SuppliedPayment
	}
	if due == nil {
		return d
	}
	d.network, d.currency, d.due = due.Network, due.Currency, due.Amount
	if v.Settlement != nil && (v.Status == voucher.StatusRESOLVED || v.Settlement.Verified) {
		// Resolved, or a checkout paid to its deposit address after it
		// expired (its settlement is the chain's).
		d.paid = v.Settlement.PaidAmount
	}
	return d
}

// Payload is an event as receivers get it; it is serialized once, when the
// event is written, and every attempt sends those exact bytes.
type Payload struct {
	ID        string       `json:"id"`
	Type      string       `json:"type"`
	CreatedAt apitime.Time `json:"createdAt"`
	Data      PayloadData  `json:"data"`
}

// PayloadData describes the deposit.
type PayloadData struct {
	BusinessID     string `json:"businessId"`
	VoucherID      string `json:"voucherId"`
	VoucherVersion int    `json:"voucherVersion"`
	Network        string `json:"network,omitempty"`
	Currency       string `json:"currency,omitempty"`
	ExpectedAmount string `json:"expectedAmount,omitempty"`
	PaidAmount     string `json:"paidAmount,omitempty"`
	// Late is true on deposit.pending and a verdict caused by a payment
	// the watcher found after the checkout expired.
	Late    bool `json:"late,omitempty"`
	Voucher any  `json:"voucher"`
}

func (o *Outbox) record(ctx context.Context, tx *ent.Tx, v *ent.Voucher, types []string) error {
	return o.recordAll(ctx, tx, []Change{{Voucher: v, Types: types}})
}

// Change is one business voucher's new state and the deposit event types
// it causes.
type Change struct {
	Voucher *ent.Voucher
	Types   []string
}

// SettlementsChanged records the deposit events of several settlement
// changes written in one transaction (a block that confirms a thousand
// payments): the endpoints are read once per business and the events and
// deliveries are inserted in a few multi-row statements, not a few per
// voucher. Vouchers without a business have no deposits and are skipped.
// types[i] are vs[i]'s event types.
func (o *Outbox) SettlementsChanged(ctx context.Context, tx *ent.Tx, vs []*ent.Voucher, types [][]string) error {
	keep := make([]Change, 0, len(vs))
	for i, v := range vs {
		if v != nil && v.BusinessID != nil && len(types[i]) > 0 {
			keep = append(keep, Change{Voucher: v, Types: types[i]})
		}
	}
	return o.recordAll(ctx, tx, keep)
}

// bulkRows bounds the rows of one multi-row INSERT (PostgreSQL takes at
// most 65,535 parameters in a statement, SQLite 32,766).
const bulkRows = 500

func (o *Outbox) recordAll(ctx context.Context, tx *ent.Tx, cs []Change) error {
	now := o.now().UTC().Truncate(time.Millisecond)
	endpointsOf := map[string][]*ent.WebhookEndpoint{}
	var events []*ent.EventCreate
	var deliveries []*ent.WebhookDeliveryCreate
	for _, c := range cs {
		v, types := c.Voucher, c.Types
		if len(types) == 0 {
			continue
		}
		businessID := *v.BusinessID
		endpoints, ok := endpointsOf[businessID]
		if !ok {
			var err error
			endpoints, err = tx.WebhookEndpoint.Query().
				Where(
					webhookendpoint.BusinessID(businessID),
					webhookendpoint.Enabled(true),
					webhookendpoint.HasBusinessWith(entbusiness.StatusEQ(entbusiness.StatusACTIVE)),
				).
				Select(webhookendpoint.FieldID, webhookendpoint.FieldEvents).
				All(ctx)
			if err != nil {
				return fmt.Errorf("webhook: load endpoints: %w", err)
			}
			endpointsOf[businessID] = endpoints
		}
		s := depositOf(v)
		view := o.view(v)
		for _, t := range types {
			id := ids.New(ids.Event)
			p := Payload{ID: id, Type: t, CreatedAt: apitime.From(now), Data: PayloadData{
				BusinessID: businessID, VoucherID: v.ID, VoucherVersion: v.Version,
				Network: s.network, Currency: s.currency, ExpectedAmount: s.due, Voucher: view,
			}}
			if t != DepositCreated && t != DepositExpired && t != settlement.EventFailed {
				p.Data.PaidAmount = s.paid
			}
			if t != DepositCreated && t != DepositExpired {
				p.Data.Late = v.Settlement.Late()
			}
			body, err := json.Marshal(p)
			if err != nil {
				return fmt.Errorf("webhook: encode event: %w", err)
			}
			events = append(events, tx.Event.Create().
				SetID(id).SetBusinessID(businessID).SetVoucherID(v.ID).SetVoucherVersion(v.Version).
				SetType(t).SetPayload(body).SetCreatedAt(now))
			for _, e := range endpoints {
				if !subscribed(e, t) {
					continue
				}
				deliveries = append(deliveries, tx.WebhookDelivery.Create().
					SetBusinessID(businessID).SetEndpointID(e.ID).SetEventID(id).SetEventType(t).
					SetNextAttemptAt(now).SetCreatedAt(now).SetUpdatedAt(now))
			}
		}
	}
	for len(events) > 0 {
		k := min(len(events), bulkRows)
		if err := tx.Event.CreateBulk(events[:k]...).Exec(ctx); err != nil {
			return fmt.Errorf("webhook: write events: %w", err)
		}
		events = events[k:]
	}
	if len(deliveries) == 0 {
		return nil
	}
	for rest := deliveries; len(rest) > 0; {
		k := min(len(rest), bulkRows)
		if err := tx.WebhookDelivery.CreateBulk(rest[:k]...).Exec(ctx); err != nil {
			return fmt.Errorf("webhook: queue deliveries: %w", err)
		}
		rest = rest[k:]
	}
	if o.wake != nil {
		wake := o.wake
		tx.OnCommit(func(next ent.Committer) ent.Committer {
			return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
				err := next.Commit(ctx, tx)
				if err == nil {
					wake()
				}
				return err
			})
		})
	}
	return nil
}

func subscribed(e *ent.WebhookEndpoint, eventType string) bool {
	for _, t := range e.Events {
		if t == eventType {
			return true
		}
	}
	return false
}
