package voucher

import (
	"context"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// WatchInput is what a subscription to voucher changes (GraphQL's
// voucherUpdated) filters on: exactly one of one voucher, one session's
// vouchers and one business's vouchers.
type WatchInput struct {
	ID, SessionID, BusinessID *string
}

// Watch is what a subscription follows: a key of the hub's kind.
type Watch struct {
	Kind pubsub.Kind
	Key  string
}

// Validate checks that exactly one filter is given and returns what it
// follows.
func (in WatchInput) Validate() (Watch, error) {
	given := 0
	for _, a := range []*string{in.ID, in.SessionID, in.BusinessID} {
		if a != nil {
			given++
		}
	}
	if given != 1 {
		return Watch{}, apperr.Invalid("id", "give exactly one of id, sessionId and businessId")
	}
	switch {
	case in.ID != nil:
		return Watch{Kind: pubsub.ByVoucher, Key: *in.ID}, nil
	case in.SessionID != nil:
		return Watch{Kind: pubsub.BySession, Key: *in.SessionID}, nil
	default:
		return Watch{Kind: pubsub.ByBusiness, Key: *in.BusinessID}, nil
	}
}

// Watch checks that the caller in ctx may start following w: a caller
// with an unexpired token who may follow it (MayFollow). For one voucher
// it returns the voucher's current state, the subscription's first event;
// nil otherwise. Subscribe to the hub before calling it: a change
// committed in between then arrives too, and its version tells the
// subscriber whether it is newer.
func (s *Service) Watch(ctx context.Context, w Watch) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, operation.VoucherUpdated)
	if err != nil {
		return nil, err
	}
	// Wall time, as the token's verifier reads it (not the service's
	// clock, which tests move).
	if !p.ExpiresAt.IsZero() && !time.Now().Before(p.ExpiresAt) {
		return nil, apperr.New(apperr.Unauthorized, "the token has expired")
	}
	if w.Kind == pubsub.ByVoucher {
		return s.Get(ctx, w.Key)
	}
	return nil, s.MayFollow(ctx, w)
}

// MayFollow reports whether the caller in ctx may (still) follow w; a
// subscription asks again while it lives, so a membership made INACTIVE or
// a closed session stops it. Each kind is its owner's rule: one voucher
// is followed by whoever may see it (Get); a session by its payer
// (session.Service.MayFollow); a business by its ACTIVE members
// (business.MayFollow). Anyone else gets not_found.
func (s *Service) MayFollow(ctx context.Context, w Watch) error {
	switch w.Kind {
	case pubsub.ByVoucher:
		_, err := s.Get(ctx, w.Key)
		return err
	case pubsub.BySession:
		return s.sessions.MayFollow(ctx, w.Key)
	case pubsub.ByBusiness:
		// An ACTIVE membership remembered by reads (Visible) answers
		// without a statement: the 30 s re-checks of a dashboard's
		// subscriptions cost nothing while it holds.
		p := auth.FromContext(ctx)
		if p == nil || p.Kind != auth.KindUser {
			return business.MayFollow(ctx, s.db.Client, w.Key)
		}
		key := memberKey{business: w.Key, user: p.ID}
		if _, ok := s.members.Get(key, time.Time{}); ok {
			return nil
		}
		t := s.members.Begin()
		if err := business.MayFollow(ctx, s.db.Client, w.Key); err != nil {
			return err
		}
		s.members.Put(t, key, p.ID, struct{}{}, time.Time{})
		return nil
	}
	return apperr.Invalid("id", "give exactly one of id, sessionId and businessId")
}
