package widget

import (
	"context"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	entwidget "github.com/voucherd/voucherd/ent/widget"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/voucher"
)

var (
	errUnauthorized = apperr.New(apperr.Unauthorized, "send the widget's client secret in X-Client-Secret, or a member's bearer token")
	errInactive     = apperr.New(apperr.BusinessInactive, "the widget or its business is inactive")
)

// authorize decides whether the caller may use widget id's public
// operations: with clientSecret (the X-Client-Secret header, "" when
// absent) that must be the widget's, else with the bearer token of an
// ACTIVE member of its business or an API key of it. A wrong or missing secret is
// unauthorized; another widget's secret is not_found (it authenticates, but
// not for this widget), as is a token of someone who is no member.
func (s *Service) authorize(ctx context.Context, id, clientSecret string) (*ent.Widget, error) {
	if clientSecret != "" {
		if !wellFormedSecret(clientSecret) {
			return nil, errUnauthorized
		}
		h := hashOf(clientSecret)
		w, err := s.db.Widget.Get(ctx, id)
		if err != nil && !ent.IsNotFound(err) {
			return nil, apperr.InternalError(err)
		}
		if w != nil && sameHash(w.SecretHash, h) {
			return w, nil
		}
		other, err := s.db.Widget.Query().Where(entwidget.SecretHash(h)).Exist(ctx)
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		if other {
			return nil, errNotFound
		}
		return nil, errUnauthorized
	}
	p := auth.FromContext(ctx)
	if p == nil {
		return nil, errUnauthorized
	}
	if p.Kind != auth.KindUser && !p.IsAPIKey() {
		return nil, errNotFound
	}
	return s.memberWidget(ctx, p, id)
}

// PublicConfig is a widget's public configuration (GET
// /api/v1/widgets/:widgetId/config, rendered by view.OfWidgetConfig): the
// widget, its business's name and the tokens it still accepts.
type PublicConfig struct {
	Widget       *ent.Widget
	BusinessName string
	// Accepted are the widget's tokens the registry still lists, each with
	// its network's chain id (what a client needs to ask a wallet for it).
	Accepted []Accepted
}

// Accepted is one token a widget accepts.
type Accepted struct {
	Token   finance.Token
	ChainID string
}

// Config returns the widget's public configuration. It answers for an
// INACTIVE widget too (its status says so).
func (s *Service) Config(ctx context.Context, id, clientSecret string) (*PublicConfig, error) {
	w, b, err := s.authorizeWithBusiness(ctx, id, clientSecret)
	if err != nil {
		return nil, err
	}
	out := &PublicConfig{Widget: w, BusinessName: b.Name}
	for _, a := range w.Accepts {
		tok, ok := s.reg.Token(a.Network, a.Currency)
		n, nok := s.reg.Network(a.Network)
		if !ok || !nok {
			continue // the registry dropped it since: not accepted any more
		}
		out.Accepted = append(out.Accepted, Accepted{Token: tok, ChainID: n.ChainID})
	}
	return out, nil
}

// CheckoutInput is the create-checkout body.
type CheckoutInput struct {
	Network   string  `json:"network"`
	Currency  string  `json:"currency"`
	Amount    string  `json:"amount"`
	Reference *string `json:"reference,omitempty"`
}

// NewCheckout is a checkout just made (rendered by view.OfCheckout): its
// voucher and the URL of its hosted page, absolute when the service knows
// its public URL, else the path (the door completes it).
type NewCheckout struct {
	Voucher *ent.Voucher
	URL     string
}

// CheckoutPath is the hosted page of a checkout token.
func CheckoutPath(token string) string { return "/checkout/" + token }

