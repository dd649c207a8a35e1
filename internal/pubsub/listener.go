package pubsub

import (
	"context"
	"encoding/json"
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
	// messages are ignored. Empty: every replica is a peer.
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
}

// PeerWatcher learns which other replicas the Listener hears.
type PeerWatcher interface {
	// PeerJoined: a replica not heard before (or since it was taken for
	// gone), whose notifier started at started.
	PeerJoined(started time.Time)
	// PeersGone: no other replica is heard any more.
	PeersGone()
}

// Listener feeds a Hub from PostgreSQL: LISTEN on Channel, every
// notification (from any replica, this one included) is published to the
// hub. Changes can go unnotified in two ways, and both end in the hub
// re-sending current state (Hub.Resync) for everything changed since just
// before the loss could have begun:
//
//   - this listener's connection drops: notifications sent during the gap
//     are gone; resync from when the connection was last known good;
//   - another replica stops (see Notifier): one that said goodbye sent
//     everything first; one that went silent for PeerTimeout (killed, cut
//     off, or told us it dropped notifications) may have committed changes
//     it never notified; resync from when it was last heard.
type Listener struct {
	pl   *pq.Listener
	hub  *Hub
	opts ListenerOptions
	stop context.CancelFunc
	wg   sync.WaitGroup
	// healthy is when the connection was last known good (unix nanos).
	healthy atomic.Int64
	// peers maps each live replica to when it was last heard (local
	// clock); only the run goroutine touches it.
	peers map[string]time.Time
	// resyncs counts resyncs started, for tests and metrics.
	resyncs atomic.Int64
	// heard is when a notification was last taken in (unix nanos);
	// known is a copy of peers' names for Peers.
	heard atomic.Int64
	known atomic.Pointer[[]string]
}

// ApplicationName tags the listener's connection in pg_stat_activity.
const ApplicationName = "voucherd-listener"

// Listen connects to databaseURL and starts feeding hub. It returns once
// LISTEN is in effect, so no change committed after it returns is missed.
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
	listened := make(chan error, 1)
	go func() {
		err := pl.Listen(Channel)
		if err == nil {
			err = pl.Listen(ReplicaChannel)
		}
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
			return nil, fmt.Errorf("pubsub: LISTEN %s: %w", Channel, err)
		}
	case <-ctx.Done():
		_ = pl.Close()
		return nil, ctx.Err()
	}
	runCtx, stop := context.WithCancel(context.Background())
	l := &Listener{pl: pl, hub: hub, opts: opts, stop: stop, peers: map[string]time.Time{}}
	l.wg.Add(1)
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
			for id, seen := range l.peers {
				if now.Sub(seen) > l.opts.PeerTimeout {
					l.dropPeer(id)
					log.Warn("pubsub: replica went silent; resyncing what it may not have notified", "replica", id)
					l.resync(ctx, seen)
				}
			}
		case n, ok := <-l.pl.Notify:
			if !ok {
				return
			}
			if n == nil {
				// lib/pq sends nil after re-establishing the connection:
				// whatever was notified in between is lost, the peers'
				// heartbeats included (they are fresh again as of now).
				since := time.Unix(0, l.healthy.Load())
				l.markHealthy()
				for id := range l.peers {
					l.peers[id] = time.Now()
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
			if err := l.hub.PublishNotification(n.Extra); err != nil {
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
		l.dropPeer(m.Replica)
	case replicaGap:
		if _, known := l.peers[m.Replica]; known {
			l.peers[m.Replica] = time.Now()
		}
		if m.Since.IsZero() {
			m.Since = time.Now()
		}
		l.opts.Log.Info("pubsub: a replica did not notify some changes; resyncing", "replica", m.Replica)
		l.resync(ctx, m.Since)
	default:
		if _, known := l.peers[m.Replica]; !known && l.opts.Peers != nil {
			started := m.Started
			if started.IsZero() {
				started = time.Now()
			}
			l.opts.Peers.PeerJoined(started)
		}
		_, known := l.peers[m.Replica]
		l.peers[m.Replica] = time.Now()
		if !known {
			l.publishPeers()
		}
	}
}

func (l *Listener) dropPeer(id string) {
	if _, ok := l.peers[id]; !ok {
		return
	}
	delete(l.peers, id)
	l.publishPeers()
	if len(l.peers) == 0 && l.opts.Peers != nil {
		l.opts.Peers.PeersGone()
	}
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

// Resyncs is how many resyncs the listener started.
func (l *Listener) Resyncs() int64 { return l.resyncs.Load() }

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
