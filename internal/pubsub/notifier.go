package pubsub

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/internal/storage"
)

// ReplicaChannel carries the replicas' liveness on PostgreSQL: every
// Notifier says it is up when it starts, then every Heartbeat, says when it
// had to drop notifications, and says goodbye when it stops cleanly. A
// listener that stops hearing a replica resyncs what that replica may have
// committed without notifying (see Listener).
const ReplicaChannel = "voucher_replicas"

// NotifierApplicationName tags the notifier's connection in pg_stat_activity.
const NotifierApplicationName = "voucherd-notifier"

// Replica states sent on ReplicaChannel.
const (
	replicaAlive = "alive"
	replicaGap   = "gap"
	replicaGone  = "gone"
)

// replicaMessage is a ReplicaChannel payload.
type replicaMessage struct {
	Replica string `json:"replica"`
	State   string `json:"state"`
	// Channel (alive only) is the channel the replica sends its changes
	// on. Replicas of the version before per-replica channels send no
	// Channel (their decoding ignores it): they send their changes on, and
	// LISTEN on, the shared Channel (see Listener, legacy peers).
	Channel string `json:"channel,omitempty"`
	// Started (alive only) is when the replica's notifier started.
	Started time.Time `json:"started,omitzero"`
	// Since (gap only) is the oldest change whose notification was dropped.
	Since time.Time `json:"since,omitzero"`
}

// NotifierOptions tune a Notifier; zero values take the defaults.
type NotifierOptions struct {
	// Replica names this process on ReplicaChannel; default: random.
	Replica string
	// Heartbeat is how often the notifier says it is alive (default 1 s).
	Heartbeat time.Duration
	// MaxQueue bounds the notifications waiting to be sent (default
	// 65,536). Past it the oldest are dropped and the replicas are told to
	// resync from the oldest dropped change.
	MaxQueue int
	// MaxBatch bounds the notifications one statement sends (default 128).
	// A burst (the commits a stalled disk flush held back, completing
	// together) then goes out as a pipeline of statements: the first
	// reaches the other replicas while the next is sent, instead of all
	// of them waiting for one statement that carries the whole burst.
	MaxBatch int
	Log      *slog.Logger
}

// Notifier sends this replica's committed changes to every other
// replica's Listener, after commit, from one connection of its own. They go
// on this replica's own channel (ChangeChannel of its name), which only the
// other replicas LISTEN on: this replica's subscribers get its changes in
// process, and PostgreSQL does not send them back to its listener.
//
// Why not pg_notify inside the committing transaction, which makes "the
// change committed" and "the change was notified" one fact: a transaction
// that notifies takes a cluster-wide lock at commit and keeps it through
// its WAL flush, so notifying transactions commit one flush at a time and
// never share one (group commit); that capped the whole cluster's voucher
// transitions at the disk's fdatasync rate (see docs/performance.md). Here
// the change commits alone, and the notifications go out in batches from
// a session with synchronous_commit off: a notification is a signal, not
// data (the data is already durable), so its commit needs no flush and the
// lock is held for microseconds.
//
// The price is a window: a replica that dies between a commit and its
// notification leaves other replicas unaware of that change. Listeners
// close it: every notifier says it is alive every Heartbeat on
// ReplicaChannel; a listener that stops hearing one for PeerTimeout resyncs
// every change since it last heard it (Hub.Resync), and one that hears a
// clean goodbye (Close, after the queue was sent) does not need to.
//
// A replica alone sends nothing: its own subscribers get its changes in
// process, and nobody else listens. Its Listener tells it when other
// replicas appear and disappear (PeerJoined, PeersGone). Changes made while
// it was alone are not lost to a replica that joins: on the first peer it
// sends a gap from the later of its first unsent change and the peer's
// start, so the newcomer resyncs what its subscribers could have missed
// (the ones it had before it was heard, or all along if it was wrongly
// taken for dead).
//
// While its Listener hears a replica of the previous version (a legacy
// peer, which sends and LISTENs on the shared Channel only: a rolling
// deploy), it also sends each change on Channel (LegacyJoined,
// LegacyGone). Without one, nothing is sent there and nothing is done
// for it per change.
type Notifier struct {
	db      *sql.DB
	replica string
	changes string // ChangeChannel(replica)
	opts    NotifierOptions

	// active mirrors peers for Publish's lock-free check.
	active atomic.Bool

	mu    sync.Mutex
	queue []pending
	// signals holds the waiting signals (a channel) and messages (a
	// channel, a NUL and the payload: channel names hold no NUL).
	signals map[string]bool
	gap     time.Time // oldest dropped change, zero when none
	wake    chan struct{}
	// peers: another replica is known to listen. skipped: the oldest
	// change not sent because none was (zero when none).
	peers   bool
	skipped time.Time
	started time.Time
	// legacy: a legacy peer is heard, and changes go on Channel too.
	// ownOnly is when the last change that went on this replica's channel
	// alone was made (zero when none did): a legacy peer heard later
	// never got it. ownTold is the earliest gap sent for those changes
	// (zero when none was).
	legacy  bool
	ownOnly time.Time
	ownTold time.Time

	stop    chan struct{}
	done    chan struct{}
	flushBy time.Time // set by Close: give up sending after it
	clean   bool      // set by run: everything was sent before stopping
}

