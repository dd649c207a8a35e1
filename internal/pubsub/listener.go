package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// ListenerOptions tune a Listener; zero values take the defaults.
type ListenerOptions struct {
	// MinReconnect and MaxReconnect bound lib/pq's reconnect backoff.
	MinReconnect, MaxReconnect time.Duration
	// PingInterval is how often an idle connection is checked, so a
	// silently dead one is noticed (and its gap resynced) within about this.
	PingInterval time.Duration
	// ResyncMargin reaches back before the last moment the connection was
	// known healthy, covering transactions that began earlier but committed
	// into the gap, and clock differences between replicas.
	ResyncMargin time.Duration
	// Replica is this process's Notifier's name, whose own liveness
	// messages are ignored (so its change channel is never listened on).
	// Empty: every replica is a peer.
	Replica string
	// Peers, when set, is told as other replicas appear and when none is
	// left (this process's Notifier, which sends nothing while alone).
	Peers PeerWatcher
	// PeerTimeout is how long a replica may stay silent on ReplicaChannel
	// before it is taken for dead and what it committed since it was last
	// heard is resynced (default 5 s, five missed heartbeats).
	PeerTimeout time.Duration
	// Handlers are further channels to listen on, each with what to do
	// with a notification's payload (Notifier.Send): called on the
	// listener's goroutine, so it must not block. A notification lost
	// while the connection was down is not replayed for them.
	Handlers map[string]func(payload string)
	// Lost, when set, is called on the listener's goroutine whenever it
	// resyncs (its connection was re-established, a replica went silent or
	// said it dropped notifications): notifications of Handlers' channels
	// may have been lost, and they are not replayed.
	Lost func()
	Log  *slog.Logger

	// beforePeerListen, when set (tests only, export_test.go), is called
	// on the control goroutine before each LISTEN on a peer's change
	// channel, to hold it back.
	beforePeerListen func(ctx context.Context, channel string)
}

// PeerWatcher learns which other replicas the Listener hears.
type PeerWatcher interface {
	// PeerJoined: a replica not heard before (or since it was taken for
	// gone), whose notifier started at started.
	PeerJoined(started time.Time)
	// PeersGone: no other replica is heard any more.
	PeersGone()
	// LegacyJoined: a legacy peer (see Listener) not heard before (or
	// since it was taken for gone), whose notifier started at started;
	// called before its PeerJoined.
	LegacyJoined(started time.Time)
	// LegacyGone: no legacy peer is heard any more.
	LegacyGone()
}

