package voucher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
)

// The input types are the request bodies of both doors: REST decodes JSON
// into them strictly and gqlgen binds the GraphQL input types to them, so one
// validation path serves both.

// ReserveInput is the reserve-voucher body.
type ReserveInput struct {
	// Code is the payer's 6-character context code.
	Code string `json:"code"`
	// BusinessID reserves on behalf of a business the caller is an ACTIVE
	// member of.
	BusinessID *string `json:"businessId,omitempty"`
}

// WalletInput holds an address.
type WalletInput struct {
	Address string `json:"address"`
}

// PaymentInput is a token payment as a client sends it (expectedPayment,
// suppliedPayment).
type PaymentInput struct {
	Network         string       `json:"network"`
	Currency        string       `json:"currency"`
	CurrencyAddress string       `json:"currencyAddress"`
	Amount          string       `json:"amount"`
	Wallet          *WalletInput `json:"wallet"`
}

// NetworkInput is one CUSTOM network.
type NetworkInput struct {
	Network string `json:"network"`
	Type    string `json:"type"`
	ChainID string `json:"chainId"`
}

// TransactionInputInput is what a CUSTOM payment asks the wallet to send.
type TransactionInputInput struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Value string `json:"value"`
	Data  string `json:"data"`
}

// CustomPaymentInput is one CUSTOM payment instruction.
type CustomPaymentInput struct {
	Type  string                 `json:"type"`
	Input *TransactionInputInput `json:"input"`
}

// RedeemInput is the redeem-voucher body: exactly one of the SIMPLE form
// (ExpectedPayment) and the CUSTOM form (Networks, Payments, Extras,
// PayeeInfo).
type RedeemInput struct {
	ExpectedPayment *PaymentInput        `json:"expectedPayment,omitempty"`
	Networks        []NetworkInput       `json:"networks,omitempty"`
	Payments        []CustomPaymentInput `json:"payments,omitempty"`
	Extras          []json.RawMessage    `json:"extras,omitempty"`
	PayeeInfo       json.RawMessage      `json:"payeeInfo,omitempty"`
}

// NegotiateInput is the negotiate-voucher body.
type NegotiateInput struct {
	SuppliedPayment *PaymentInput `json:"suppliedPayment"`
}

// ReceiptInput is one receipt of resolve-voucher.
type ReceiptInput struct {
	PaymentID       string  `json:"paymentId"`
	TransactionHash *string `json:"transactionHash,omitempty"`
	// Amount is what this transaction paid, a decimal string in the
	// currency the payer pays (supplied if negotiated, else expected).
	Amount *string `json:"amount,omitempty"`
}

// ResolveInput is the resolve-voucher body.
type ResolveInput struct {
	Receipts []ReceiptInput `json:"receipts"`
}

// InteropInitInput is interop-init's query parameters (ID, PaymentIndex,
// Vid) and body (Signature).
type InteropInitInput struct {
	// ID is the caller's signature submission id (?id=).
	ID           string  `json:"id"`
	PaymentIndex *int    `json:"paymentIndex,omitempty"`
	Vid          *string `json:"vid,omitempty"`
	Signature    *string `json:"signature,omitempty"`
}

// Bounds of the spec's limits table.
const (
	MaxNetworks      = 3
	MaxExtras        = 5
	MaxReceipts      = 5
	MaxPaymentIndex  = 10
	MaxSignatureLen  = 256
	MaxSubmissionID  = 128
	MaxTxHashLen     = 128
	MaxExtraTypeLen  = 64
	payerPlaceholder = "{payer}"
	sendTransaction  = "send_transaction"
)

var digitsRe = regexp.MustCompile(`^[0-9]+$`)

// redemption is a validated redeem body, ready to store.
type redemption struct {
	typ       string
	expected  *payment.Payment
	networks  []payment.Network
	payments  []payment.CustomPayment
	extras    []json.RawMessage
	payeeInfo json.RawMessage
}

