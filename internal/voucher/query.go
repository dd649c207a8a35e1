package voucher

import (
	"context"
	"fmt"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/interopsubmission"
	"github.com/voucherd/voucherd/ent/predicate"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/operation"
)

// statusIs filters by status as the read model shows it.
func (s *Service) statusIs(st entvoucher.Status) predicate.Voucher {
	now := s.clock()
	switch st {
	case entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED:
		return entvoucher.And(entvoucher.StatusEQ(st), entvoucher.ExpiresAtGT(now))
	case entvoucher.StatusDISCARDED:
		return entvoucher.Or(entvoucher.StatusEQ(st), entvoucher.And(
			entvoucher.StatusIn(entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED), entvoucher.ExpiresAtLTE(now)))
	default:
		return entvoucher.StatusEQ(st)
	}
}

// Submission is a stored interop-init signature submission (REST renders
// it as view.OfSubmission, GraphQL through the schema). ID is the caller's
// submission id.
type Submission struct {
	ID           string
	VoucherID    string
	PaymentIndex int
	Signature    *string
	CreatedAt    apitime.Time
}

// submissionOf is the stored row as a Submission.
func submissionOf(r *ent.InteropSubmission) *Submission {
	return &Submission{ID: r.SubmissionID, VoucherID: r.VoucherID, PaymentIndex: r.PaymentIndex, Signature: r.Signature, CreatedAt: apitime.From(r.CreatedAt)}
}

// paymentCount is how many payments a redeemed voucher has.
func paymentCount(v *ent.Voucher) int {
	if v.ExpectedPayment != nil {
		return 1
	}
	return len(v.Payments)
}

// InteropInit stores the payer's signature submission for one payment of
// voucher voucherID, or of in.Vid when given (a voucher the caller is the
// payer of, too). Posting the same submission id again with the same content returns
// the stored submission, whatever has happened to the voucher since; other
// content under a used id is already_exists.
func (s *Service) InteropInit(ctx context.Context, voucherID string, in InteropInitInput) (*Submission, error) {
	p, err := operation.Caller(ctx, OpInteropInit.operation())
	if err != nil {
		return nil, err
	}
	path, err := s.load(ctx, s.db.Prepared, voucherID, false)
	if err != nil {
		return nil, err
	}
	if r, err := rolesIn(ctx, s.db.Client, p, path); err != nil || r&rolesFor(OpInteropInit) == 0 {
		return nil, firstErr(err, errNotFound)
	}
	target := path
	if in.Vid != nil && *in.Vid != voucherID {
		// The caller must be the payer of vid too (docs/hardening.md,
		// "Hardening"): seeing a voucher is not acting on it.
		if target, err = s.load(ctx, s.db.Prepared, *in.Vid, false); err != nil {
			return nil, err
		}
		if r, err := rolesIn(ctx, s.db.Client, p, target); err != nil || r&rolesFor(OpInteropInit) == 0 {
			return nil, firstErr(err, errNotFound)
		}
	}
	if err := checkInteropShape(in); err != nil {
		return nil, err
	}
	idx := 0
	if in.PaymentIndex != nil {
		idx = *in.PaymentIndex
	}
	same := func(r *ent.InteropSubmission) bool {
		return r.CallerID == p.ID && r.PaymentIndex == idx && equalPtr(r.Signature, in.Signature)
	}
	replay := func() (*Submission, error) {
		r, err := s.db.InteropSubmission.Query().
			Where(interopsubmission.VoucherID(target.ID), interopsubmission.SubmissionID(in.ID)).Only(ctx)
		switch {
		case ent.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, apperr.InternalError(err)
		case !same(r):
			return nil, apperr.New(apperr.AlreadyExists, "a submission with this id exists with other content")
		}
		return submissionOf(r), nil
	}
	if sub, err := replay(); sub != nil || err != nil {
		return sub, err
	}
	now := s.clock()
	if err := stateErr(target, now, []entvoucher.Status{entvoucher.StatusREDEEMED}, needsRedeemed); err != nil {
		return nil, err
	}
	if n := paymentCount(target); idx >= n {
		return nil, apperr.Invalid("paymentIndex", fmt.Sprintf("the voucher has %d payment(s); the index is 0-based", n))
	}
	row, err := s.db.InteropSubmission.Create().
		SetSubmissionID(in.ID).SetVoucherID(target.ID).SetCallerID(p.ID).
		SetPaymentIndex(idx).SetNillableSignature(in.Signature).SetCreatedAt(now).
		Save(ctx)
	if ent.IsConstraintError(err) {
		// Posted twice at once: the other request stored it first.
		sub, err := replay()
		if sub == nil && err == nil {
			err = apperr.InternalError(fmt.Errorf("voucher: submission %q vanished after a conflict", in.ID))
		}
		return sub, err
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return submissionOf(row), nil
}

// firstErr is err when there is one, else fallback.
func firstErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

func equalPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