// Listener feeds a Hub from PostgreSQL. It LISTENs on ReplicaChannel (the
// replicas' liveness) and the Handlers' channels from the start, and on
// each other replica's change channel (ChangeChannel of its name) while it
// hears that replica: from the first "alive" it hears from it until it
// says goodbye or falls silent. Every change notification it hears is
// published to the hub; it never hears this replica's own (see Notifier),
// except while a legacy peer is heard (below).
//
// The LISTENs and UNLISTENs on peers' channels are made, in the order they
// were decided, by a control goroutine of their own: lib/pq answers them
// from the connection goroutine that also feeds Notify, so making them on
// the goroutine that drains Notify could wait forever on a full Notify.
//
// Changes can go unnotified in three ways, and all end in the hub
// re-sending what changed since just before the loss could have begun
// (less ResyncMargin, for transactions in flight and clocks apart):
//
//   - this listener's connection drops: notifications sent during the gap
//     are gone, on every channel; resync (Hub.Resync) from when the
//     connection was last known good. lib/pq re-LISTENs every channel it
//     was listening on, peers' ones included, before it says so;
//   - another replica stops (see Notifier): one that said goodbye sent
//     everything first; one that went silent for PeerTimeout (killed, cut
//     off, or told us it dropped notifications) may have committed changes
//     it never notified; resync from when it was last heard;
//   - a peer is heard before this listener's LISTEN on its change channel
//     is in effect (the join window): the peer sends its changes as soon
//     as it hears any replica, so what it sent meanwhile went to nobody
//     here. Once the LISTEN is in effect, the hub catches up (Hub.CatchUp)
//     on what changed since the latest of the peer's start, this
//     listener's start and when it last dropped that peer (what was sent
//     before that was heard, or resynced when the peer was dropped).
//
// A legacy peer is a replica of the version before per-replica channels,
// told by its "alive" naming no channel: it sends its changes on, and
// LISTENs on, the one shared Channel. While at least one is heard (a
// rolling deploy), this listener LISTENs on Channel too, with the same
// catch-up when that LISTEN starts, and tells Peers, so that this
// replica's notifier sends its changes there too; once none is left, it
// UNLISTENs Channel. Meanwhile it hears the other new replicas' changes
// twice (on their channels and on Channel) and its own once (on Channel):
// the hub's version memo drops each version it already dispatched.
type Listener struct {
	pl   *pq.Listener
	hub  *Hub
	opts ListenerOptions
	stop context.CancelFunc
	wg   sync.WaitGroup
	// healthy is when the connection was last known good (unix nanos).
	healthy atomic.Int64
	// peers maps each live replica to when it was last heard (local
	// clock) and the channel its changes come on; only the run goroutine
	// touches it, chanPeers (how many live peers' changes come on each
	// channel) and legacy (how many of them are legacy peers).
	peers     map[string]peerState
	chanPeers map[string]int
	legacy    int
	// resyncs counts resyncs started, for tests and metrics.
	resyncs atomic.Int64
	// heard is when a notification was last taken in (unix nanos);
	// known is a copy of peers' names for Peers.
	heard atomic.Int64
	known atomic.Pointer[[]string]

	// started is when Listen began: a peer's changes sent before it were
	// never this listener's to hear.
	started time.Time
	// dropped maps a replica taken for gone by its silence to when that
	// was (run goroutine only): it may have gone on sending after the
	// UNLISTEN, and if it is heard again the catch-up starts there.
	dropped map[string]time.Time
	// ops are the LISTENs and UNLISTENs on peers' channels waiting for the
	// control goroutine, in order; wakeOps tells it there are some.
	opsMu   sync.Mutex
	ops     []peerOp
	wakeOps chan struct{}
	// listening is the peers' channels the control goroutine has LISTENed
	// on and not UNLISTENed, for tests.
	listening atomic.Pointer[[]string]
	// changes counts the change notifications taken in; catchUps the
	// catch-ups started after a peer's LISTEN.
	changes  atomic.Int64
	catchUps atomic.Int64
}

// peerState is what the listener knows of a live peer.
type peerState struct {
	seen    time.Time // when it was last heard (local clock)
	channel string    // the channel its changes come on
	legacy  bool      // a legacy peer: channel is Channel
}

// peerOp is a LISTEN (listen) or UNLISTEN on a peer's change channel; a
// LISTEN is followed by a catch-up from since.
type peerOp struct {
	channel string
	listen  bool
	since   time.Time
}

// ApplicationName tags the listener's connection in pg_stat_activity.
const ApplicationName = "voucherd-listener"

