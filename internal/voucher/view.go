package voucher

import (
	"encoding/json"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/payment"
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
	ExpiresAt       apitime.Time            `json:"expiresAt"`
	CreatedAt       apitime.Time            `json:"createdAt"`
	UpdatedAt       apitime.Time            `json:"updatedAt"`
}

// View renders v for REST.
func View(v *ent.Voucher) *Voucher {
	out := &Voucher{
		ID:              v.ID,
		Code:            v.Code,
		Status:          string(v.Status),
		Version:         v.Version,
		SessionID:       v.SessionID,
		BusinessID:      v.BusinessID,
		ExpectedPayment: v.ExpectedPayment,
		SuppliedPayment: v.SuppliedPayment,
		ExchangeRate:    v.ExchangeRate,
		Networks:        v.Networks,
		Payments:        v.Payments,
		Extras:          v.Extras,
		Receipts:        v.Receipts,
		DiscardReason:   v.DiscardReason,
		ExpiresAt:       apitime.From(v.ExpiresAt),
		CreatedAt:       apitime.From(v.CreatedAt),
		UpdatedAt:       apitime.From(v.UpdatedAt),
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
	return out
}

// Views renders a list for REST (always a JSON array, never null).
func Views(vs []*ent.Voucher) []*Voucher {
	out := make([]*Voucher, len(vs))
	for i, v := range vs {
		out[i] = View(v)
	}
	return out
}