// Compile-time check: a Notifier is a Publisher.
var _ Publisher = (*Notifier)(nil)

// NewNotifier connects to databaseURL and says this replica is alive, so
// listeners know it before it commits anything.
func NewNotifier(ctx context.Context, databaseURL string, opts NotifierOptions) (*Notifier, error) {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = 1 << 16
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 128
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.Replica = "rpl_" + hex.EncodeToString(b[:])
	}
	dsn, err := notifierURL(databaseURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("pubsub: notifier: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	n := &Notifier{
		db: db, replica: opts.Replica, changes: ChangeChannel(opts.Replica), opts: opts, started: time.Now().UTC(),
		signals: map[string]bool{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := n.send(ctx, nil, false, n.alive()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("pubsub: notifier: %w", err)
	}
	go n.run()
	return n, nil
}

// notifierURL is databaseURL for the notifier's session: its own, tagged,
// with synchronous_commit off and binary parameters (see Notifier).
func notifierURL(databaseURL string) (string, error) {
	return storage.AsyncCommitURL(databaseURL, NotifierApplicationName)
}

// Replica is the name this notifier uses on ReplicaChannel.
func (n *Notifier) Replica() string { return n.replica }

// ChangeChannel is the channel this notifier sends its changes on.
func (n *Notifier) ChangeChannel() string { return n.changes }

// pending is a queued notification: its payload, encoded by Publish.
type pending struct {
	id      string
	at      time.Time // when the change was made (changedAt)
	payload []byte
}

// Publish queues c's notification; it never blocks. c should carry its
// new state (VoucherChange.Voucher): the notification then carries the row
// while it fits, and no replica has to load it. The payload is encoded
// here, on the caller's goroutine (a few microseconds), so the changes of
// a burst are encoded in parallel by the requests that made them rather
// than one after another by the notifier; a replica alone encodes nothing.
func (n *Notifier) Publish(c VoucherChange) {
	if !n.active.Load() && n.skip(c) {
		return
	}
	// With the row when it fits and encodes, keys only otherwise
	// (replicas load it).
	payload, err := EncodeChange(c)
	if err != nil {
		n.opts.Log.Error("pubsub: unencodable voucher change", "voucher", c.ID)
		return
	}
	at := changedAt(c)
	n.mu.Lock()
	if !n.peers {
		n.mu.Unlock()
		n.skip(c)
		return
	}
	if len(n.queue) >= n.opts.MaxQueue {
		// Keep the newest: the dropped ones are recovered by a resync.
		dropped := n.queue[0]
		n.queue = n.queue[1:]
		if n.gap.IsZero() || dropped.at.Before(n.gap) {
			n.gap = dropped.at
		}
	}
	n.queue = append(n.queue, pending{id: c.ID, at: at, payload: payload})
	n.mu.Unlock()
	n.poke()
}

// skip records c as not sent for want of peers, unless a peer is known
// after all (then it returns false and c is to be sent).
func (n *Notifier) skip(c VoucherChange) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.peers {
		return false
	}
	if n.skipped.IsZero() {
		n.skipped = changedAt(c)
	}
	return true
}

// Signal queues an empty notification on channel (coalesced with any
// already waiting), for listeners that only need a wake-up.
func (n *Notifier) Signal(channel string) {
	n.mu.Lock()
	if !n.peers {
		n.mu.Unlock()
		return // nobody else to wake
	}
	n.signals[channel] = true
	n.mu.Unlock()
	n.poke()
}

// Send queues a notification of payload on channel (coalesced with the
// same one already waiting), for every replica's listeners, this one's
// included. Unlike changes and signals it goes out even when no other
// replica is known: its senders (internal/revocation) wait for their own
// listener's echo, which proves every replica that announced itself
// earlier is known. Like changes, it goes out after what was queued before
// it, from the notifier's connection. payload must hold no NUL (PostgreSQL
// text cannot).
func (n *Notifier) Send(channel, payload string) {
	if strings.IndexByte(payload, 0) >= 0 {
		return
	}
	n.mu.Lock()
	n.signals[channel+"\x00"+payload] = true
	n.mu.Unlock()
	n.poke()
}

// PeerJoined tells n that another replica, whose notifier started at
// started, is listening (it is called for every replica newly heard). If
// n skipped changes while it knew of none, the replicas are told to
// resync from the later of the first skipped change and started.
func (n *Notifier) PeerJoined(started time.Time) {
	n.mu.Lock()
	if !n.peers && !n.skipped.IsZero() {
		since := n.skipped
		if started.After(since) {
			since = started
		}
		if n.gap.IsZero() || since.Before(n.gap) {
			n.gap = since
		}
		n.skipped = time.Time{}
	}
	n.peers = true
	n.active.Store(true)
	n.mu.Unlock()
	n.poke()
}

// LegacyJoined tells n that a legacy peer, whose notifier started at
// started, is heard (it is called for every one newly heard, before
// PeerJoined): from now on n sends its changes on Channel too, where that
// peer listens. If n sent changes on its own channel alone after that
// peer started (a minute of margin for clocks apart), the replicas are
// told to resync from the later of its start and n's: the legacy peer
// missed them. (New replicas resync for nothing then; it happens only when
// a change went out between hearing a new peer and hearing an old one.)
func (n *Notifier) LegacyJoined(started time.Time) {
	n.mu.Lock()
	n.legacy = true
	if !n.ownOnly.IsZero() && n.ownOnly.After(started.Add(-time.Minute)) {
		since := started
		if n.started.After(since) {
			since = n.started
		}
		// Another legacy peer's gap covered this one's unless it began later.
		if n.ownTold.IsZero() || since.Before(n.ownTold) {
			n.ownTold = since
			if n.gap.IsZero() || since.Before(n.gap) {
				n.gap = since
			}
		}
	}
	n.mu.Unlock()
	n.poke()
}

// LegacyGone tells n that no legacy peer is heard any more: it stops
// sending on Channel.
func (n *Notifier) LegacyGone() {
	n.mu.Lock()
	n.legacy = false
	n.mu.Unlock()
}

// PeersGone tells n that no other replica is known to listen any more.
func (n *Notifier) PeersGone() {
	n.mu.Lock()
	n.peers = false
	n.active.Store(false)
	n.mu.Unlock()
}

func (n *Notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// changedAt is when a change was made, as far as the notifier knows.
func changedAt(c VoucherChange) time.Time {
	if c.Voucher != nil && !c.Voucher.UpdatedAt.IsZero() {
		return c.Voucher.UpdatedAt
	}
	return time.Now()
}

// Close sends what is queued (until ctx ends), says goodbye when all of it
// went out, and closes the connection. A goodbye tells listeners they need
// not resync; without it they will.
func (n *Notifier) Close(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	n.mu.Lock()
	n.flushBy = deadline
	n.mu.Unlock()
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	<-n.done
	var err error
	if n.clean {
		sctx, cancel := context.WithDeadline(context.Background(), deadline)
		err = n.send(sctx, nil, false, n.control(replicaGone, time.Time{}))
		cancel()
	} else {
		err = errors.New("pubsub: notifier closed with notifications unsent; listeners will resync")
	}
	_ = n.db.Close()
	return err
}

func (n *Notifier) alive() [2]string {
	b, _ := json.Marshal(replicaMessage{Replica: n.replica, State: replicaAlive, Channel: n.changes, Started: n.started})
	return [2]string{ReplicaChannel, string(b)}
}

func (n *Notifier) control(state string, since time.Time) [2]string {
	b, _ := json.Marshal(replicaMessage{Replica: n.replica, State: state, Since: since})
	return [2]string{ReplicaChannel, string(b)}
}

// run sends batches as changes arrive: whatever queued while the previous
// statement was in flight goes in the next one, so batches grow with load
// and a lone change waits for nothing.
func (n *Notifier) run() {
	defer close(n.done)
	hb := time.NewTicker(n.opts.Heartbeat)
	defer hb.Stop()
	due := false // a heartbeat is due
	backoff := 50 * time.Millisecond
	stopping := false
	for {
		if !stopping {
			select {
			case <-n.wake:
			case <-hb.C:
				due = true
			case <-n.stop:
				stopping = true
			}
		}
		heartbeat := due && !stopping
		changes, signals, gap, legacy := n.take()
		if stopping && len(changes) == 0 && len(signals) == 0 && gap.IsZero() {
			n.clean = true
			return
		}
		if len(changes) == 0 && len(signals) == 0 && gap.IsZero() && !heartbeat {
			continue
		}
		var extra [][2]string
		if !gap.IsZero() {
			extra = append(extra, n.control(replicaGap, gap))
		}
		for _, sig := range signals {
			ch, payload, _ := strings.Cut(sig, "\x00")
			extra = append(extra, [2]string{ch, payload})
		}
		if heartbeat {
			extra = append(extra, n.alive())
		}
		ctx, cancel := n.sendContext(stopping)
		err := n.send(ctx, changes, legacy, extra...)
		cancel()
		if err == nil {
			// Sent: the statement's parameters were copied into its
			// message, so the payloads go back to EncodeChange's pool.
			for _, c := range changes {
				ReleasePayload(c.payload)
			}
			if heartbeat {
				due = false
			}
			backoff = 50 * time.Millisecond
			continue
		}
		n.putBack(changes, signals, gap)
		if stopping && time.Now().After(n.deadline()) {
			return
		}
		n.opts.Log.Warn("pubsub: sending change notifications failed; retrying", "err", err.Error(), "changes", len(changes))
		wait := time.NewTimer(backoff)
		if stopping {
			<-wait.C
		} else {
			select {
			case <-wait.C:
			case <-n.stop:
				wait.Stop()
				stopping = true
			}
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (n *Notifier) deadline() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.flushBy
}

func (n *Notifier) sendContext(stopping bool) (context.Context, context.CancelFunc) {
	if stopping {
		return context.WithDeadline(context.Background(), n.deadline())
	}
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// take removes up to MaxBatch changes, the waiting signals and the gap,
// and says whether the changes go on Channel too.
func (n *Notifier) take() ([]pending, []string, time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := min(len(n.queue), n.opts.MaxBatch)
	changes := append([]pending(nil), n.queue[:k]...)
	n.queue = n.queue[k:]
	if len(n.queue) == 0 {
		n.queue = nil // let the backing array go
	} else {
		n.poke()
	}
	var signals []string
	for ch := range n.signals {
		signals = append(signals, ch)
	}
	clear(n.signals)
	gap := n.gap
	n.gap = time.Time{}
	if k > 0 && !n.legacy {
		n.ownOnly, n.ownTold = changes[k-1].at, time.Time{}
	}
	return changes, signals, gap, n.legacy
}

// putBack returns an unsent batch to the front of the queue.
func (n *Notifier) putBack(changes []pending, signals []string, gap time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queue = append(changes, n.queue...)
	if over := len(n.queue) - n.opts.MaxQueue; over > 0 {
		for _, c := range n.queue[:over] {
			if gap.IsZero() || c.at.Before(gap) {
				gap = c.at
			}
		}
		n.queue = n.queue[over:]
	}
	for _, ch := range signals {
		n.signals[ch] = true
	}
	if !gap.IsZero() && (n.gap.IsZero() || gap.Before(n.gap)) {
		n.gap = gap
	}
}

// send issues one statement with the changes' notifications (each on
// Channel too when legacy), then extra (channel, payload) pairs. Payloads
// go as binary parameters: no quoting or escaping on either side.
func (n *Notifier) send(ctx context.Context, changes []pending, legacy bool, extra ...[2]string) error {
	args := make([]any, 0, len(changes)+len(extra))
	chans := make([]string, 0, len(changes)+len(extra))
	for _, c := range changes {
		chans = append(chans, n.changes)
		args = append(args, c.payload)
		if legacy {
			chans = append(chans, Channel)
			args = append(args, c.payload)
		}
	}
	for _, e := range extra {
		chans = append(chans, e[0])
		args = append(args, []byte(e[1]))
	}
	if len(args) == 0 {
		return nil
	}
	_, err := n.db.ExecContext(ctx, notifyStatement(chans), args...)
	return err
}

// notifyStatement is "SELECT pg_notify('ch', $1), pg_notify('ch', $2), ...":
// one row whose target list PostgreSQL evaluates in order, so the
// notifications are queued (and delivered) in the order given, across
// channels too: a listener hears this replica's changes, on its change
// channel, and its liveness messages in the order they were sent. Channel
// names are this program's constants and ChangeChannel's, quoted all the
// same.
func notifyStatement(chans []string) string {
	var b strings.Builder
	b.Grow(16 + 40*len(chans))
	b.WriteString("SELECT ")
	for i, ch := range chans {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_notify(")
		b.WriteString(pq.QuoteLiteral(ch))
		b.WriteString(", $")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(")")
	}
	return b.String()
}