// Listen connects to databaseURL and starts feeding hub. It returns once
// LISTEN is in effect on ReplicaChannel and the Handlers' channels; each
// peer's change channel follows when the peer is heard, with a catch-up
// that reaches back before this call at least, so no change committed
// after it returns is missed.
func Listen(ctx context.Context, databaseURL string, hub *Hub, opts ListenerOptions) (*Listener, error) {
	if opts.MinReconnect <= 0 {
		opts.MinReconnect = 100 * time.Millisecond
	}
	if opts.MaxReconnect <= 0 {
		opts.MaxReconnect = 5 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 15 * time.Second
	}
	if opts.ResyncMargin <= 0 {
		opts.ResyncMargin = time.Minute
	}
	if opts.PeerTimeout <= 0 {
		opts.PeerTimeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("pubsub: database URL is not a valid URL")
	}
	q := u.Query()
	q.Set("application_name", ApplicationName)
	u.RawQuery = q.Encode()
	log := opts.Log
	pl := pq.NewListener(u.String(), opts.MinReconnect, opts.MaxReconnect, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			log.Warn("pubsub: LISTEN connection lost; reconnecting", "err", errString(err))
		case pq.ListenerEventConnectionAttemptFailed:
			log.Warn("pubsub: LISTEN reconnect failed", "err", errString(err))
		case pq.ListenerEventReconnected:
			log.Info("pubsub: LISTEN connection re-established")
		}
	})
	started := time.Now()
	listened := make(chan error, 1)
	go func() {
		err := pl.Listen(ReplicaChannel)
		for ch := range opts.Handlers {
			if err == nil {
				err = pl.Listen(ch)
			}
		}
		listened <- err
	}()
	select {
	case err := <-listened:
		if err != nil {
			_ = pl.Close()
			return nil, fmt.Errorf("pubsub: LISTEN %s: %w", ReplicaChannel, err)
		}
	case <-ctx.Done():
		_ = pl.Close()
		return nil, ctx.Err()
	}
	runCtx, stop := context.WithCancel(context.Background())
	l := &Listener{pl: pl, hub: hub, opts: opts, stop: stop, peers: map[string]peerState{}, chanPeers: map[string]int{},
		started: started, dropped: map[string]time.Time{}, wakeOps: make(chan struct{}, 1)}
	l.wg.Add(2)
	go l.control(runCtx)
	go l.run(runCtx)
	return l, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Close stops listening and waits for in-flight work.
func (l *Listener) Close() error {
	l.stop()
	err := l.pl.Close()
	l.wg.Wait()
	return err
}

func (l *Listener) run(ctx context.Context) {
	defer l.wg.Done()
	log := l.opts.Log
	l.markHealthy()
	l.heard.Store(time.Now().UnixNano()) // LISTEN is in effect: nothing missed so far
	// Ping from its own goroutine: on a half-dead connection it can block
	// until TCP gives up, and notifications must keep flowing meanwhile.
	l.wg.Add(1)
	go l.pinger(ctx)
	check := time.NewTicker(l.opts.PeerTimeout / 4)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-check.C:
			for id, p := range l.peers {
				if now.Sub(p.seen) > l.opts.PeerTimeout {
					l.dropPeer(id, true)
					log.Warn("pubsub: replica went silent; resyncing what it may not have notified", "replica", id)
					l.resync(ctx, p.seen)
				}
			}
		case n, ok := <-l.pl.Notify:
			if !ok {
				return
			}
			if n == nil {
				// lib/pq sends nil after re-establishing the connection
				// and LISTENing again on every channel it listened on
				// (the peers' change channels it was told of included):
				// whatever was notified in between is lost, on any of
				// them, the peers' heartbeats included (they are fresh
				// again as of now). A LISTEN the control goroutine makes
				// meanwhile waits for the new connection, and its
				// channel's gap is in this resync too.
				since := time.Unix(0, l.healthy.Load())
				l.markHealthy()
				for id, p := range l.peers {
					p.seen = time.Now()
					l.peers[id] = p
				}
				l.resync(ctx, since)
				continue
			}
			l.markHealthy()
			l.heard.Store(time.Now().UnixNano())
			if n.Channel == ReplicaChannel {
				l.replicaMessage(ctx, n.Extra)
				continue
			}
			if h := l.opts.Handlers[n.Channel]; h != nil {
				h(n.Extra)
				continue
			}
			l.changes.Add(1)
			publish := l.hub.PublishNotification
			if len(l.pl.Notify) > 0 {
				// More notifications are read already: this one's frames
				// go to the transports' workers (a burst after a stalled
				// flush is written in parallel, not one by one here).
				publish = l.hub.PublishNotificationBehind
			}
			if err := publish(n.Extra); err != nil {
				log.Error("pubsub: malformed voucher change notification", "bytes", len(n.Extra))
			}
		}
	}
}

