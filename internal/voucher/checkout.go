package voucher

import (
	"context"
	"fmt"
	"regexp"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
)

// CheckoutInput is a checkout as internal/widget hands it over, once it has
// authorized the caller (the widget's client secret or an ACTIVE member's
// token), checked that the business and widget are ACTIVE and that the
// widget accepts the token, and drawn the checkout token.
type CheckoutInput struct {
	BusinessID string
	WidgetID   string
	// SessionID is the widget's checkout context (never live).
	SessionID string
	// Payment is the expected payment: the widget's wallet for its network.
	Payment   PaymentInput
	Reference *string
	// TokenHash is the hash of the checkout token; the token itself is
	// never stored.
	TokenHash string
	// DepositFor, when set (a network whose finance entry names a
	// depositFactory), gives the checkout of voucher id its deposit
	// address: the expected payment's wallet becomes the deposit address,
	// the voucher keeps the deposit, and the watcher looks for payments to
	// it on WatchNetwork.
	DepositFor func(voucherID string) *payment.Deposit
	// SolanaPayReference is a Solana checkout's reference key (base58 of
	// 32 bytes), empty on other networks; the watcher looks for payments
	// naming it on WatchNetwork.
	SolanaPayReference string
	// WatchNetwork is the network the watcher looks for the checkout's
	// payments on (a checkout with a deposit address or a Solana Pay
	// reference); empty for others.
	WatchNetwork string
}

// kindCheckout is the principal that stands for a checkout's customer: the
// holder of its checkout token. It never comes from a bearer token.
const kindCheckout auth.Kind = "checkout"

