// Package natsbus carries cross-replica notifications over NATS core
// subjects instead of PostgreSQL's LISTEN/NOTIFY (VOUCHER_PUBSUB_URL): the
// voucher changes that feed every replica's pubsub.Hub, and the plain
// channels (ended principals, webhook wake-ups) that LISTEN/NOTIFY carries
// beside them. A Bus is both halves of one replica's fan-out: it publishes
// what this replica committed (pubsub.Publisher, Signal, Send) and feeds
// the hub with what the others did.
//
// NATS core delivers at most once and keeps nothing: the database stays
// the source of truth, and whatever the bus may have lost ends, as with
// LISTEN/NOTIFY, in the hub re-reading current state (pubsub.Hub.Resync):
//
//   - this replica's connection dropped (NATS restarted, the network cut):
//     on reconnecting it resyncs everything its subscriptions follow
//     changed since just before the drop;
//   - NATS dropped messages for a slow subscriber: resync from then;
//   - another replica could not publish (its connection down and its
//     reconnect buffer full): it says so once it is back (a "gap"), and the
//     others resync from its first lost change;
//   - another replica went silent (killed, cut off) for PeerTimeout: the
//     others resync what it committed since it was last heard.
//
// A resync sends a voucher's state only when it is newer than what this
// hub already dispatched, so subscribers see versions in order and never
// the same one twice. While NATS is down nothing waits for it: Publish
// never blocks, requests are served, and subscribers catch up on reconnect.
package natsbus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/voucherd/voucherd/internal/pubsub"
)

// DefaultPrefix is the first token of every subject the bus uses:
// "<prefix>.<channel>", the channel being the LISTEN/NOTIFY channel's name
// (revocation's channels, webhook.NotifyChannel), "<prefix>.voucher_replicas"
// for the replicas' liveness, and "<prefix>.voucher_changes.<replica>" for
// each replica's changes (its own skipped by the subject, unread).
//
// As on LISTEN/NOTIFY, a replica hears its own messages (Handlers, the
// liveness subject): ends of principals wait for their own echo, and Heard
// moves with the replica's own heartbeats.
const DefaultPrefix = "voucherd"

// Options tune a Bus; zero values take the defaults.
type Options struct {
	// URL is one NATS server or a comma-separated list of them
	// (nats://host:port[,nats://host:port...]); credentials in it are
	// used, never logged.
	URL string
	// Prefix is the subjects' first token (default DefaultPrefix).
	Prefix string
	// Replica names this process on the replicas subject and in its
	// changes' subject (letters, digits, '_' and '-'); default random.
	Replica string
	// Heartbeat is how often the bus says it is alive (default 1 s).
	Heartbeat time.Duration
	// PeerTimeout is how long another replica may stay silent before what
	// it committed since it was last heard is resynced (default 5 s).
	PeerTimeout time.Duration
	// ResyncMargin reaches back before a loss began, covering
	// transactions that committed into the gap and clocks apart (default
	// one minute, as on LISTEN/NOTIFY).
	ResyncMargin time.Duration
	// ReconnectWait is the pause between reconnect attempts (default
	// 250 ms, plus NATS's jitter).
	ReconnectWait time.Duration
	// ReconnectBufSize bounds what Publish keeps while disconnected, sent
	// on reconnect (0: NATS's default, 8 MiB; negative: nothing is kept,
	// every publish while down is a gap).
	ReconnectBufSize int
	// Handlers are further channels to follow, each with what to do with a
	// message's payload (Send, Signal); called on the bus's delivery
	// goroutine, so they must not block. Like LISTEN/NOTIFY, a message
	// lost while disconnected is not replayed for them.
	Handlers map[string]func(payload string)
	// Lost, when set, is called whenever the bus resyncs (reconnected,
	// NATS dropped messages, a replica went silent or announced a gap):
	// messages of Handlers' channels may have been lost, and they are not
	// replayed.
	Lost func()
	// Reconnected, when set, is called after every (re)connection, for
	// followers of Handlers that need a nudge after a possible loss (the
	// webhook dispatcher looks for due deliveries).
	Reconnected func()
	Log         *slog.Logger
}

// Bus is one replica's NATS connection: see the package comment.
type Bus struct {
	nc      *nats.Conn
	hub     *pubsub.Hub
	opts    Options
	replica string
	started time.Time

	changes string // subject of this replica's voucher changes
	peersSj string // subject of liveness messages
	// heard is when a message was last taken in (unix nanos).
	heard atomic.Int64
	known atomic.Pointer[[]string]

	mu sync.Mutex
	// down is when the connection was lost (zero while connected).
	down time.Time
	// gap is this replica's oldest change that could not be published
	// (zero when none), announced once the connection is back.
	gap time.Time
	// peers maps each live replica to when it was last heard.
	peers map[string]time.Time

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	resyncs atomic.Int64
	closed  atomic.Bool
}

