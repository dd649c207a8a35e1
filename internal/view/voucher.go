// Package view holds the JSON views the API answers with: a voucher with
// its settlement, a session, a business and a membership, a webhook
// endpoint and delivery, a widget, its public config, a new checkout and a
// checkout's public view (which the hosted checkout page shows too) as
// REST shows them; the webhook payloads (data.voucher) embed the voucher's.
// The domain packages return ent rows and plain values (a secret shown once
// travels beside its row: webhook.EndpointWithSecret, widget.WithSecret;
// widget.PublicConfig and widget.PublicState say what the registry and the
// page rules make of a widget or a checkout); the doors render them here,
// so a field's JSON shape is decided once. GraphQL renders from the
// schema instead (graph/model and the ent types).
package view

import (
	"encoding/json"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/voucher"
)

// Voucher is the REST view of a voucher: fields that do not apply to its
// type or state are absent. Slices use omitzero rather than omitempty so a
// CUSTOM voucher without extras still shows "extras": [].
type Voucher struct {
	ID              string                  `json:"id"`
	Code            string                  `json:"code"`
	Status          string                  `json:"status"`
	Type            *string                 `json:"type,omitempty"`
	Version         int                     `json:"version"`
	SessionID       string                  `json:"sessionId"`
	BusinessID      *string                 `json:"businessId,omitempty"`
	ExpectedPayment *payment.Payment        `json:"expectedPayment,omitempty"`
	SuppliedPayment *payment.Payment        `json:"suppliedPayment,omitempty"`
	ExchangeRate    *string                 `json:"exchangeRate,omitempty"`
	Networks        []payment.Network       `json:"networks,omitzero"`
	Payments        []payment.CustomPayment `json:"payments,omitzero"`
	Extras          []json.RawMessage       `json:"extras,omitzero"`
	PayeeInfo       json.RawMessage         `json:"payeeInfo,omitempty"`
	Receipts        []payment.Receipt       `json:"receipts,omitzero"`
	DiscardReason   *string                 `json:"discardReason,omitempty"`
	Settlement      *payment.Settlement     `json:"settlement,omitempty"`
	// Deposit is a checkout's deposit address (networks with a deposit
	// factory).
	Deposit *Deposit `json:"deposit,omitempty"`
	// WidgetID and Reference are set on checkouts (internal/widget);
	// SolanaPayReference on checkouts on a Solana network.
	WidgetID           *string      `json:"widgetId,omitempty"`
	Reference          *string      `json:"reference,omitempty"`
	SolanaPayReference *string      `json:"solanaPayReference,omitempty"`
	ExpiresAt          apitime.Time `json:"expiresAt"`
	CreatedAt          apitime.Time `json:"createdAt"`
	UpdatedAt          apitime.Time `json:"updatedAt"`
}

// OfVoucher renders v for REST.
func OfVoucher(v *ent.Voucher) *Voucher {
	out := &Voucher{
		ID:                 v.ID,
		Code:               v.Code,
		Status:             string(v.Status),
		Version:            v.Version,
		SessionID:          v.SessionID,
		BusinessID:         v.BusinessID,
		ExpectedPayment:    v.ExpectedPayment,
		SuppliedPayment:    v.SuppliedPayment,
		ExchangeRate:       v.ExchangeRate,
		Networks:           v.Networks,
		Payments:           v.Payments,
		Extras:             v.Extras,
		Receipts:           v.Receipts,
		DiscardReason:      v.DiscardReason,
		WidgetID:           v.WidgetID,
		Reference:          v.Reference,
		SolanaPayReference: v.SolanaPayReference,
		ExpiresAt:          apitime.From(v.ExpiresAt),
		CreatedAt:          apitime.From(v.CreatedAt),
		UpdatedAt:          apitime.From(v.UpdatedAt),
	}
	if v.Type != nil {
		t := string(*v.Type)
		out.Type = &t
		if t == payment.TypeCustom && out.Extras == nil {
			out.Extras = []json.RawMessage{}
		}
	}
	if len(v.PayeeInfo) > 0 && string(v.PayeeInfo) != "null" {
		out.PayeeInfo = v.PayeeInfo
	}
	out.Settlement = SettlementOf(v)
	out.Deposit = DepositOf(v)
	return out
}

// Deposit is the REST view of a checkout's deposit address: without the
// watcher's and the sweeper's bookkeeping.
type Deposit struct {
	Address       string `json:"address"`
	PayoutAddress string `json:"payoutAddress"`
	// Sweep is payment.Sweep without its bookkeeping (attempts, swept,
	// inFlight, target: left empty, so omitted).
	Sweep payment.Sweep `json:"sweep"`
}

// DepositOf is v's deposit as REST shows it (nil for a voucher without
// one).
func DepositOf(v *ent.Voucher) *Deposit {
	d := v.Deposit
	if d == nil {
		return nil
	}
	return &Deposit{
		Address: d.Address, PayoutAddress: d.PayoutAddress,
		Sweep: payment.Sweep{Status: d.Sweep.Status, TransactionHash: d.Sweep.TransactionHash, Amount: d.Sweep.Amount},
	}
}

// SettlementOf is v's settlement as REST shows it (nil before resolve):
// payment.Settlement, the fields docs/settlement.md names, with the
// watcher's bookkeeping (network, deadline, events; a transaction's block
// hash) left empty, so omitted.
func SettlementOf(v *ent.Voucher) *payment.Settlement {
	s := v.Settlement
	if s == nil {
		return nil
	}
	out := &payment.Settlement{
		Status: s.Status, Verified: s.Verified, RequiredConfirmations: s.RequiredConfirmations,
		Confirmations: s.Confirmations, PaidAmount: s.PaidAmount, Currency: s.Currency,
		Transactions: make([]payment.SettlementTransaction, len(s.Transactions)),
	}
	for i, t := range s.Transactions {
		t.BlockHash = ""
		out.Transactions[i] = t
	}
	return out
}

// List renders a list with of, one view per row: always a JSON array,
// never null.
func List[T, V any](rows []T, of func(T) V) []V {
	out := make([]V, len(rows))
	for i, r := range rows {
		out[i] = of(r)
	}
	return out
}

// Submission is a stored interop-init signature submission on REST; ID is
// the caller's submission id.
type Submission struct {
	ID           string       `json:"id"`
	VoucherID    string       `json:"voucherId"`
	PaymentIndex int          `json:"paymentIndex"`
	Signature    *string      `json:"signature,omitempty"`
	CreatedAt    apitime.Time `json:"createdAt"`
}

// OfSubmission renders an interop-init submission for REST.
func OfSubmission(s *voucher.Submission) *Submission {
	return &Submission{ID: s.ID, VoucherID: s.VoucherID, PaymentIndex: s.PaymentIndex, Signature: s.Signature, CreatedAt: s.CreatedAt}
}
