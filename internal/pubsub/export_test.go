package pubsub

import "context"

// Kill stops n the way a crash would: what is queued is lost and no
// goodbye is sent, so listeners must find out by its silence.
func (n *Notifier) Kill() {
	n.mu.Lock()
	n.queue = nil
	clear(n.signals)
	n.mu.Unlock()
	close(n.stop)
	<-n.done
	_ = n.db.Close()
}

// HoldPeerListens makes the listener started with o call hold before each
// LISTEN on a peer's change channel (on its control goroutine), so a test
// can open the join window as wide as it likes.
func HoldPeerListens(o ListenerOptions, hold func(ctx context.Context, channel string)) ListenerOptions {
	o.beforePeerListen = hold
	return o
}

// PeerChannels are the peers' change channels l's LISTENs are in effect on.
func (l *Listener) PeerChannels() []string {
	if p := l.listening.Load(); p != nil {
		return *p
	}
	return nil
}

// SendsLegacy says whether n sends its changes on Channel too (a legacy
// peer is heard).
func (n *Notifier) SendsLegacy() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.legacy
}
