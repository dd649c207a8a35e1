package view

import (
	"github.com/voucherd/voucherd/ent"
	entwidget "github.com/voucherd/voucherd/ent/widget"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/payment"
)

// Widget is a widget as REST shows it. ClientSecret is set only in the
// answers of create-widget and rotate-secret (OfWidgetWithSecret).
type Widget struct {
	ID           string                  `json:"id"`
	BusinessID   string                  `json:"businessId"`
	Name         string                  `json:"name"`
	Status       entwidget.Status        `json:"status"`
	Accepts      []payment.Accept        `json:"accepts"`
	Wallets      []payment.NetworkWallet `json:"wallets"`
	CreatedAt    apitime.Time            `json:"createdAt"`
	UpdatedAt    apitime.Time            `json:"updatedAt"`
	ClientSecret string                  `json:"clientSecret,omitempty"`
}

// OfWidget renders a widget without its secret.
func OfWidget(w *ent.Widget) *Widget {
	acc, wal := w.Accepts, w.Wallets
	if acc == nil {
		acc = []payment.Accept{}
	}
	if wal == nil {
		wal = []payment.NetworkWallet{}
	}
	return &Widget{
		ID: w.ID, BusinessID: w.BusinessID, Name: w.Name, Status: w.Status,
		Accepts: acc, Wallets: wal,
		CreatedAt: apitime.From(w.CreatedAt), UpdatedAt: apitime.From(w.UpdatedAt),
	}
}

// OfWidgetWithSecret renders a widget with the client secret it was just
// given, which no other answer shows.
func OfWidgetWithSecret(w *ent.Widget, secret string) *Widget {
	out := OfWidget(w)
	out.ClientSecret = secret
	return out
}

// OfWidgets renders a list (never null).
func OfWidgets(ws []*ent.Widget) []*Widget {
	out := make([]*Widget, len(ws))
	for i, w := range ws {
		out[i] = OfWidget(w)
	}
	return out
}