// CreateCheckout makes a checkout for the widget: a business voucher of its
// business, REDEEMED as SIMPLE with the widget's wallet for the network,
// and a checkout token for its hosted page.
func (s *Service) CreateCheckout(ctx context.Context, id, clientSecret string, in CheckoutInput) (*NewCheckout, error) {
	w, b, err := s.authorizeWithBusiness(ctx, id, clientSecret)
	if err != nil {
		return nil, err
	}
	if w.Status != entwidget.StatusACTIVE || b.Status != entbusiness.StatusACTIVE {
		return nil, errInactive
	}
	var v apperr.Validator
	if v.Check(in.Network != "", "network", "is required") && v.Check(in.Currency != "", "currency", "is required") {
		accepted := false
		for _, a := range w.Accepts {
			accepted = accepted || (a.Network == in.Network && a.Currency == in.Currency)
		}
		v.Check(accepted, "currency", fmt.Sprintf("the widget does not accept %s on %s", in.Currency, in.Network))
	}
	tok, known := s.reg.Token(in.Network, in.Currency)
	switch {
	case in.Amount == "":
		v.Add("amount", "is required")
	case known:
		if d, err := money.Parse(in.Amount, tok.Decimals); err != nil {
			v.Add("amount", err.Error())
		} else if !d.IsPositive() {
			v.Add("amount", "must be greater than zero")
		}
	default:
		if _, err := money.ParseAnyScale(in.Amount); err != nil {
			v.Add("amount", err.Error())
		}
	}
	if in.Reference != nil {
		checkReference(&v, *in.Reference)
	}
	wallet := ""
	for _, x := range w.Wallets {
		if x.Network == in.Network {
			wallet = x.Address
		}
	}
	if !v.Failed() && (!known || wallet == "") {
		v.Add("network", "the widget has no wallet on this network")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	token, hash, err := newToken()
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	in2 := voucher.CheckoutInput{
		BusinessID: b.ID, WidgetID: w.ID, SessionID: w.SessionID,
		Payment: voucher.PaymentInput{
			Network: tok.Network, Currency: tok.Currency, CurrencyAddress: tok.CurrencyAddress,
			Amount: in.Amount, Wallet: &voucher.WalletInput{Address: wallet},
		},
		Reference: in.Reference, TokenHash: hash,
	}
	switch n, _ := s.reg.Network(tok.Network); {
	case n.DepositFactory != "":
		in2.WatchNetwork, in2.DepositFor = n.Name, DepositFor(n.DepositFactory, wallet)
	case n.Type == chain.TypeSolana:
		// The widget's wallet is paid directly; the reference names the
		// checkout in the payment, and the watcher finds it by that.
		if in2.SolanaPayReference, err = newSolanaPayReference(); err != nil {
			return nil, apperr.InternalError(err)
		}
		in2.WatchNetwork = n.Name
	}
	vch, err := s.vouchers.CreateCheckout(ctx, in2)
	if err != nil {
		return nil, err
	}
	return &NewCheckout{Voucher: vch, URL: s.publicURL + CheckoutPath(token)}, nil
}

// DepositFor gives each checkout paying out to payout its own deposit
// address under factory: a forwarder that can only send to payout
// (DepositFactory.flush).
func DepositFor(factory, payout string) func(voucherID string) *payment.Deposit {
	f, p := common.HexToAddress(factory), common.HexToAddress(payout)
	return func(voucherID string) *payment.Deposit {
		return &payment.Deposit{
			Address:       deposit.ForVoucher(f, p, voucherID).Hex(),
			PayoutAddress: p.Hex(),
			Factory:       f.Hex(),
			Sweep:         payment.Sweep{Status: payment.SweepNone},
		}
	}
}

func checkReference(v *apperr.Validator, ref string) { v.Text("reference", ref, MaxReferenceLength) }

// Page statuses: the hosted page's root data-status (docs/widgets.md).
const (
	StatusAwaitingPayment = "awaiting_payment"
	StatusPending         = "pending"
	StatusConfirmed       = "confirmed"
	StatusUnderpaid       = "underpaid"
	StatusOverpaid        = "overpaid"
	StatusFailed          = "failed"
	StatusExpired         = "expired"
)

// PublicState is a checkout voucher as its public view shows it (GET
// /api/v1/checkout/:token, the hosted page, its live events; rendered by
// view.OfPublicCheckout): the voucher, its business's name, and what the
// page rules and the registry make of it.
type PublicState struct {
	Voucher      *ent.Voucher
	BusinessName string
	// Status is the page status (PageStatus).
	Status string
	// Token and Network are the registry's entries for the payment (zero
	// when it no longer lists them).
	Token   finance.Token
	Network finance.Network
	// AmountAtomic is the amount in the token's smallest unit (wei,
	// lamports); PaymentURI the wallet link for it (PaymentURI).
	AmountAtomic string
	PaymentURI   string
	// Remaining is what is left to pay (decimal) while the settlement is
	// PENDING with a paid amount below the due one; empty otherwise.
	// RemainingAtomic is the same in the token's smallest unit. PaymentURI
	// then asks for Remaining, not Amount: a customer who scans the code
	// again, or pays with a browser wallet again, pays what is missing
	// instead of the whole amount a second time.
	Remaining       string
	RemainingAtomic string
}

// Checkout returns the public view of the checkout of token; an unknown
// token is not_found.
func (s *Service) Checkout(ctx context.Context, token string) (*PublicState, error) {
	v, err := s.vouchers.Checkout(ctx, TokenHash(token))
	if err != nil {
		return nil, err
	}
	return s.Public(ctx, v)
}

// SubmitPaymentInput is the submit-payment body.
type SubmitPaymentInput struct {
	TransactionHash string `json:"transactionHash"`
}

// SubmitPayment is the customer's receipt: it resolves the checkout's
// voucher as its payer would, with the transaction's hash.
func (s *Service) SubmitPayment(ctx context.Context, token string, in SubmitPaymentInput) (*PublicState, error) {
	v, err := s.vouchers.SubmitCheckoutPayment(ctx, TokenHash(token), strings.TrimSpace(in.TransactionHash))
	if err != nil {
		return nil, err
	}
	return s.Public(ctx, v)
}

// CheckoutVoucher returns the voucher of the checkout token (not_found for
// an unknown token) with its business's name, for the hosted page and its
// live events, which render later states with PublicOf.
func (s *Service) CheckoutVoucher(ctx context.Context, token string) (*ent.Voucher, string, error) {
	v, err := s.vouchers.Checkout(ctx, TokenHash(token))
	if err != nil {
		return nil, "", err
	}
	if v.BusinessID == nil || v.ExpectedPayment == nil {
		return nil, "", apperr.InternalError(fmt.Errorf("widget: voucher %s is not a checkout", v.ID))
	}
	name, err := s.db.Business.Query().Where(entbusiness.ID(*v.BusinessID)).Select(entbusiness.FieldName).String(ctx)
	if err != nil {
		return nil, "", apperr.InternalError(err)
	}
	return v, name, nil
}

// PublicOf renders a checkout voucher's public view for a known business
// name (a live event renders each change of the voucher it follows).
func (s *Service) PublicOf(v *ent.Voucher, businessName string) *PublicState {
	return s.publicView(v, businessName)
}

// Public renders a checkout voucher's public view.
func (s *Service) Public(ctx context.Context, v *ent.Voucher) (*PublicState, error) {
	if v.ExpectedPayment == nil || v.BusinessID == nil {
		return nil, apperr.InternalError(fmt.Errorf("widget: voucher %s is not a checkout", v.ID))
	}
	name, err := s.db.Business.Query().Where(entbusiness.ID(*v.BusinessID)).Select(entbusiness.FieldName).String(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return s.publicView(v, name), nil
}

func (s *Service) publicView(v *ent.Voucher, businessName string) *PublicState {
	p := v.ExpectedPayment
	out := &PublicState{Voucher: v, BusinessName: businessName, Status: PageStatus(v)}
	if tok, ok := s.reg.Token(p.Network, p.Currency); ok {
		out.Token = tok
	}
	if n, ok := s.reg.Network(p.Network); ok {
		out.Network = n
	}
	out.AmountAtomic = atomicAmount(p.Amount, out.Token.Decimals)
	if st := v.Settlement; st != nil && st.Status == payment.SettlementPending && st.PaidAmount != "" {
		paid, perr := money.ParseAnyScale(st.PaidAmount)
		due, derr := money.ParseAnyScale(p.Amount)
		if perr == nil && derr == nil && paid.IsPositive() && paid.LessThan(due) {
			out.Remaining = money.Format(due.Sub(paid))
			out.RemainingAtomic = atomicAmount(out.Remaining, out.Token.Decimals)
		}
	}
	toPay := p.Amount
	if out.Remaining != "" {
		toPay = out.Remaining
	}
	ref := ""
	if v.SolanaPayReference != nil {
		ref = *v.SolanaPayReference
	}
	out.PaymentURI = PaymentURI(out.Network.Type, out.Network.ChainID, out.Token.Native, p.CurrencyAddress, p.Wallet.Address, toPay, out.Token.Decimals, ref)
	return out
}

// PageStatus is a checkout's page status: awaiting_payment while it can be
// paid, expired or failed when it ended unpaid, and once the customer
// submitted a payment what its settlement says (pending until the chain
// has confirmed it; docs/settlement.md).
func PageStatus(v *ent.Voucher) string {
	switch v.Status {
	case entvoucher.StatusREDEEMED, entvoucher.StatusRESERVED:
		return StatusAwaitingPayment
	case entvoucher.StatusDISCARDED:
		if v.Settlement != nil && v.Settlement.Verified {
			// A payment the watcher found after the checkout ended (a
			// late payment): the page shows what the chain says of it.
			break
		}
		if v.DiscardReason != nil && *v.DiscardReason == voucher.ReasonExpired {
			return StatusExpired
		}
		return StatusFailed
	}
	settlement := ""
	if v.Settlement != nil {
		settlement = v.Settlement.Status
	}
	switch settlement {
	case payment.SettlementConfirmed:
		return StatusConfirmed
	case payment.SettlementUnderpaid:
		return StatusUnderpaid
	case payment.SettlementOverpaid:
		return StatusOverpaid
	case payment.SettlementFailed:
		return StatusFailed
	}
	return StatusPending
}