// present reports whether a raw JSON value was supplied (null counts as absent).
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// parseRedeem validates a redeem body against the registry: which form it
// is, its bounds, and every field of that form. Every problem is reported
// at once.
func parseRedeem(reg *finance.Registry, in RedeemInput) (*redemption, error) {
	var v apperr.Validator
	simple := in.ExpectedPayment != nil
	custom := in.Networks != nil || in.Payments != nil || in.Extras != nil
	switch {
	case simple && custom:
		v.Add("expectedPayment", "give either expectedPayment (SIMPLE) or networks, payments and extras (CUSTOM), not both")
		return nil, v.Err()
	case !simple && !custom:
		v.Add("expectedPayment", "give expectedPayment (SIMPLE) or networks and payments (CUSTOM)")
		return nil, v.Err()
	}
	if simple {
		if present(in.PayeeInfo) {
			v.Add("payeeInfo", "belongs to the CUSTOM form")
		}
		p, ok := checkPayment(reg, &v, "expectedPayment", in.ExpectedPayment)
		if !ok || v.Failed() {
			return nil, v.Err()
		}
		p.ID = ids.New(ids.Payment)
		return &redemption{typ: payment.TypeSimple, expected: p}, nil
	}

	r := &redemption{typ: payment.TypeCustom}
	types := map[string]bool{}
	switch n := len(in.Networks); {
	case in.Networks == nil:
		v.Add("networks", "is required")
	case n < 1 || n > MaxNetworks:
		v.Add("networks", fmt.Sprintf("must have 1 to %d items", MaxNetworks))
	default:
		seen := map[string]bool{}
		for i, n := range in.Networks {
			at := fmt.Sprintf("networks[%d]", i)
			if nw, ok := checkNetwork(reg, &v, at, n); ok {
				if seen[nw.Network] {
					v.Add(at+".network", "duplicate network")
					continue
				}
				seen[nw.Network] = true
				types[nw.Type] = true
				r.networks = append(r.networks, nw)
			}
		}
	}
	switch n := len(in.Payments); {
	case in.Payments == nil:
		v.Add("payments", "is required")
	case n != 1:
		v.Add("payments", "must have exactly 1 item")
	default:
		for i, p := range in.Payments {
			if cp, ok := checkCustomPayment(&v, fmt.Sprintf("payments[%d]", i), p, types); ok {
				r.payments = append(r.payments, cp)
			}
		}
	}
	if len(in.Extras) > MaxExtras {
		v.Add("extras", fmt.Sprintf("must have 0 to %d items", MaxExtras))
	} else {
		r.extras = make([]json.RawMessage, 0, len(in.Extras))
		for i, e := range in.Extras {
			at := fmt.Sprintf("extras[%d]", i)
			c, ok := checkExtra(&v, at, e)
			if ok {
				r.extras = append(r.extras, c)
			}
		}
	}
	if present(in.PayeeInfo) {
		if !isObject(in.PayeeInfo) {
			v.Add("payeeInfo", "must be a JSON object")
		} else {
			var buf bytes.Buffer
			_ = json.Compact(&buf, in.PayeeInfo) // valid: isObject checked it
			r.payeeInfo = buf.Bytes()
		}
	}
	if v.Failed() {
		return nil, v.Err()
	}
	return r, nil
}

// checkPayment validates a token payment against the registry and returns
// it in stored form: the registry's currency address, the canonical amount,
// an EVM wallet in its checksum form.
func checkPayment(reg *finance.Registry, v *apperr.Validator, prefix string, in *PaymentInput) (*payment.Payment, bool) {
	if in == nil {
		v.Add(prefix, "is required")
		return nil, false
	}
	wallet := ""
	if in.Wallet != nil {
		wallet = in.Wallet.Address
	}
	tok, amount, ok := reg.CheckPayment(v, prefix, finance.Payment{
		Network: in.Network, Currency: in.Currency, CurrencyAddress: in.CurrencyAddress,
		Amount: in.Amount, WalletAddress: wallet,
	})
	if !ok {
		return nil, false
	}
	n, _ := reg.Network(tok.Network)
	return &payment.Payment{
		Network:         tok.Network,
		Currency:        tok.Currency,
		CurrencyAddress: tok.CurrencyAddress,
		Amount:          money.Format(amount),
		Wallet:          payment.Wallet{Address: canonicalAddress(n.Type, wallet)},
	}, true
}

// canonicalAddress stores EVM addresses in their EIP-55 form (the address
// was validated, so a mixed-case one already is); Solana's base58 is
// case-sensitive and kept as given.
func canonicalAddress(networkType, addr string) string {
	if networkType == chain.TypeEVM {
		return chain.ChecksumAddress(addr)
	}
	return addr
}

func checkNetwork(reg *finance.Registry, v *apperr.Validator, at string, in NetworkInput) (payment.Network, bool) {
	ok := true
	fail := func(field, reason string) { v.Add(at+"."+field, reason); ok = false }
	known, isKnown := reg.Network(in.Network)
	switch {
	case in.Network == "":
		fail("network", "is required")
	case !isKnown:
		fail("network", "unknown network")
	}
	switch {
	case in.Type == "":
		fail("type", "is required")
	case !chain.KnownType(in.Type):
		fail("type", chain.ErrUnknownType.Error())
	case isKnown && in.Type != known.Type:
		fail("type", fmt.Sprintf("network %s is of type %s", known.Name, known.Type))
	}
	switch {
	case in.ChainID == "":
		fail("chainId", "is required")
	case in.Type == chain.TypeEVM && !digitsRe.MatchString(in.ChainID):
		fail("chainId", "must be digits for an evm network")
	case isKnown && in.ChainID != known.ChainID:
		fail("chainId", fmt.Sprintf("network %s has chain id %s", known.Name, known.ChainID))
	}
	if !ok {
		return payment.Network{}, false
	}
	return payment.Network{Network: known.Name, Type: known.Type, ChainID: known.ChainID}, true
}

