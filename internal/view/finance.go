package view

import "github.com/voucherd/voucherd/internal/finance"

// Currency is one token of the registry on REST (GET /api/v1/finance/currencies).
type Currency struct {
	Network         string `json:"network"`
	Currency        string `json:"currency"`
	CurrencyAddress string `json:"currencyAddress"`
	Decimals        int32  `json:"decimals"`
	Native          bool   `json:"native"`
}

// OfCurrency renders a registry token for REST.
func OfCurrency(t finance.Token) Currency {
	return Currency{Network: t.Network, Currency: t.Currency, CurrencyAddress: t.CurrencyAddress, Decimals: t.Decimals, Native: t.Native}
}

// Rates is the body of GET /api/v1/finance/rates.
type Rates struct {
	Base      string                `json:"base"`
	Rates     map[string]string     `json:"rates"`
	UpdatedAt string                `json:"updatedAt"`
	Sources   map[string]RateSource `json:"sources"`
}

// RateSource is one price's origin.
type RateSource struct {
	Source    string `json:"source"`
	UpdatedAt string `json:"updatedAt"`
}

// OfRates renders the prices for REST.
func OfRates(r finance.Rates) Rates {
	out := Rates{Base: r.Base, Rates: r.Rates, UpdatedAt: r.UpdatedAt}
	if r.Sources != nil {
		out.Sources = make(map[string]RateSource, len(r.Sources))
	}
	for c, s := range r.Sources {
		out.Sources[c] = RateSource{Source: s.Source, UpdatedAt: s.UpdatedAt}
	}
	return out
}