// Compile-time check: a Bus is a Publisher.
var _ pubsub.Publisher = (*Bus)(nil)

// Replica states on the replicas subject.
const (
	stateAlive = "alive"
	stateGap   = "gap"
	stateGone  = "gone"
)

type replicaMessage struct {
	Replica string    `json:"replica"`
	State   string    `json:"state"`
	Since   time.Time `json:"since,omitzero"`
}

// ReplicasChannel is the liveness channel's name under the prefix.
const ReplicasChannel = "voucher_replicas"

// ValidateURL checks a VOUCHER_PUBSUB_URL value: one or more nats:// or
// tls:// URLs with a host, comma-separated. Its error never repeats the
// URL (it may hold credentials).
func ValidateURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return errors.New("empty")
	}
	for i, s := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("server %d is not a nats://host:port URL", i+1)
		}
	}
	return nil
}

// Connect starts a bus feeding hub. It waits for the first connection
// until ctx ends or two seconds pass; a NATS server not reachable by then
// is logged and retried in the background, and the replica serves
// meanwhile (its subscribers catch up once NATS is reached).
func Connect(ctx context.Context, hub *pubsub.Hub, opts Options) (*Bus, error) {
	if err := ValidateURL(opts.URL); err != nil {
		return nil, fmt.Errorf("natsbus: URL: %w", err)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.PeerTimeout <= 0 {
		opts.PeerTimeout = 5 * time.Second
	}
	if opts.ResyncMargin <= 0 {
		opts.ResyncMargin = time.Minute
	}
	if opts.ReconnectWait <= 0 {
		opts.ReconnectWait = 250 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.Replica = "rpl_" + hex.EncodeToString(b[:])
	}
	if strings.Trim(opts.Replica, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return nil, errors.New("natsbus: a replica name is letters, digits, '_' and '-'")
	}
	b := &Bus{
		hub: hub, opts: opts, replica: opts.Replica, started: time.Now(),
		changes: opts.Prefix + "." + pubsub.Channel + "." + opts.Replica,
		peersSj: opts.Prefix + "." + ReplicasChannel,
		peers:   map[string]time.Time{},
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	connected := make(chan struct{}, 1)
	// late: the first connection was not made within nats.Connect (NATS
	// was down at start); ready orders the handler after that is known.
	ready := make(chan struct{})
	late := false
	nopts := []nats.Option{
		nats.Name("voucherd " + opts.Replica),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(opts.ReconnectWait),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.ConnectHandler(func(*nats.Conn) {
			<-ready
			if late {
				// Subscriptions may have been opened (and changes
				// missed) before NATS was reached.
				opts.Log.Info("pubsub: NATS reached; resyncing what subscribers may have missed")
				b.reconnected(b.started)
			}
			signal(connected)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.mu.Lock()
			if b.down.IsZero() {
				b.down = time.Now()
			}
			b.mu.Unlock()
			if !b.closed.Load() {
				opts.Log.Warn("pubsub: NATS connection lost; serving on, subscribers catch up when it is back", "err", errString(err))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			b.mu.Lock()
			since := b.down
			b.down = time.Time{}
			b.mu.Unlock()
			if since.IsZero() {
				since = time.Now()
			}
			opts.Log.Info("pubsub: NATS connection re-established; resyncing what subscribers may have missed")
			b.reconnected(since)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				// NATS dropped messages this replica did not read in time.
				opts.Log.Warn("pubsub: NATS dropped notifications for this replica; resyncing")
				b.resync(time.Now())
				return
			}
			opts.Log.Warn("pubsub: NATS error", "err", errString(err))
		}),
	}
	if opts.ReconnectBufSize != 0 {
		nopts = append(nopts, nats.ReconnectBufSize(opts.ReconnectBufSize))
	}
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		close(ready)
		return nil, fmt.Errorf("natsbus: connect: %w", err)
	}
	b.nc = nc
	late = !nc.IsConnected()
	close(ready)
	if err := b.subscribe(); err != nil {
		nc.Close()
		return nil, err
	}
	wait := time.NewTimer(2 * time.Second)
	defer wait.Stop()
	select {
	case <-connected:
	case <-wait.C:
		opts.Log.Warn("pubsub: NATS not reachable yet; retrying in the background")
	case <-ctx.Done():
		nc.Close()
		return nil, ctx.Err()
	}
	if nc.IsConnected() {
		b.markHeard() // subscribed and connected: nothing missed so far
	}
	b.announce(stateAlive, time.Time{})
	b.wg.Add(1)
	go b.run()
	return b, nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (b *Bus) subject(channel string) string { return b.opts.Prefix + "." + channel }

// subscribe follows the changes, the replicas' liveness and the handlers'
// channels. Subscriptions made before the first connection are sent once
// it is made.
func (b *Bus) subscribe() error {
	sub, err := b.nc.Subscribe(b.opts.Prefix+"."+pubsub.Channel+".*", func(m *nats.Msg) {
		b.markHeard()
		if m.Subject == b.changes {
			return // this replica's own: its hub had it in process
		}
		publish := b.hub.PublishNotification
		if n, _, _ := m.Sub.Pending(); n > 0 {
			// More messages are read already: this one's frames go to
			// the transports' workers (see Hub.PublishNotificationBehind).
			publish = b.hub.PublishNotificationBehind
		}
		if err := publish(string(m.Data)); err != nil {
			b.opts.Log.Error("pubsub: malformed voucher change notification", "bytes", len(m.Data))
		}
	})
	if err != nil {
		return fmt.Errorf("natsbus: subscribe: %w", err)
	}
	// Hub.Publish never blocks, so the subscriber keeps up with anything
	// the bus can carry; the limits only bound memory if the process
	// stalls (past them NATS drops, and the slow-consumer error resyncs).
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		return fmt.Errorf("natsbus: subscribe: %w", err)
	}
	if _, err := b.nc.Subscribe(b.peersSj, func(m *nats.Msg) { b.markHeard(); b.replicaMessage(m.Data) }); err != nil {
		return fmt.Errorf("natsbus: subscribe: %w", err)
	}
	for ch, h := range b.opts.Handlers {
		if _, err := b.nc.Subscribe(b.subject(ch), func(m *nats.Msg) { b.markHeard(); h(string(m.Data)) }); err != nil {
			return fmt.Errorf("natsbus: subscribe: %w", err)
		}
	}
	return nil
}

// Replica is the name this bus uses on the replicas subject.
func (b *Bus) Replica() string { return b.replica }

func (b *Bus) markHeard() { b.heard.Store(time.Now().UnixNano()) }

// Heard is when the bus last took in a message (any replica's, its own
// heartbeats included); zero before the first.
func (b *Bus) Heard() time.Time {
	n := b.heard.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Peers are the other replicas this one currently hears.
func (b *Bus) Peers() []string {
	if p := b.known.Load(); p != nil {
		return *p
	}
	return nil
}

// publishPeers copies the peers' names for Peers (b.mu held).
func (b *Bus) publishPeers() {
	names := make([]string, 0, len(b.peers))
	for id := range b.peers {
		names = append(names, id)
	}
	b.known.Store(&names)
}

// Resyncs is how many resyncs the bus started.
func (b *Bus) Resyncs() int64 { return b.resyncs.Load() }

// Publish sends c to the other replicas, with the voucher's row when c
// carries its state (then no replica loads it). It never blocks: while
// NATS is down the message waits in the reconnect buffer, and past it the
// change is remembered as a gap the other replicas resync.
func (b *Bus) Publish(c pubsub.VoucherChange) {
	// With the row when it fits and encodes, keys only otherwise
	// (replicas load it).
	payload, err := pubsub.EncodeChange(c)
	if err != nil {
		b.opts.Log.Error("pubsub: unencodable voucher change", "voucher", c.ID)
		return
	}
	// Publish copies the payload into the connection's buffer (or the
	// reconnect buffer), so it goes back to EncodeChange's pool either way.
	err = b.nc.Publish(b.changes, payload)
	pubsub.ReleasePayload(payload)
	if err != nil {
		at := time.Now()
		if c.Voucher != nil && !c.Voucher.UpdatedAt.IsZero() {
			at = c.Voucher.UpdatedAt
		}
		b.lost(at)
	}
}

// Signal sends an empty message on channel (a wake-up).
func (b *Bus) Signal(channel string) { b.Send(channel, "") }

// Send sends payload on channel to every replica's Handlers, this one's
// included. Lost while NATS is down, as a NOTIFY is lost to a listener
// whose connection dropped.
func (b *Bus) Send(channel, payload string) {
	_ = b.nc.Publish(b.subject(channel), []byte(payload))
}

// lost records a change that could not be published.
func (b *Bus) lost(at time.Time) {
	b.mu.Lock()
	if b.gap.IsZero() || at.Before(b.gap) {
		b.gap = at
	}
	b.mu.Unlock()
}

// reconnected runs after a (re)connection: the peers' silence while this
// replica was away is not theirs, its own lost publishes are announced,
// and its subscribers are brought up to date from since.
func (b *Bus) reconnected(since time.Time) {
	b.mu.Lock()
	now := time.Now()
	for id := range b.peers {
		b.peers[id] = now
	}
	b.mu.Unlock()
	b.announceGap()
	b.resync(since)
	if b.opts.Reconnected != nil {
		b.opts.Reconnected()
	}
}

// announceGap tells the other replicas to resync this one's lost changes.
func (b *Bus) announceGap() {
	b.mu.Lock()
	gap := b.gap
	b.gap = time.Time{}
	b.mu.Unlock()
	if gap.IsZero() {
		return
	}
	if err := b.announce(stateGap, gap); err != nil {
		b.lost(gap)
	}
}

func (b *Bus) announce(state string, since time.Time) error {
	msg, _ := json.Marshal(replicaMessage{Replica: b.replica, State: state, Since: since})
	return b.nc.Publish(b.peersSj, msg)
}

// replicaMessage tracks another replica's liveness.
func (b *Bus) replicaMessage(data []byte) {
	var m replicaMessage
	if err := json.Unmarshal(data, &m); err != nil || m.Replica == "" {
		b.opts.Log.Error("pubsub: malformed replica message", "bytes", len(data))
		return
	}
	if m.Replica == b.replica {
		return
	}
	b.mu.Lock()
	switch m.State {
	case stateGone:
		delete(b.peers, m.Replica)
		b.publishPeers()
		b.mu.Unlock()
	case stateGap:
		if _, known := b.peers[m.Replica]; !known {
			b.peers[m.Replica] = time.Now()
			b.publishPeers()
		}
		b.peers[m.Replica] = time.Now()
		b.mu.Unlock()
		if m.Since.IsZero() {
			m.Since = time.Now()
		}
		b.opts.Log.Info("pubsub: a replica could not publish some changes; resyncing", "replica", m.Replica)
		b.resync(m.Since)
	default:
		_, known := b.peers[m.Replica]
		b.peers[m.Replica] = time.Now()
		if !known {
			b.publishPeers()
		}
		b.mu.Unlock()
	}
}

// run says this replica is alive every Heartbeat, announces a gap left
// over from a failed announcement, and resyncs for peers gone silent.
func (b *Bus) run() {
	defer b.wg.Done()
	hb := time.NewTicker(b.opts.Heartbeat)
	defer hb.Stop()
	check := time.NewTicker(b.opts.PeerTimeout / 4)
	defer check.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-hb.C:
			if b.nc.IsConnected() {
				b.announceGap()
				_ = b.announce(stateAlive, time.Time{})
			}
		case now := <-check.C:
			if !b.nc.IsConnected() {
				// Everyone looks silent from here; reconnected resets them.
				continue
			}
			var silent []time.Time
			b.mu.Lock()
			for id, seen := range b.peers {
				if now.Sub(seen) > b.opts.PeerTimeout {
					delete(b.peers, id)
					b.publishPeers()
					silent = append(silent, seen)
					b.opts.Log.Warn("pubsub: replica went silent; resyncing what it may not have published", "replica", id)
				}
			}
			b.mu.Unlock()
			for _, seen := range silent {
				b.resync(seen)
			}
		}
	}
}