// checkCustomPayment validates one send_transaction instruction. types are
// the valid networks' types: "to" must be an address on one of them.
func checkCustomPayment(v *apperr.Validator, at string, in CustomPaymentInput, types map[string]bool) (payment.CustomPayment, bool) {
	ok := true
	fail := func(field, reason string) { v.Add(at+"."+field, reason); ok = false }
	switch in.Type {
	case "":
		fail("type", "is required")
	case sendTransaction:
	default:
		fail("type", `must be "`+sendTransaction+`"`)
	}
	if in.Input == nil {
		fail("input", "is required")
		return payment.CustomPayment{}, false
	}
	tx := in.Input
	switch tx.From {
	case "":
		fail("input.from", "is required")
	case payerPlaceholder:
	default:
		fail("input.from", `must be the literal "`+payerPlaceholder+`"`)
	}
	to := tx.To
	switch {
	case tx.To == "":
		fail("input.to", "is required")
	case len(types) > 0:
		var firstErr error
		matched := false
		for _, t := range []string{chain.TypeEVM, chain.TypeSolana} {
			if !types[t] {
				continue
			}
			err := chain.ValidateAddress(t, tx.To)
			if err == nil {
				matched = true
				to = canonicalAddress(t, tx.To)
				break
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if !matched {
			fail("input.to", firstErr.Error())
		}
	}
	if err := money.CheckInteger(tx.Value); err != nil {
		fail("input.value", err.Error())
	}
	if err := money.CheckHexData(tx.Data); err != nil {
		fail("input.data", err.Error())
	}
	if !ok {
		return payment.CustomPayment{}, false
	}
	return payment.CustomPayment{
		ID:    ids.New(ids.Payment),
		Type:  sendTransaction,
		Input: payment.TransactionInput{From: payerPlaceholder, To: to, Value: tx.Value, Data: tx.Data},
	}, true
}

// checkExtra accepts a JSON object with a "type" string, the one part of an
// extra the spec shows (e.g. call_transaction), and stores it compacted.
func checkExtra(v *apperr.Validator, at string, raw json.RawMessage) (json.RawMessage, bool) {
	if !isObject(raw) {
		v.Add(at, "must be a JSON object")
		return nil, false
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		v.Add(at+".type", "must be a string")
		return nil, false
	}
	switch {
	case head.Type == nil || *head.Type == "":
		v.Add(at+".type", "is required")
		return nil, false
	case utf8.RuneCountInString(*head.Type) > MaxExtraTypeLen:
		v.Add(at+".type", fmt.Sprintf("must be at most %d characters", MaxExtraTypeLen))
		return nil, false
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, raw) // valid: isObject checked it
	return buf.Bytes(), true
}

// parseSupplied validates a negotiate body.
func parseSupplied(reg *finance.Registry, in NegotiateInput) (*payment.Payment, error) {
	var v apperr.Validator
	p, ok := checkPayment(reg, &v, "suppliedPayment", in.SuppliedPayment)
	if !ok || v.Failed() {
		return nil, v.Err()
	}
	return p, nil
}

// checkReceiptsShape validates what a resolve body says on its own: the
// count, required ids, hash lengths and amount syntax. Checks against the
// voucher (which payment, which token's precision) come after its state.
func checkReceiptsShape(in ResolveInput) error {
	var v apperr.Validator
	switch n := len(in.Receipts); {
	case in.Receipts == nil:
		v.Add("receipts", "is required")
	case n < 1 || n > MaxReceipts:
		v.Add("receipts", fmt.Sprintf("must have 1 to %d items", MaxReceipts))
	}
	for i, r := range in.Receipts {
		at := fmt.Sprintf("receipts[%d]", i)
		if r.PaymentID == "" {
			v.Add(at+".paymentId", "is required")
		}
		if r.TransactionHash != nil {
			if n := utf8.RuneCountInString(*r.TransactionHash); n < 1 || n > MaxTxHashLen {
				v.Add(at+".transactionHash", fmt.Sprintf("must be 1 to %d characters", MaxTxHashLen))
			}
		}
		if r.Amount != nil {
			if _, err := money.ParseAnyScale(*r.Amount); err != nil {
				v.Add(at+".amount", err.Error())
			}
		}
	}
	return v.Err()
}

// checkInteropShape validates interop-init's parameters and body.
func checkInteropShape(in InteropInitInput) error {
	var v apperr.Validator
	switch n := utf8.RuneCountInString(in.ID); {
	case n == 0:
		v.Add("id", "is required")
	case n > MaxSubmissionID:
		v.Add("id", fmt.Sprintf("must be at most %d characters", MaxSubmissionID))
	}
	if in.PaymentIndex != nil && (*in.PaymentIndex < 0 || *in.PaymentIndex > MaxPaymentIndex) {
		v.Add("paymentIndex", fmt.Sprintf("must be an integer from 0 to %d", MaxPaymentIndex))
	}
	if in.Signature != nil {
		if n := utf8.RuneCountInString(*in.Signature); n < 1 || n > MaxSignatureLen {
			v.Add("signature", fmt.Sprintf("must be 1 to %d characters", MaxSignatureLen))
		}
	}
	return v.Err()
}
