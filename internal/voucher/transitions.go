package voucher

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/payment"
)

// Redeem sets the payment terms of a RESERVED voucher (payee only), making
// it SIMPLE or CUSTOM.
func (s *Service) Redeem(ctx context.Context, id string, in RedeemInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpRedeem.operation())
	if err != nil {
		return nil, err
	}
	r, err := parseRedeem(s.reg, in)
	if err != nil {
		return nil, s.reject(ctx, p, OpRedeem, id, err)
	}
	return s.apply(ctx, p, id, redeemTransition(s.db.Dialect, r))
}

func redeemTransition(dialect string, r *redemption) *transition {
	return &transition{
		op:   OpRedeem,
		from: []entvoucher.Status{entvoucher.StatusRESERVED},
		wrongState: func(entvoucher.Status) error {
			return apperr.New(apperr.AlreadyRedeemed, "the voucher is already redeemed")
		},
		fast: true,
		sets: func(_ context.Context, _ *ent.Voucher, now time.Time) ([]assignment, error) {
			return redeemSets(dialect, r, now)
		},
	}
}

// redeemSets are the columns of a redeem, in RedeemStatement's order.
func redeemSets(dialect string, r *redemption, now time.Time) ([]assignment, error) {
	var vals [5]any
	var err error
	var payeeInfo any
	for i, x := range []any{r.expected, nilIfEmpty(r.networks), nilIfEmpty(r.payments), r.extrasValue()} {
		if vals[i], err = jsonArg(dialect, x); err != nil {
			return nil, err
		}
	}
	if payeeInfo, err = jsonArg(dialect, r.payeeInfo); err != nil {
		return nil, err
	}
	return []assignment{
		{col: "status", lit: "'" + string(entvoucher.StatusREDEEMED) + "'"},
		{col: "type", val: r.typ},
		{col: "expected_payment", val: vals[0]},
		{col: "networks", val: vals[1]},
		{col: "payments", val: vals[2]},
		{col: "extras", val: vals[3]},
		{col: "payee_info", val: payeeInfo},
		{col: "updated_at", val: now},
	}, nil
}

// nilIfEmpty keeps a SIMPLE voucher's CUSTOM columns NULL.
func nilIfEmpty[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

// extrasValue is what the extras column holds: a CUSTOM voucher always has
// a list (possibly empty, so it renders as []); a SIMPLE one has none.
func (r *redemption) extrasValue() any {
	if r.typ != payment.TypeCustom {
		return nil
	}
	if r.extras == nil {
		return []any{}
	}
	return r.extras
}

// Negotiate prices a SIMPLE voucher's expected payment in another currency
// on the same network (payer only). expectedPayment stays as it is; the
// computed suppliedPayment and exchangeRate replace any earlier ones.
func (s *Service) Negotiate(ctx context.Context, id string, in NegotiateInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpNegotiate.operation())
	if err != nil {
		return nil, err
	}
	sup, err := parseSupplied(s.reg, in)
	if err != nil {
		return nil, s.reject(ctx, p, OpNegotiate, id, err)
	}
	dialect := s.db.Dialect
	t := &transition{
		op:         OpNegotiate,
		from:       []entvoucher.Status{entvoucher.StatusREDEEMED},
		wrongState: needsRedeemed,
		// The quote reads the expected payment, fixed from redeem on
		// (stable), and against reads the type and the expected payment:
		// nothing but the voucher's terms (fromTerms).
		stable:    true,
		fromTerms: true,
		against: func(v *ent.Voucher) error {
			if v.Type == nil || *v.Type != entvoucher.TypeSIMPLE || v.ExpectedPayment == nil {
				return apperr.New(apperr.NotSimple, "only a SIMPLE voucher can be negotiated")
			}
			if v.ExpectedPayment.Network != sup.Network {
				return apperr.New(apperr.DifferentNetwork, "supplied currency is on a different network than the expected currency")
			}
			return nil
		},
		sets: func(ctx context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error) {
			exp := cur.ExpectedPayment
			q, err := s.fin.Quote(ctx, finance.Payment{
				Network: exp.Network, Currency: exp.Currency, CurrencyAddress: exp.CurrencyAddress,
				Amount: exp.Amount, WalletAddress: exp.Wallet.Address,
			}, sup.Network, sup.Currency)
			if err != nil {
				return nil, err
			}
			supplied := &payment.Payment{
				ID: exp.ID, Network: q.Network, Currency: q.Currency, CurrencyAddress: q.CurrencyAddress,
				Amount: q.Amount, Wallet: sup.Wallet,
			}
			val, err := jsonArg(dialect, supplied)
			if err != nil {
				return nil, err
			}
			return []assignment{
				{col: "supplied_payment", val: val},
				{col: "exchange_rate", val: q.ExchangeRate},
				{col: "updated_at", val: now},
			}, nil
		},
	}
	return s.apply(ctx, p, id, t)
}

// Resolve completes a REDEEMED voucher with the payer's receipts (payer
// only, registered users).
func (s *Service) Resolve(ctx context.Context, id string, in ResolveInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, operation.ResolveVoucher)
	if err != nil {
		return nil, err
	}
	return s.resolve(ctx, p, id, in)
}

