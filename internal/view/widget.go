package view

import (
	"github.com/voucherd/voucherd/ent"
	entwidget "github.com/voucherd/voucherd/ent/widget"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/widget"
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

// WidgetConfig is GET /api/v1/widgets/:widgetId/config.
type WidgetConfig struct {
	ID           string           `json:"id"`
	Name         string           `json:"name"`
	BusinessName string           `json:"businessName"`
	Status       entwidget.Status `json:"status"`
	Accepts      []AcceptedToken  `json:"accepts"`
}

// AcceptedToken is one token of a widget's config, with what a client
// needs to ask a wallet for it.
type AcceptedToken struct {
	Network         string `json:"network"`
	Currency        string `json:"currency"`
	CurrencyAddress string `json:"currencyAddress"`
	Decimals        int32  `json:"decimals"`
	ChainID         string `json:"chainId"`
}

// OfWidgetConfig renders a widget's public configuration (accepts never
// null).
func OfWidgetConfig(c *widget.PublicConfig) *WidgetConfig {
	out := &WidgetConfig{ID: c.Widget.ID, Name: c.Widget.Name, BusinessName: c.BusinessName, Status: c.Widget.Status, Accepts: make([]AcceptedToken, len(c.Accepted))}
	for i, a := range c.Accepted {
		out.Accepts[i] = AcceptedToken{
			Network: a.Token.Network, Currency: a.Token.Currency, CurrencyAddress: a.Token.CurrencyAddress,
			Decimals: a.Token.Decimals, ChainID: a.ChainID,
		}
	}
	return out
}

// Checkout is the create-checkout answer.
type Checkout struct {
	ID              string           `json:"id"`
	CheckoutURL     string           `json:"checkoutUrl"`
	Status          string           `json:"status"`
	ExpiresAt       apitime.Time     `json:"expiresAt"`
	ExpectedPayment *payment.Payment `json:"expectedPayment"`
	Reference       *string          `json:"reference,omitempty"`
}

// OfCheckout renders a checkout just made, whose hosted page is at url.
func OfCheckout(v *ent.Voucher, url string) *Checkout {
	return &Checkout{
		ID: v.ID, CheckoutURL: url, Status: string(v.Status),
		ExpiresAt: apitime.From(v.ExpiresAt), ExpectedPayment: v.ExpectedPayment, Reference: v.Reference,
	}
}

// PublicCheckout is the checkout's public view: what its token shows (GET
// /api/v1/checkout/:token, the hosted page, its live events).
type PublicCheckout struct {
	ID           string `json:"id"`
	BusinessName string `json:"businessName"`
	Amount       string `json:"amount"`
	// AmountAtomic is Amount in the token's smallest unit (wei, lamports).
	AmountAtomic    string              `json:"amountAtomic"`
	Currency        string              `json:"currency"`
	CurrencyAddress string              `json:"currencyAddress"`
	Decimals        int32               `json:"decimals"`
	Native          bool                `json:"native"`
	Network         string              `json:"network"`
	NetworkType     string              `json:"networkType"`
	ChainID         string              `json:"chainId"`
	PayeeAddress    string              `json:"payeeAddress"`
	Status          string              `json:"status"`
	Settlement      *payment.Settlement `json:"settlement"`
	// Deposit is the checkout's deposit address, when it has one (it is
	// PayeeAddress then).
	Deposit *Deposit `json:"deposit,omitempty"`
	// Remaining is what is left to pay while a partial payment is
	// confirmed and the checkout is open; RemainingAtomic the same in the
	// token's smallest unit. PaymentURI then asks for the remainder.
	Remaining       string `json:"remaining,omitempty"`
	RemainingAtomic string `json:"remainingAtomic,omitempty"`
	// Late says a payment arrived after the checkout expired.
	Late            bool         `json:"late,omitempty"`
	TransactionHash *string      `json:"transactionHash,omitempty"`
	ExpiresAt       apitime.Time `json:"expiresAt"`
	PaymentURI      string       `json:"paymentUri"`
	// SolanaPayReference is a Solana checkout's reference key, also in
	// PaymentURI: the watcher finds the payment by it.
	SolanaPayReference string `json:"solanaPayReference,omitempty"`
	Version            int    `json:"version"`
}

// OfPublicCheckout renders a checkout's public view.
func OfPublicCheckout(c *widget.PublicState) *PublicCheckout {
	v := c.Voucher
	p := v.ExpectedPayment
	out := &PublicCheckout{
		ID: v.ID, BusinessName: c.BusinessName, Amount: p.Amount, AmountAtomic: c.AmountAtomic,
		Currency: p.Currency, CurrencyAddress: p.CurrencyAddress, Decimals: c.Token.Decimals, Native: c.Token.Native,
		Network: p.Network, NetworkType: c.Network.Type, ChainID: c.Network.ChainID, PayeeAddress: p.Wallet.Address,
		Status: c.Status, Settlement: SettlementOf(v), Deposit: DepositOf(v), Remaining: c.Remaining, RemainingAtomic: c.RemainingAtomic, Late: v.Settlement.Late(), ExpiresAt: apitime.From(v.ExpiresAt), PaymentURI: c.PaymentURI, Version: v.Version,
	}
	if r := v.SolanaPayReference; r != nil {
		out.SolanaPayReference = *r
	}
	for _, r := range v.Receipts {
		if r.TransactionHash != "" {
			h := r.TransactionHash
			out.TransactionHash = &h
		}
	}
	return out
}
