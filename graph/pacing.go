package graph

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Refused documents are paced by client address (docs/hardening.md,
// "Refusal pacing"). A refusal is cheap, but a client that sends refused
// documents back to back is answered as fast as it sends, so two such
// clients kept the service's two cores busy between them, and every other
// request queued behind their refusals (REST GET p99 5.7 x its unloaded
// figure). After each refusal, the address's next GraphQL request over
// HTTP, or operation on a websocket, waits a multiple of the time the
// refused one took, so that an
// address's refused documents take at most RefusalShare of one core on
// average, whatever they are and however quickly it sends them. An address
// whose documents are not refused never waits; the wait an address has
// earned never exceeds MaxRefusalWait (requests are then served after that
// wait, within the time budget; the rate limits, when on, answer a flood of
// refused documents with 429).

// Defaults of Options.RefusalShare and Options.MaxRefusalWait.
const (
	DefaultRefusalShare   = 0.1
	DefaultMaxRefusalWait = 250 * time.Millisecond
)

type refusalPacer struct {
	// factor is the wait earned per unit of time a refused request took:
	// (1 - share) / share.
	factor  float64
	maxWait time.Duration
	addr    func(*http.Request) string

	mu  sync.Mutex
	due map[string]time.Time // when the address's next request may start
	// sweepAt is the map size at which expired entries are dropped.
	sweepAt int
}

func newRefusalPacer(share float64, maxWait time.Duration, addr func(*http.Request) string) *refusalPacer {
	if share <= 0 || share > 1 {
		share = DefaultRefusalShare
	}
	if maxWait <= 0 {
		maxWait = DefaultMaxRefusalWait
	}
	if addr == nil {
		addr = func(r *http.Request) string {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				return r.RemoteAddr
			}
			return host
		}
	}
	return &refusalPacer{factor: (1 - share) / share, maxWait: maxWait, addr: addr, due: map[string]time.Time{}, sweepAt: 1024}
}

type pacedKey struct{}

// paced is one HTTP request's pacing: its address, and when its work
// started (after any wait).
type paced struct {
	p     *refusalPacer
	addr  string
	start time.Time
	// socket marks a websocket connection's context: start is unused,
	// each operation is paced on its own.
	socket bool
}

// admit makes a GraphQL request over HTTP wait until its address is due,
// before its body is read, and returns ctx (the request's context) noting
// when its work starts. The error is ctx's if it ended while waiting (its time
// budget ran out, or the client left). A websocket's operations are paced
// one by one (socket, paceOperation).
func (p *refusalPacer) admit(ctx context.Context, r *http.Request) (context.Context, error) {
	addr := p.addr(r)
	if wait := p.wait(addr, time.Now()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx, ctx.Err()
		}
	}
	return context.WithValue(ctx, pacedKey{}, &paced{p: p, addr: addr, start: time.Now()}), nil
}

// socket notes a websocket upgrade's address in its context: the
// connection's operations are paced one by one (paceOperation).
func (p *refusalPacer) socket(r *http.Request) *http.Request {
	ctx := context.WithValue(r.Context(), pacedKey{}, &paced{p: p, addr: p.addr(r), socket: true})
	return r.WithContext(ctx)
}

// paceOperation makes an operation sent on a websocket wait until its
// address is due (its own goroutine waits: the connection goes on), and
// returns the function that charges it if it is refused. Elsewhere it
// does nothing (an HTTP request waited in admit) and returns nil: a
// refused request is charged by refusedPaced.
func paceOperation(ctx context.Context) (refused func(), err error) {
	pc, _ := ctx.Value(pacedKey{}).(*paced)
	if pc == nil || !pc.socket {
		return nil, nil
	}
	if wait := pc.p.wait(pc.addr, time.Now()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return func() {}, ctx.Err()
		}
	}
	start := time.Now()
	return func() { pc.p.charge(pc.addr, start, time.Now()) }, nil
}

// wait is how long a request of addr arriving at now waits.
func (p *refusalPacer) wait(addr string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	due, ok := p.due[addr]
	if !ok {
		return 0
	}
	if !due.After(now) {
		delete(p.due, addr)
		return 0
	}
	return due.Sub(now)
}

// refused charges the request in ctx (if it is paced) for its refusal:
// its address waits factor times what the request took, added to what it
// already owes, at most maxWait from now.
func refusedPaced(ctx context.Context) {
	pc, _ := ctx.Value(pacedKey{}).(*paced)
	if pc == nil || pc.socket {
		return
	}
	pc.p.charge(pc.addr, pc.start, time.Now())
}

func (p *refusalPacer) charge(addr string, start, now time.Time) {
	earned := time.Duration(float64(now.Sub(start)) * p.factor)
	p.mu.Lock()
	defer p.mu.Unlock()
	due := p.due[addr]
	if due.Before(now) {
		due = now
	}
	due = due.Add(earned)
	if limit := now.Add(p.maxWait); due.After(limit) {
		due = limit
	}
	p.due[addr] = due
	if len(p.due) >= p.sweepAt {
		for a, d := range p.due {
			if !d.After(now) {
				delete(p.due, a)
			}
		}
		// Entries live at most maxWait: the map holds the addresses
		// refused within the last maxWait.
		p.sweepAt = max(1024, 2*len(p.due))
	}
}
