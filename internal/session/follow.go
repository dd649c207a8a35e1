package session

import "context"

// MayFollow reports whether the caller in ctx may follow the voucher
// changes of session id (a voucherUpdated subscription by sessionId): only
// the session's payer, its owner, while the session is open (Get admits no
// one else). A subscription asks again while it lives.
func (s *Service) MayFollow(ctx context.Context, id string) error {
	_, err := s.Get(ctx, id)
	return err
}
