package pubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/pubsub"
)

// waitChanges waits until l has taken in n change notifications, then
// checks that no more come (within d).
func waitChanges(t *testing.T, l *pubsub.Listener, n int64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Changes() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the listener took in %d change notifications, want %d", l.Changes(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(d)
	if got := l.Changes(); got != n {
		t.Fatalf("the listener took in %d change notifications, want %d", got, n)
	}
}

// waitVersion waits until s was sent version of voucher id.
func waitVersion(t *testing.T, s *pubsub.Subscription, id string, version int) *pubsub.Event {
	t.Helper()
	for {
		ev := waitEvent(t, s, 5*time.Second)
		if ev.Voucher.ID == id && ev.Voucher.Version == version {
			return ev
		}
	}
}

// Every replica's changes reach every other replica's subscribers on its
// own channel, and no listener takes in a single change of its own
// replica's: with two and three replicas, each listener hears exactly the
// changes the others published.
func TestChangesReachOnlyOtherReplicas(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			s := newShared(t)
			v0 := seed(t, s.db)
			names := make([]string, n)
			rs := make([]*replica, n)
			subs := make([]*pubsub.Subscription, n)
			for i := range rs {
				names[i] = fmt.Sprintf("rpl_%c", 'a'+i)
				rs[i] = s.hub(t)
				subs[i] = rs[i].hub.Subscribe(pubsub.BySession, v0.SessionID)
				t.Cleanup(subs[i].Close)
			}
			for i, r := range rs {
				s.start(t, r, names[i], pubsub.ListenerOptions{}, pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond})
			}
			for i, r := range rs {
				var others []string
				for j, name := range names {
					if j != i {
						others = append(others, name)
					}
				}
				waitPeerChannels(t, r.l, others...)
			}
			// Each replica changes a voucher of its own 5 times.
			const times = 5
			ctx := context.Background()
			vs := make([]*ent.Voucher, n)
			for i, r := range rs {
				v, err := s.db.Voucher.Create().SetCode(fmt.Sprintf("7%05d", i)).SetSessionID(v0.SessionID).
					SetPayerID(v0.PayerID).SetPayeeID(v0.PayeeID).SetExpiresAt(v0.ExpiresAt).Save(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for range times {
					v = commit(t, s.db, v)
					r.n.Publish(pubsub.ChangeOf(v).WithState(v))
				}
				vs[i] = v
			}
			for j, sub := range subs {
				want := map[string]int{}
				for i, v := range vs {
					if i != j {
						want[v.ID] = v.Version
					}
				}
				for len(want) > 0 {
					ev := waitEvent(t, sub, 5*time.Second)
					if ev.Voucher.Version == want[ev.Voucher.ID] {
						delete(want, ev.Voucher.ID)
					}
				}
			}
			for _, r := range rs {
				waitChanges(t, r.l, int64(times*(n-1)), 300*time.Millisecond)
				if k := r.l.Resyncs(); k != 0 {
					t.Fatalf("%d resyncs with every replica alive", k)
				}
			}
		})
	}
}