// replicaMessage tracks another replica's liveness (see Notifier).
func (l *Listener) replicaMessage(ctx context.Context, payload string) {
	var m replicaMessage
	if err := json.Unmarshal([]byte(payload), &m); err != nil || m.Replica == "" {
		l.opts.Log.Error("pubsub: malformed replica message", "bytes", len(payload))
		return
	}
	if m.Replica == l.opts.Replica {
		return
	}
	switch m.State {
	case replicaGone:
		l.dropPeer(m.Replica, false)
	case replicaGap:
		if p, known := l.peers[m.Replica]; known {
			p.seen = time.Now()
			l.peers[m.Replica] = p
		}
		if m.Since.IsZero() {
			m.Since = time.Now()
		}
		l.opts.Log.Info("pubsub: a replica did not notify some changes; resyncing", "replica", m.Replica)
		l.resync(ctx, m.Since)
	default:
		if p, known := l.peers[m.Replica]; known {
			p.seen = time.Now()
			l.peers[m.Replica] = p
			return
		}
		p := peerState{seen: time.Now(), channel: m.Channel}
		if p.channel == "" {
			p.channel, p.legacy = Channel, true
		} else if p.channel == ReplicaChannel || l.opts.Handlers[p.channel] != nil {
			// Listened on throughout: an UNLISTEN when the peer goes
			// would deafen this listener to it.
			l.opts.Log.Error("pubsub: a replica announces a change channel that is not one", "replica", m.Replica, "channel", p.channel)
			return
		}
		l.peers[m.Replica] = p
		if l.opts.Peers != nil {
			started := m.Started
			if started.IsZero() {
				started = time.Now()
			}
			if p.legacy {
				l.opts.Peers.LegacyJoined(started)
			}
			l.opts.Peers.PeerJoined(started)
		}
		if p.legacy {
			l.legacy++
		}
		l.publishPeers()
		// Its changes from now on, and a catch-up on those it sent before
		// the LISTEN is in effect (see Listener). A legacy peer's channel
		// may be listened on already, for another one: nothing was missed.
		since := l.started
		if m.Started.After(since) {
			since = m.Started
		}
		if at, ok := l.dropped[m.Replica]; ok {
			delete(l.dropped, m.Replica)
			if at.After(since) {
				since = at
			}
		}
		l.chanPeers[p.channel]++
		if l.chanPeers[p.channel] == 1 {
			l.queue(peerOp{channel: p.channel, listen: true, since: since})
		}
	}
}

// dropPeer forgets a peer and stops listening to its changes; silent: it
// was taken for gone, not heard saying goodbye.
func (l *Listener) dropPeer(id string, silent bool) {
	p, ok := l.peers[id]
	if !ok {
		return
	}
	delete(l.peers, id)
	if silent {
		now := time.Now()
		// Forget drops nobody came back from within an hour: a peer
		// that does later is caught up from its start instead, which
		// loads more but misses nothing.
		for id, at := range l.dropped {
			if now.Sub(at) > time.Hour {
				delete(l.dropped, id)
			}
		}
		l.dropped[id] = now
	}
	if l.chanPeers[p.channel]--; l.chanPeers[p.channel] == 0 {
		delete(l.chanPeers, p.channel)
		l.queue(peerOp{channel: p.channel})
	}
	if p.legacy {
		l.legacy--
		if l.legacy == 0 && l.opts.Peers != nil {
			l.opts.Peers.LegacyGone()
		}
	}
	l.publishPeers()
	if len(l.peers) == 0 && l.opts.Peers != nil {
		l.opts.Peers.PeersGone()
	}
}

// queue hands op to the control goroutine; it never blocks.
func (l *Listener) queue(op peerOp) {
	l.opsMu.Lock()
	l.ops = append(l.ops, op)
	l.opsMu.Unlock()
	select {
	case l.wakeOps <- struct{}{}:
	default:
	}
}

// control makes the queued LISTENs and UNLISTENs, one at a time, in order.
func (l *Listener) control(ctx context.Context) {
	defer l.wg.Done()
	listening := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wakeOps:
		}
		for {
			l.opsMu.Lock()
			if len(l.ops) == 0 {
				l.ops = nil
				l.opsMu.Unlock()
				break
			}
			op := l.ops[0]
			l.ops = l.ops[1:]
			l.opsMu.Unlock()
			if !l.apply(ctx, op) {
				return
			}
			if op.listen {
				listening[op.channel] = true
			} else {
				delete(listening, op.channel)
			}
			chans := make([]string, 0, len(listening))
			for ch := range listening {
				chans = append(chans, ch)
			}
			l.listening.Store(&chans)
		}
	}
}