// CreateCheckout creates a business voucher that is REDEEMED at once as
// SIMPLE with in.Payment: a checkout. Its payee is the widget and its payer
// a fresh chk_ id standing for whoever holds the checkout token, so the
// customer resolves it as a payer would (SubmitCheckoutPayment) and nobody
// else can. deposit.created is recorded in the same transaction.
func (s *Service) CreateCheckout(ctx context.Context, in CheckoutInput) (*ent.Voucher, error) {
	var v apperr.Validator
	p, ok := checkPayment(s.reg, &v, "expectedPayment", &in.Payment)
	if !ok || v.Failed() {
		return nil, v.Err()
	}
	p.ID = ids.New(ids.Payment)
	if in.BusinessID == "" || in.WidgetID == "" || in.SessionID == "" || in.TokenHash == "" {
		return nil, apperr.InternalError(fmt.Errorf("voucher: checkout without business, widget, session or token"))
	}
	now := s.clock()
	payer := ids.New(ids.Checkout)
	id := ids.New(ids.Voucher)
	var dep *payment.Deposit
	if in.DepositFor != nil {
		if dep = in.DepositFor(id); dep == nil || in.WatchNetwork == "" {
			return nil, apperr.InternalError(fmt.Errorf("voucher: checkout %s: no deposit address", id))
		}
		p.Wallet.Address = dep.Address
	}
	// A code live on another voucher (or, never in practice, a repeated
	// token hash) violates a unique index: createWithCode draws again.
	return s.createWithCode(ctx, now, func(tx *ent.Tx, vcode string) (*ent.Voucher, error) {
		c := tx.Voucher.Create().SetID(id).
			SetCode(vcode).SetLiveCode(vcode).
			SetStatus(entvoucher.StatusREDEEMED).SetType(entvoucher.TypeSIMPLE).
			SetSessionID(in.SessionID).SetPayerID(payer).SetPayeeID(in.WidgetID).
			SetBusinessID(in.BusinessID).SetWidgetID(in.WidgetID).
			SetNillableReference(in.Reference).SetCheckoutTokenHash(in.TokenHash).
			SetNillableSolanaPayReference(nonEmpty(in.SolanaPayReference)).
			SetExpiresAt(now.Add(s.ttl)).SetCreatedAt(now).SetUpdatedAt(now)
		if in.WatchNetwork != "" {
			c.SetWatchNetwork(in.WatchNetwork)
		}
		created, err := c.Save(ctx)
		if err != nil {
			return nil, err
		}
		// The payment and the deposit go in as redeem writes JSON
		// (jsonArg): ent's JSON bytes reach PostgreSQL's jsonb in
		// binary form, which it refuses.
		arg, err := jsonArg(s.db.Dialect, p)
		if err != nil {
			return nil, err
		}
		var darg any
		if dep != nil {
			if darg, err = jsonArg(s.db.Dialect, dep); err != nil {
				return nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE vouchers SET expected_payment = ?, deposit = ? WHERE id = ?"), arg, darg, created.ID); err != nil {
			return nil, err
		}
		created.ExpectedPayment, created.Deposit = p, dep
		return created, s.events.VoucherChanged(ctx, tx, nil, created)
	})
}

var errNoCheckout = apperr.New(apperr.NotFound, "checkout not found")

// Checkout returns the voucher whose checkout token hashes to tokenHash, as
// every read shows it (past its expiry it reads DISCARDED, reason expired).
// An unknown token is not_found.
func (s *Service) Checkout(ctx context.Context, tokenHash string) (*ent.Voucher, error) {
	if tokenHash == "" {
		return nil, errNoCheckout
	}
	v, err := s.db.Voucher.Query().Where(entvoucher.CheckoutTokenHash(tokenHash)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errNoCheckout
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return v, nil
}

var (
	evmTxHashRe = regexp.MustCompile(`^0x[0-9a-fA-F]{64}$`)
)

// checkTxHash is the shape of a transaction id on a network of type typ:
// evm 0x and 64 hex digits; solana a base58 signature of 64 bytes.
func checkTxHash(typ, h string) error {
	switch typ {
	case chain.TypeEVM:
		if !evmTxHashRe.MatchString(h) {
			return fmt.Errorf("must be 0x and 64 hex digits")
		}
	case chain.TypeSolana:
		b, err := chain.DecodeBase58(h)
		if err != nil || len(b) != 64 {
			return fmt.Errorf("must be a base58 transaction signature (64 bytes)")
		}
	}
	return nil
}

// SubmitCheckoutPayment is the customer's receipt for the checkout whose
// token hashes to tokenHash: it resolves the voucher exactly as its payer
// would with one receipt naming txHash (no amount: what was paid is for the
// chain to say). The hash must have its network's shape.
func (s *Service) SubmitCheckoutPayment(ctx context.Context, tokenHash, txHash string) (*ent.Voucher, error) {
	v, err := s.Checkout(ctx, tokenHash)
	if err != nil {
		return nil, err
	}
	var val apperr.Validator
	switch {
	case txHash == "":
		val.Add("transactionHash", "is required")
	case v.ExpectedPayment != nil:
		if n, ok := s.reg.Network(v.ExpectedPayment.Network); ok {
			if err := checkTxHash(n.Type, txHash); err != nil {
				val.Add("transactionHash", err.Error())
			}
		}
	}
	if err := val.Err(); err != nil {
		return nil, err
	}
	if v.ExpectedPayment == nil {
		return nil, apperr.InternalError(fmt.Errorf("voucher: checkout %s has no expected payment", v.ID))
	}
	if v.Deposit != nil && v.Status == entvoucher.StatusRESOLVED {
		// Paid to its deposit address and already resolved (the watcher
		// found the payment, or the customer submitted it before): the
		// watcher finds every payment to the address, so the hash adds
		// nothing, and the same transaction is never counted twice.
		return v, nil
	}
	if v.SolanaPayReference != nil && v.Status == entvoucher.StatusRESOLVED && settles(v, txHash) {
		// The watcher found this transaction by the checkout's reference
		// (or the customer submitted it before): the same transaction is
		// never counted twice. Another signature is a new receipt, refused
		// as on any resolved voucher: a payment without the reference is
		// not found by the watcher, so its hash only counts before resolve.
		return v, nil
	}
	p := &auth.Principal{Kind: kindCheckout, ID: v.PayerID}
	return s.resolve(ctx, p, v.ID, ResolveInput{Receipts: []ReceiptInput{{PaymentID: v.ExpectedPayment.ID, TransactionHash: &txHash}}})
}

// settles reports whether v's settlement already follows transaction h.
func settles(v *ent.Voucher, h string) bool {
	if v.Settlement == nil {
		return false
	}
	for _, t := range v.Settlement.Transactions {
		if t.TransactionHash == h {
			return true
		}
	}
	return false
}

// nonEmpty is s, or nil when s is empty (an absent optional column).
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