// resync re-sends, in the background, what changed since (less the
// margin) to this replica's subscribers.
func (b *Bus) resync(since time.Time) {
	if b.closed.Load() {
		return
	}
	since = since.Add(-b.opts.ResyncMargin)
	b.resyncs.Add(1)
	if b.opts.Lost != nil {
		b.opts.Lost()
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		if err := b.hub.Resync(ctx, since); err != nil && b.ctx.Err() == nil {
			b.opts.Log.Error("pubsub: resync failed", "err", err.Error())
		}
	}()
}

// Close sends what is buffered (until ctx ends), says goodbye when all of
// it went out (the others then need not resync), and closes the
// connection.
func (b *Bus) Close(ctx context.Context) error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.cancel()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var err error
	b.mu.Lock()
	clean := b.gap.IsZero()
	b.mu.Unlock()
	if !clean {
		err = errors.New("pubsub: NATS bus closed with changes unpublished; the other replicas will resync")
	} else if err = b.nc.FlushWithContext(ctx); err == nil {
		if err = b.announce(stateGone, time.Time{}); err == nil {
			err = b.nc.FlushWithContext(ctx)
		}
	}
	b.nc.Close()
	b.wg.Wait()
	return err
}

// Connected reports whether the bus is connected to NATS now.
func (b *Bus) Connected() bool { return b.nc.IsConnected() }
