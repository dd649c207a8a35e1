package pubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// oldReplica is a replica of the version before per-replica channels, as
// PostgreSQL sees it: a bare session that says "alive" on ReplicaChannel
// every heartbeat without naming a change channel, NOTIFYs its changes on
// the shared voucher_changes in that version's payload format, and
// LISTENs there. The wire format is written out here, not taken from the
// package, so that a change to it shows.
type oldReplica struct {
	t       *testing.T
	s       *shared
	name    string
	started time.Time
	l       *pq.Listener

	mu    sync.Mutex
	heard []string // payloads heard on voucher_changes

	stop, done chan struct{}
}

const legacyChannel = "voucher_changes"

func startOldReplica(t *testing.T, s *shared, name string) *oldReplica {
	t.Helper()
	o := &oldReplica{t: t, s: s, name: name, started: time.Now().UTC(), stop: make(chan struct{}), done: make(chan struct{})}
	o.l = pq.NewListener(s.url, 10*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { o.l.Close() })
	if err := o.l.Listen(legacyChannel); err != nil {
		t.Fatal(err)
	}
	go func() {
		for n := range o.l.Notify {
			if n != nil {
				o.mu.Lock()
				o.heard = append(o.heard, n.Extra)
				o.mu.Unlock()
			}
		}
	}()
	alive := `{"replica":"` + name + `","state":"alive","started":"` + o.started.Format(time.RFC3339Nano) + `"}`
	o.notify(pubsub.ReplicaChannel, alive)
	go func() {
		defer close(o.done)
		for {
			select {
			case <-o.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := s.db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ReplicaChannel, alive); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	t.Cleanup(o.silence)
	return o
}

func (o *oldReplica) notify(channel, payload string) {
	o.t.Helper()
	if _, err := o.s.db.SQL.Exec("SELECT pg_notify($1, $2)", channel, payload); err != nil {
		o.t.Fatal(err)
	}
}

// silence stops the heartbeats (the old replica is killed).
func (o *oldReplica) silence() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
}

// goodbye stops the heartbeats and says goodbye, as a clean stop does.
func (o *oldReplica) goodbye() {
	o.silence()
	o.notify(pubsub.ReplicaChannel, `{"replica":"`+o.name+`","state":"gone"}`)
}

// change commits a new version of v and notifies it on voucher_changes:
// the keys, a newline and the row.
func (o *oldReplica) change(v *ent.Voucher) *ent.Voucher {
	o.t.Helper()
	v = commit(o.t, o.s.db, v)
	row, err := json.Marshal(v)
	if err != nil {
		o.t.Fatal(err)
	}
	keys := fmt.Sprintf(`{"id":%q,"version":%d,"sessionId":%q,"payerId":%q,"payeeId":%q}`, v.ID, v.Version, v.SessionID, v.PayerID, v.PayeeID)
	o.notify(legacyChannel, keys+"\n"+string(row))
	return v
}

// heardSoFar is how many change notifications the old replica heard.
func (o *oldReplica) heardSoFar() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.heard)
}

// waitHeard waits until the old replica heard v's version on
// voucher_changes.
func (o *oldReplica) waitHeard(v *ent.Voucher) {
	o.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o.mu.Lock()
		for _, p := range o.heard {
			if c, err := pubsub.ParseNotification(p); err == nil && c.ID == v.ID && c.Version == v.Version && len(c.Row) > 0 {
				o.mu.Unlock()
				return
			}
		}
		o.mu.Unlock()
		if time.Now().After(deadline) {
			o.t.Fatalf("the old replica did not hear %s v%d on %s", v.ID, v.Version, legacyChannel)
		}
	}
}

// waitListening waits until l's LISTENs are in effect on exactly these
// change channels.
func waitListening(t *testing.T, l *pubsub.Listener, channels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := l.PeerChannels()
		same := len(got) == len(channels)
		for _, ch := range channels {
			found := false
			for _, g := range got {
				found = found || g == ch
			}
			same = same && found
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening on change channels %v, want %v", got, channels)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitLegacy(t *testing.T, n *pubsub.Notifier, want bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); n.SendsLegacy() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the notifier of %s sends on %s: %v, want %v", n.Replica(), legacyChannel, !want, want)
		}
	}
}

// tally reads a subscription's events and fails on any version sent to it
// twice.
type tally struct {
	sub  *pubsub.Subscription
	sent map[string]bool // id@version
}