// A peer that sends changes before this replica's LISTEN on its channel is
// in effect (held back here) loses none of them: once the LISTEN is in
// effect, the listener catches up on what changed since it started, and
// later changes come by notification.
func TestPeerSendingBeforeTheListenLosesNothing(t *testing.T) {
	s := newShared(t)
	no := pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond}
	a := s.replica(t, "rpl_a", pubsub.ListenerOptions{}, no)
	v := seed(t, s.db)

	b := s.hub(t)
	sub := b.hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	release := make(chan struct{})
	var held atomic.Value
	hold := func(ctx context.Context, channel string) {
		held.Store(channel)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	s.start(t, b, "rpl_b", pubsub.HoldPeerListens(pubsub.ListenerOptions{}, hold), no)

	// A hears B (and so sends its changes); B heard A but holds its LISTEN.
	waitPeerChannels(t, a.l, "rpl_b")
	for deadline := time.Now().Add(10 * time.Second); held.Load() != pubsub.ChangeChannel("rpl_a"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never came to LISTEN on A's changes")
		}
	}
	// A's change goes out on its channel (a bare listener hears it) while
	// nothing of B listens there.
	bare := pq.NewListener(s.url, 10*time.Millisecond, time.Second, nil)
	defer bare.Close()
	if err := bare.Listen(pubsub.ChangeChannel("rpl_a")); err != nil {
		t.Fatal(err)
	}
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	select {
	case n := <-bare.Notify:
		c, err := pubsub.ParseNotification(n.Extra)
		if err != nil || c.ID != v.ID || c.Version != v.Version {
			t.Fatalf("A sent %q (%v)", n.Extra, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("A did not send its change")
	}
	quiet(t, sub, 300*time.Millisecond)
	if got := b.l.PeerChannels(); len(got) != 0 || b.l.Changes() != 0 {
		t.Fatalf("B listens on %v and took in %d changes before its LISTEN", got, b.l.Changes())
	}

	close(release)
	waitPeerChannels(t, b.l, "rpl_a")
	if ev := waitVersion(t, sub, v.ID, v.Version); ev.Resync {
		t.Fatal("the caught-up change is marked as a resync")
	}
	if b.l.CatchUps() != 1 || b.l.Resyncs() != 0 || b.l.Changes() != 0 {
		t.Fatalf("B: %d catch-ups, %d resyncs, %d changes heard; want 1, 0, 0", b.l.CatchUps(), b.l.Resyncs(), b.l.Changes())
	}
	v = commit(t, s.db, v)
	a.n.Publish(pubsub.ChangeOf(v).WithState(v))
	waitVersion(t, sub, v.ID, v.Version)
	waitChanges(t, b.l, 1, 100*time.Millisecond)
	quiet(t, sub, 300*time.Millisecond)
}

// A peer taken for gone by its silence is no longer listened to; heard
// again (it was only slow), it is listened to again and caught up on from
// when it was dropped, not from its start an hour ago; and a replica heard
// for the first time is caught up on from the listener's own start.
func TestSilentPeerIsUnlistenedAndCaughtUpOnReturn(t *testing.T) {
	s := newShared(t)
	begin := time.Now()
	b := s.hub(t)
	sub := b.hub.Subscribe(pubsub.BySession, "ses_followed") // else a catch-up asks nothing
	defer sub.Close()
	s.start(t, b, "rpl_b", pubsub.ListenerOptions{PeerTimeout: 500 * time.Millisecond}, pubsub.NotifierOptions{Heartbeat: 50 * time.Millisecond})
	started := time.Now().Add(-time.Hour)
	// beat has the peer say it is alive every 100 ms until the returned
	// function stops it, which returns when it last spoke.
	beat := func() func() time.Time {
		stop, done := make(chan struct{}), make(chan time.Time)
		go func() {
			var last time.Time
			defer func() { done <- last }()
			for {
				last = time.Now()
				if _, err := s.db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ReplicaChannel,
					`{"replica":"`+peer+`","state":"alive","channel":"`+pubsub.ChangeChannel(peer)+`","started":"`+started.UTC().Format(time.RFC3339Nano)+`"}`); err != nil {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		return func() time.Time { close(stop); return <-done }
	}
	quietNow := beat()
	waitPeerChannels(t, b.l, peer)
	catchUp := func(k int) time.Time {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if asked := b.loader.asked(); len(asked) >= k {
				return asked[k-1]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ChangedSince call #%d", k)
			}
		}
	}
	// The first join: from the listener's start (less the minute's
	// margin), not from the peer's start.
	first := catchUp(1)
	if first.Before(begin.Add(-time.Minute-time.Second)) || first.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("first catch-up from %v; the listener started at %v", first, begin)
	}
	notifyPeer := func() {
		t.Helper()
		b, _ := json.Marshal(pubsub.VoucherChange{ID: "vch_unfollowed", Version: 2, SessionID: "ses_x"})
		if _, err := s.db.SQL.Exec("SELECT pg_notify($1, $2)", pubsub.ChangeChannel(peer), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	notifyPeer()
	waitChanges(t, b.l, 1, 0)
	heardAt := quietNow() // the peer's last word, for now

	waitPeerChannels(t, b.l)
	if n := b.l.Resyncs(); n != 1 {
		t.Fatalf("%d resyncs after the peer fell silent, want 1", n)
	}
	catchUp(2)   // the silence's resync asked before the peer returns
	notifyPeer() // sent, but nobody here listens
	waitChanges(t, b.l, 1, 300*time.Millisecond)

	quietNow = beat() // the same peer, back
	defer quietNow()
	waitPeerChannels(t, b.l, peer)
	// Asked so far: the first catch-up, the silence's resync, this one,
	// from when the peer was dropped (at least PeerTimeout after it was
	// last heard) less the margin.
	again := catchUp(3)
	if again.Before(heardAt.Add(500*time.Millisecond-time.Minute)) || again.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("catch-up on the returning peer from %v; it was last heard after %v", again, heardAt)
	}
	notifyPeer()
	waitChanges(t, b.l, 2, 0)
	if n := b.l.CatchUps(); n != 2 {
		t.Fatalf("%d catch-ups, want 2", n)
	}
}
