package graph

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/voucher"
)

// What voucherUpdated is about, which graph/engine (the shared renderers
// that send it) knows nothing of: what a subscription follows (the hub's
// mailbox for a voucher.Watch), who may follow it (the voucher service,
// asked again every Options.Recheck), and in which order its vouchers go
// out. The engine asks a voucherStream for the next voucher to send and
// renders it once per selection shape.

// voucherFeeds is what every voucherUpdated subscription of one handler
// shares.
type voucherFeeds struct {
	hub *pubsub.Hub
	// vouchers answers may the caller start following, with the current
	// state (Watch), and may it still follow (MayFollow).
	vouchers *voucher.Service
	// recheck bounds how long a subscriber keeps receiving after it lost
	// the right to see what it follows (a membership deactivated):
	// visibility is checked again before sending when the last check is
	// older.
	recheck time.Duration
	// recent shares re-checks between subscriptions of one caller to one
	// key: 5,000 dashboards of one user on one business need one query
	// per interval, not 5,000 on the same event.
	recent *recentChecks
}

// subscribe is the voucherUpdated resolver: it starts a subscription
// following what in names (validated by the domain), or, when the engine
// renders, hands the generated code its voucher (engine.Subscribe).
func (f *voucherFeeds) subscribe(ctx context.Context, in voucher.WatchInput) (<-chan *ent.Voucher, error) {
	ch, err := engine.Subscribe[*ent.Voucher, voucherStream](ctx, func(s *voucherStream) error {
		w, err := in.Validate()
		if err != nil {
			return err
		}
		// Follow first, then read the current state: a change committed in
		// between arrives too, and the version check drops what is not
		// newer. The load runs to its end even if the operation ends
		// meanwhile (see voucherStream.recheck).
		sub := f.hub.Subscribe(w.Kind, w.Key)
		v, err := f.vouchers.Watch(context.WithoutCancel(ctx), w)
		if err != nil {
			sub.Close()
			return err
		}
		if v != nil {
			s.initial = &pubsub.Event{Voucher: v}
		}
		s.feeds, s.sub, s.watch, s.checked = f, sub, w, monoNow()
		return nil
	})
	if errors.Is(err, engine.ErrNotWebsocket) {
		err = apperr.New(apperr.ValidationFailed, "subscriptions are served over a websocket on /graphql")
	}
	return ch, err
}

// voucherStream is one voucherUpdated subscription's part that is about
// vouchers: its hub mailbox, what it follows, what it has sent. The
// engine keeps it inside its own subscription state (one allocation) and
// calls it one call at a time.
type voucherStream struct {
	feeds *voucherFeeds
	sub   *pubsub.Subscription
	watch voucher.Watch
	// last is the version last sent (following one voucher).
	last int
	// checked is when visibility was last checked (monoNow).
	checked int64
	initial *pubsub.Event
}

var _ engine.Stream[*ent.Voucher] = (*voucherStream)(nil)

// Next returns the next voucher worth sending: the current state first
// (following one voucher), never an older version after a newer one, and
// nothing once the caller may no longer follow it.
func (s *voucherStream) Next(ctx context.Context, wait bool) (*ent.Voucher, engine.Shared, bool, error) {
	for {
		ev := s.initial
		if ev != nil {
			s.initial = nil
		} else {
			var err error
			if wait {
				ev, err = s.sub.Next(ctx)
			} else {
				ev, err = s.sub.TryNext()
			}
			if err != nil {
				return nil, nil, false, streamError(err)
			}
			if ev == nil {
				return nil, nil, false, nil // nothing now; the hub calls back
			}
		}
		v := ev.Voucher
		if s.watch.Kind == pubsub.ByVoucher {
			// Never an older version after a newer one; the same one only
			// when re-sent after a possible loss.
			if v.Version < s.last || (v.Version == s.last && !ev.Resync) {
				continue
			}
			s.last = v.Version
		}
		if now := monoNow(); time.Duration(now-s.checked) > s.feeds.recheck {
			if err := s.recheck(ctx); err != nil {
				return nil, nil, false, err
			}
			s.checked = monoNow()
		}
		return v, ev, true, nil
	}
}

// Notify hands the hub the transport's callback.
func (s *voucherStream) Notify(ready func(now bool)) { s.sub.Notify(ready) }

// Close leaves the hub.
func (s *voucherStream) Close() { s.sub.Close() }

// streamError is what a subscription whose mailbox ended is told.
func streamError(err error) error {
	switch {
	case errors.Is(err, pubsub.ErrSlow):
		return apperr.New(apperr.LimitExceeded, "the subscription fell behind (too many unread changes); subscribe again")
	case errors.Is(err, pubsub.ErrClosed):
		return apperr.New(apperr.Unavailable, "the server is shutting down; subscribe again")
	}
	return err
}

// recheck checks again that the caller may follow what it follows, unless
// another subscription of the same caller to the same key just did.
func (s *voucherStream) recheck(ctx context.Context) error {
	recent, within := s.feeds.recent, s.feeds.recheck/2
	var caller string
	if p := auth.FromContext(ctx); p != nil {
		caller = p.ID
	}
	checkKey := strconv.Itoa(int(s.watch.Kind)) + "|" + s.watch.Key + "|" + caller
	if recent.fresh(checkKey, within) {
		return nil
	}
	// The query runs to its end even if the operation ends meanwhile (it
	// is short): a query under the operation's context would give that
	// context a Done channel and a children map, which an idle
	// subscription would then carry for the rest of its life.
	if err := s.feeds.vouchers.MayFollow(context.WithoutCancel(ctx), s.watch); err != nil {
		return err
	}
	recent.mark(checkKey, within)
	return nil
}

// recentChecks remembers when a caller was last found allowed to follow a
// key. A check younger than half the re-check interval stands in for a new
// one, so a subscriber keeps receiving at most 1.5 intervals after it lost
// the right (instead of 1).
type recentChecks struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

func (c *recentChecks) fresh(key string, within time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[key]
	return ok && time.Since(t) < within
}

func (c *recentChecks) mark(key string, within time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	c.at[key] = now
	if now.Sub(c.pruned) > within {
		for k, t := range c.at {
			if now.Sub(t) >= within {
				delete(c.at, k)
			}
		}
		c.pruned = now
	}
}

// monoNow is a monotonic clock reading in nanoseconds: a subscription's
// last check in 8 bytes instead of a time.Time's 24.
func monoNow() int64 { return int64(time.Since(monoOrigin)) }

var monoOrigin = time.Now()
