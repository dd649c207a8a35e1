// Package payment holds the value objects a voucher carries: the payments it
// expects or is offered, CUSTOM transaction instructions, and the receipts
// that resolve it. They are stored inside the voucher row (a voucher and its
// payments change together, so a transition stays one conditional UPDATE) and
// rendered with the same JSON names on REST and GraphQL.
package payment

import "encoding/json"

// Voucher types.
const (
	TypeSimple = "SIMPLE"
	TypeCustom = "CUSTOM"
)

// Wallet holds an on-chain address.
type Wallet struct {
	Address string `json:"address"`
}

// Payment is a token payment: expectedPayment or suppliedPayment.
type Payment struct {
	ID              string `json:"id"`
	Network         string `json:"network"`
	Currency        string `json:"currency"`
	CurrencyAddress string `json:"currencyAddress"`
	// Amount is a canonical decimal string, never a float.
	Amount string `json:"amount"`
	Wallet Wallet `json:"wallet"`
}

// Network is one CUSTOM network entry.
type Network struct {
	Network string `json:"network"`
	Type    string `json:"type"`
	ChainID string `json:"chainId"`
}

// TransactionInput is what a CUSTOM payment asks the wallet to send.
type TransactionInput struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Value string `json:"value"`
	Data  string `json:"data"`
}

// CustomPayment is one CUSTOM payment instruction.
type CustomPayment struct {
	ID    string           `json:"id"`
	Type  string           `json:"type"`
	Input TransactionInput `json:"input"`
}

// Receipt is the payer's evidence for (part of) a payment.
type Receipt struct {
	PaymentID       string `json:"paymentId"`
	TransactionHash string `json:"transactionHash,omitempty"`
	// Amount, when given, is what this transaction paid (decimal string).
	Amount string `json:"amount,omitempty"`
}

// Extras and payee information are opaque JSON objects the spec leaves open.
type (
	Extra     = json.RawMessage
	PayeeInfo = json.RawMessage
)

// Accept is a token a widget takes: a network and a currency of the
// registry.
type Accept struct {
	Network  string `json:"network"`
	Currency string `json:"currency"`
}

// NetworkWallet is a payout wallet on one network.
type NetworkWallet struct {
	Network string `json:"network"`
	Address string `json:"address"`
}