// resolve is Resolve for principal p: a registered user, or a checkout's
// customer (SubmitCheckoutPayment).
func (s *Service) resolve(ctx context.Context, p *auth.Principal, id string, in ResolveInput) (*ent.Voucher, error) {
	if err := checkReceiptsShape(in); err != nil {
		return nil, s.reject(ctx, p, OpResolve, id, err)
	}
	dialect := s.db.Dialect
	var rs []payment.Receipt
	t := &transition{
		op:         OpResolve,
		from:       []entvoucher.Status{entvoucher.StatusREDEEMED},
		wrongState: needsRedeemed,
		against: func(v *ent.Voucher) error {
			rs, err := s.receipts(v, in)
			if err != nil || s.settler == nil {
				return err
			}
			_, err = s.settler.Open(v, rs, s.clock())
			return err
		},
		sets: func(_ context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error) {
			var err error
			rs, err = s.receipts(cur, in)
			if err != nil {
				return nil, err
			}
			val, err := jsonArg(dialect, rs)
			if err != nil {
				return nil, err
			}
			sets := []assignment{
				{col: "status", lit: "'" + string(entvoucher.StatusRESOLVED) + "'"},
				{col: "receipts", val: val},
				{col: "live_code", lit: "NULL"},
				{col: "updated_at", val: now},
			}
			if s.settler == nil {
				return sets, nil
			}
			st, err := s.settler.Open(cur, rs, now)
			if err != nil {
				return nil, err
			}
			sval, err := jsonArg(dialect, st)
			if err != nil {
				return nil, err
			}
			var network any
			if st.Verified && !st.Final() {
				network = st.Network
			}
			return append(sets, assignment{col: "settlement", val: sval}, assignment{col: "settlement_network", val: network}), nil
		},
	}
	if s.settler != nil {
		// A verified settlement claims its transactions in the resolving
		// transaction; the claims' unique index is what refuses a
		// transaction another voucher claimed, even in a race.
		t.inTx = s.settler.Verifies
		t.after = func(ctx context.Context, tx *ent.Tx, next *ent.Voucher) error {
			return s.settler.Claim(ctx, tx, next, rs)
		}
	}
	v, err := s.apply(ctx, p, id, t)
	if err == nil && s.settler != nil {
		s.settler.Resolved(v)
	}
	return v, err
}

// receipts holds a resolve body against voucher v: every receipt names v's
// payment, and an amount has no more fraction digits than the token paid in
// (the supplied one when negotiated). It returns the receipts as stored.
func (s *Service) receipts(v *ent.Voucher, in ResolveInput) ([]payment.Receipt, error) {
	var want string
	var decimals int32 = -1 // -1: no token to hold the amount to (CUSTOM)
	switch {
	case v.ExpectedPayment != nil:
		want = v.ExpectedPayment.ID
		paid := v.ExpectedPayment
		if v.SuppliedPayment != nil {
			paid = v.SuppliedPayment
		}
		if tok, ok := s.reg.Token(paid.Network, paid.Currency); ok {
			decimals = tok.Decimals
		}
	case len(v.Payments) > 0:
		want = v.Payments[0].ID
	}
	var val apperr.Validator
	out := make([]payment.Receipt, 0, len(in.Receipts))
	for i, r := range in.Receipts {
		at := fmt.Sprintf("receipts[%d]", i)
		if r.PaymentID != want {
			val.Add(at+".paymentId", "names no payment of this voucher")
		}
		rec := payment.Receipt{PaymentID: r.PaymentID}
		if r.TransactionHash != nil {
			rec.TransactionHash = *r.TransactionHash
		}
		if r.Amount != nil {
			var d decimal.Decimal
			var err error
			if decimals >= 0 {
				d, err = money.Parse(*r.Amount, decimals)
			} else {
				d, err = money.ParseAnyScale(*r.Amount)
			}
			if err != nil {
				val.Add(at+".amount", err.Error())
			} else {
				rec.Amount = money.Format(d)
			}
		}
		out = append(out, rec)
	}
	if err := val.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Discard ends a RESERVED or REDEEMED voucher (payee or payer).
func (s *Service) Discard(ctx context.Context, id string) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpDiscard.operation())
	if err != nil {
		return nil, err
	}
	t := &transition{
		op:   OpDiscard,
		from: []entvoucher.Status{entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED},
		wrongState: func(entvoucher.Status) error {
			return apperr.New(apperr.AlreadyResolved, "the voucher is already resolved")
		},
		fast: true,
		sets: func(_ context.Context, _ *ent.Voucher, now time.Time) ([]assignment, error) {
			return []assignment{
				{col: "status", lit: "'" + string(entvoucher.StatusDISCARDED) + "'"},
				{col: "discard_reason", lit: "'" + ReasonDiscarded + "'"},
				{col: "live_code", lit: "NULL"},
				{col: "updated_at", val: now},
			}, nil
		},
	}
	return s.apply(ctx, p, id, t)
}