func newTally(t *testing.T, h *pubsub.Hub, session string) *tally {
	sub := h.Subscribe(pubsub.BySession, session)
	t.Cleanup(sub.Close)
	return &tally{sub: sub, sent: map[string]bool{}}
}

func (tl *tally) take(t *testing.T, ev *pubsub.Event) {
	t.Helper()
	key := fmt.Sprintf("%s@%d", ev.Voucher.ID, ev.Voucher.Version)
	if tl.sent[key] {
		t.Fatalf("%s sent twice to one subscriber (resync %v)", key, ev.Resync)
	}
	tl.sent[key] = true
}

// wait waits until v's version was sent (an event not marked Resync).
func (tl *tally) wait(t *testing.T, v *ent.Voucher) {
	t.Helper()
	for {
		ev := waitEvent(t, tl.sub, 5*time.Second)
		tl.take(t, ev)
		if ev.Voucher.ID == v.ID && ev.Voucher.Version == v.Version {
			if ev.Resync {
				t.Fatalf("%s v%d came as a resync", v.ID, v.Version)
			}
			return
		}
	}
}

// quiet checks that nothing more is sent within d.
func (tl *tally) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if ev, err := tl.sub.Next(ctx); err == nil {
		tl.take(t, ev)
		t.Fatalf("unexpected event %s v%d (resync %v)", ev.Voucher.ID, ev.Voucher.Version, ev.Resync)
	}
}

// newVoucher creates another voucher in v0's session.
func newVoucher(t *testing.T, s *shared, v0 *ent.Voucher, code string) *ent.Voucher {
	t.Helper()
	v, err := s.db.Voucher.Create().SetCode(code).SetSessionID(v0.SessionID).
		SetPayerID(v0.PayerID).SetPayeeID(v0.PayeeID).SetExpiresAt(v0.ExpiresAt).Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A rolling deploy from the shared channel: two replicas of this version
// and one of the previous one on one database. The old replica's change
// reaches both new replicas' subscribers; each new replica's change goes
// on voucher_changes too, where the old one hears it; every subscriber
// gets each version once, though the new replicas hear each other's
// changes twice and their own once. Once the old replica says goodbye,
// the new ones neither listen on nor send to voucher_changes any more.
func TestRollingDeployFromTheSharedChannel(t *testing.T) {
	s := newShared(t)
	v0 := seed(t, s.db)
	no := pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond}
	a, b := s.hub(t), s.hub(t)
	subA, subB := newTally(t, a.hub, v0.SessionID), newTally(t, b.hub, v0.SessionID)
	s.start(t, a, "rpl_a", pubsub.ListenerOptions{}, no)
	s.start(t, b, "rpl_b", pubsub.ListenerOptions{}, no)
	waitListening(t, a.l, pubsub.ChangeChannel("rpl_b"))
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"))
	if a.n.SendsLegacy() || b.n.SendsLegacy() {
		t.Fatal("with no old replica, a notifier sends on voucher_changes")
	}

	old := startOldReplica(t, s, "rpl_old")
	for _, r := range []*replica{a, b} {
		waitLegacy(t, r.n, true)
	}
	waitListening(t, a.l, pubsub.ChangeChannel("rpl_b"), legacyChannel)
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"), legacyChannel)

	// The old replica's change reaches both.
	vo := old.change(newVoucher(t, s, v0, "100001"))
	subA.wait(t, vo)
	subB.wait(t, vo)
	waitChanges(t, a.l, 1, 0)
	waitChanges(t, b.l, 1, 0)

	// A new replica's change, as the voucher service hands it over: to its
	// own hub in process and to its notifier.
	publish := func(r *replica, v *ent.Voucher) {
		r.hub.Publish(pubsub.ChangeOf(v).WithState(v))
		r.n.Publish(pubsub.ChangeOf(v).WithState(v))
	}
	va := commit(t, s.db, newVoucher(t, s, v0, "100002"))
	publish(a, va)
	subA.wait(t, va)
	subB.wait(t, va)
	old.waitHeard(va)
	// A heard its own change back on voucher_changes, B heard it there and
	// on A's channel.
	waitChanges(t, a.l, 2, 0)
	waitChanges(t, b.l, 3, 0)

	vb := commit(t, s.db, newVoucher(t, s, v0, "100003"))
	publish(b, vb)
	subA.wait(t, vb)
	subB.wait(t, vb)
	old.waitHeard(vb)
	waitChanges(t, a.l, 4, 0)
	waitChanges(t, b.l, 4, 0)

	// Heard twice or three times, each version was sent once.
	subA.quiet(t, 300*time.Millisecond)
	subB.quiet(t, 100*time.Millisecond)
	if a.l.Resyncs() != 0 || b.l.Resyncs() != 0 {
		t.Fatalf("resyncs: A %d, B %d; want none", a.l.Resyncs(), b.l.Resyncs())
	}

	old.goodbye()
	for _, r := range []*replica{a, b} {
		waitLegacy(t, r.n, false)
	}
	waitListening(t, a.l, pubsub.ChangeChannel("rpl_b"))
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"))
	before := old.heardSoFar()
	va = commit(t, s.db, va)
	publish(a, va)
	subA.wait(t, va)
	subB.wait(t, va)
	waitChanges(t, b.l, 5, 300*time.Millisecond)
	waitChanges(t, a.l, 4, 0)
	if got := old.heardSoFar(); got != before {
		t.Fatalf("after the old replica's goodbye, %d notifications were sent on voucher_changes", got-before)
	}
	subA.quiet(t, 100*time.Millisecond)
	subB.quiet(t, 100*time.Millisecond)
	if a.l.Resyncs() != 0 || b.l.Resyncs() != 0 {
		t.Fatalf("resyncs after a goodbye: A %d, B %d; want none", a.l.Resyncs(), b.l.Resyncs())
	}
}

