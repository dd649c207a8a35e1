package wstransport

import (
	"context"
	"sync/atomic"
)

type holdKey struct{}

// hold is one ReleaseOnClose registration.
type hold struct {
	release func()
	parent  *hold
	state   atomic.Int32 // holdPending, holdAdopted, holdReleased
}

const (
	holdPending int32 = iota
	holdAdopted
	holdReleased
)

// ReleaseOnClose ties something an HTTP middleware holds for an upgrade
// request (a rate-limit slot) to the websocket connection the request
// becomes. The transport returns from the HTTP handler as soon as it has
// upgraded, long before the connection ends, so a middleware cannot simply
// release when its handler returns. Instead it passes the returned context
// down and calls done when its handler returns: if the transport took the
// connection, release runs when the connection closes; otherwise (no
// upgrade, a failed handshake) done runs it at once.
func ReleaseOnClose(ctx context.Context, release func()) (_ context.Context, done func()) {
	parent, _ := ctx.Value(holdKey{}).(*hold)
	h := &hold{release: release, parent: parent}
	return context.WithValue(ctx, holdKey{}, h), func() {
		if h.state.CompareAndSwap(holdPending, holdReleased) {
			h.release()
		}
	}
}

// adoptHolds takes over every pending hold in ctx, innermost first.
func adoptHolds(ctx context.Context) []func() {
	var fns []func()
	h, _ := ctx.Value(holdKey{}).(*hold)
	for ; h != nil; h = h.parent {
		if h.state.CompareAndSwap(holdPending, holdAdopted) {
			fns = append(fns, h.release)
		}
	}
	// runHooks runs them last to first: outermost last.
	for i, j := 0, len(fns)-1; i < j; i, j = i+1, j-1 {
		fns[i], fns[j] = fns[j], fns[i]
	}
	return fns
}
