package view

import (
	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
)

// Session is the view of a voucher session callers get.
type Session struct {
	ID        string       `json:"id"`
	Code      string       `json:"code"`
	Status    string       `json:"status"`
	ExpiresAt apitime.Time `json:"expiresAt"`
	CreatedAt apitime.Time `json:"createdAt"`
}

// OfSession renders a session for REST.
func OfSession(s *ent.VoucherSession) *Session {
	return &Session{ID: s.ID, Code: s.Code, Status: string(s.Status), ExpiresAt: apitime.From(s.ExpiresAt), CreatedAt: apitime.From(s.CreatedAt)}
}