// apply makes op, retrying a LISTEN the server refused until it is in
// effect, then starts its catch-up. It returns false once the listener is
// closing.
func (l *Listener) apply(ctx context.Context, op peerOp) bool {
	if !op.listen {
		// lib/pq forgets the channel even when the connection is down
		// (it is then not LISTENed again on reconnect).
		if err := l.pl.Unlisten(op.channel); err != nil && !errors.Is(err, pq.ErrChannelNotOpen) && ctx.Err() == nil {
			l.opts.Log.Warn("pubsub: UNLISTEN on a gone replica's changes failed", "channel", op.channel, "err", err.Error())
		}
		return ctx.Err() == nil
	}
	if l.opts.beforePeerListen != nil {
		l.opts.beforePeerListen(ctx, op.channel)
	}
	backoff := 100 * time.Millisecond
	for {
		if ctx.Err() != nil {
			return false
		}
		// lib/pq returns once the server confirmed the LISTEN, or, with
		// the connection down, once it is re-established with the
		// channel listened on again (and nil sent: a resync).
		err := l.pl.Listen(op.channel)
		if err == nil || errors.Is(err, pq.ErrChannelAlreadyOpen) {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		l.opts.Log.Error("pubsub: LISTEN on a replica's changes failed; retrying", "channel", op.channel, "err", err.Error())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	l.catchUp(ctx, op.since)
	return true
}

// catchUp has the hub send, in the background, what changed since (less
// the margin) and was not dispatched here (Hub.CatchUp). Unlike resync it
// tells Lost nothing: the Handlers' channels were listened on throughout.
func (l *Listener) catchUp(ctx context.Context, since time.Time) {
	since = since.Add(-l.opts.ResyncMargin)
	l.catchUps.Add(1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := l.hub.CatchUp(rctx, since); err != nil && ctx.Err() == nil {
			l.opts.Log.Error("pubsub: catching up on a new replica's changes failed", "err", err.Error())
		}
	}()
}

// resync re-sends, in the background, what changed since (less the margin
// for transactions in flight and clocks apart).
func (l *Listener) resync(ctx context.Context, since time.Time) {
	since = since.Add(-l.opts.ResyncMargin)
	l.resyncs.Add(1)
	if l.opts.Lost != nil {
		l.opts.Lost()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := l.hub.Resync(rctx, since); err != nil && ctx.Err() == nil {
			l.opts.Log.Error("pubsub: resync failed", "err", err.Error())
		}
	}()
}

// publishPeers copies the peers' names for Peers (run goroutine only).
func (l *Listener) publishPeers() {
	names := make([]string, 0, len(l.peers))
	for id := range l.peers {
		names = append(names, id)
	}
	l.known.Store(&names)
}

// Peers are the other replicas the listener currently hears (by their
// notifiers' names), as of the last notification it took in.
func (l *Listener) Peers() []string {
	if p := l.known.Load(); p != nil {
		return *p
	}
	return nil
}

// Heard is when the listener last took in a notification (any replica's,
// its own heartbeats included); zero before the first.
func (l *Listener) Heard() time.Time {
	n := l.heard.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Resyncs is how many resyncs the listener started (after a loss; the
// catch-ups after a peer's LISTEN are CatchUps).
func (l *Listener) Resyncs() int64 { return l.resyncs.Load() }

// CatchUps is how many catch-ups the listener started, one per LISTEN on
// a peer's change channel.
func (l *Listener) CatchUps() int64 { return l.catchUps.Load() }

// Changes is how many change notifications the listener took in (its
// peers'; this replica's own only while it listens on Channel for a
// legacy peer).
func (l *Listener) Changes() int64 { return l.changes.Load() }

func (l *Listener) markHealthy() { l.healthy.Store(time.Now().UnixNano()) }

func (l *Listener) pinger(ctx context.Context) {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.pl.Ping(); err == nil {
				l.markHealthy()
			}
		}
	}
}