// What an old replica sends on voucher_changes before a new replica's
// LISTEN there is in effect (held back here) is caught up on once it is;
// an old replica that falls silent is taken for gone: voucher_changes is
// no longer listened on or sent to, and what it may not have notified is
// resynced.
func TestLegacyListenCatchesUpAndEndsWithASilentPeer(t *testing.T) {
	s := newShared(t)
	v0 := seed(t, s.db)
	no := pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond}
	a := s.replica(t, "rpl_a", pubsub.ListenerOptions{}, no)
	b := s.hub(t)
	sub := newTally(t, b.hub, v0.SessionID)
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	hold := func(ctx context.Context, channel string) {
		if channel != legacyChannel {
			return
		}
		held <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	s.start(t, b, "rpl_b", pubsub.HoldPeerListens(pubsub.ListenerOptions{PeerTimeout: 500 * time.Millisecond}, hold), no)
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"))
	sub.wait(t, v0) // the catch-up on A's join sends the voucher seeded since

	old := startOldReplica(t, s, "rpl_old")
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("B never came to LISTEN on voucher_changes")
	}
	vo := old.change(newVoucher(t, s, v0, "100001"))
	sub.quiet(t, 300*time.Millisecond)
	close(release)
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"), legacyChannel)
	sub.wait(t, vo)
	if b.l.CatchUps() != 2 || b.l.Resyncs() != 0 || b.l.Changes() != 0 {
		t.Fatalf("B: %d catch-ups, %d resyncs, %d changes heard; want 2 (A's join, voucher_changes), 0, 0",
			b.l.CatchUps(), b.l.Resyncs(), b.l.Changes())
	}
	vo = old.change(vo)
	sub.wait(t, vo)
	waitChanges(t, b.l, 1, 0)

	// B's change goes on voucher_changes while the old replica is heard.
	vb := commit(t, s.db, newVoucher(t, s, v0, "100002"))
	b.n.Publish(pubsub.ChangeOf(vb).WithState(vb))
	old.waitHeard(vb)

	// Silent past PeerTimeout, the old replica is taken for gone.
	old.silence()
	waitListening(t, b.l, pubsub.ChangeChannel("rpl_a"))
	waitLegacy(t, b.n, false)
	if n := b.l.Resyncs(); n != 1 {
		t.Fatalf("%d resyncs after the old replica fell silent, want 1", n)
	}
	// B still sends its changes (A hears them), on its own channel only.
	before, heardByA := old.heardSoFar(), a.l.Changes()
	vb = commit(t, s.db, vb)
	b.n.Publish(pubsub.ChangeOf(vb).WithState(vb))
	waitChanges(t, a.l, heardByA+1, 300*time.Millisecond)
	if got := old.heardSoFar(); got != before {
		t.Fatalf("with the old replica gone, %d notifications were sent on voucher_changes", got-before)
	}
}
