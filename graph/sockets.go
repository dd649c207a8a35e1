package graph

import (
	"context"
	"sync"

	"github.com/voucherd/voucherd/graph/wstransport"
	"github.com/voucherd/voucherd/internal/auth"
)

// Sockets finds the open websockets of a principal, so that they end when
// the grounds of their token end before the token does (docs/hardening.md,
// "Hardening"): a voucher session closed (its payee's resource token; the
// principal's id is the session's), or a user's membership made INACTIVE
// (the user's sockets). End closes them with 4403, as at a token's
// expiry; the client reconnects with what it still holds, and a
// subscription it may no longer follow is refused then (404).
//
// It is one map entry per authenticated socket, added at connection_init
// and removed when the socket ends: no goroutine, no timer. The zero value
// is not usable; NewSockets makes one. One registry serves one process:
// other replicas learn of an end through the notifier (internal/app).
type Sockets struct {
	mu   sync.Mutex
	byID map[string]map[*wstransport.Conn]struct{}
}

// NewSockets returns an empty registry.
func NewSockets() *Sockets {
	return &Sockets{byID: map[string]map[*wstransport.Conn]struct{}{}}
}

// Ended reasons, sent as the close frame's reason.
const (
	ReasonSessionClosed  = "Forbidden: voucher session closed"
	ReasonMembershipEnds = "Forbidden: membership ended"
)

// End closes every socket whose principal is id (a ses_ or usr_ id) with
// 4403 and reason. It does not block.
func (s *Sockets) End(id, reason string) int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	conns := make([]*wstransport.Conn, 0, len(s.byID[id]))
	for c := range s.byID[id] {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseForbidden, reason)
	}
	return len(conns)
}

// Len is how many authenticated sockets are registered.
func (s *Sockets) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, set := range s.byID {
		n += len(set)
	}
	return n
}

// add registers c under p until c ends.
func (s *Sockets) add(c *wstransport.Conn, p *auth.Principal) {
	if s == nil || c == nil || p == nil || p.ID == "" {
		return
	}
	s.mu.Lock()
	set := s.byID[p.ID]
	if set == nil {
		set = map[*wstransport.Conn]struct{}{}
		s.byID[p.ID] = set
	}
	set[c] = struct{}{}
	s.mu.Unlock()
	c.OnClose(func() { s.remove(c, p.ID) })
}

func (s *Sockets) remove(c *wstransport.Conn, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.byID[id]
	delete(set, c)
	if len(set) == 0 {
		delete(s.byID, id)
	}
}

// Rechecker is what a Verifier may also do: say again whether a principal
// it proved still holds (a resource token's session still live). A socket
// registered in Sockets is checked once more after registering, so an end
// committed between the token's check and the registration is not missed.
type Rechecker interface {
	Recheck(ctx context.Context, p *auth.Principal) error
}
