package pubsub

import (
	"net/url"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
)

// A full queue drops its oldest notifications and remembers the oldest
// dropped change, from which the other replicas will be told to resync;
// a batch that failed goes back in front, within the same bound.
func TestNotifierQueueOverflowBecomesAGap(t *testing.T) {
	n := &Notifier{opts: NotifierOptions{MaxQueue: 2, MaxBatch: 512}, signals: map[string]bool{}, wake: make(chan struct{}, 1), peers: true}
	n.active.Store(true)
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	change := func(i int) VoucherChange {
		v := &ent.Voucher{ID: "vch_" + string(rune('a'+i)), Version: 1, UpdatedAt: t0.Add(time.Duration(i) * time.Second)}
		return ChangeOf(v).WithState(v)
	}
	for i := range 4 {
		n.Publish(change(i))
	}
	got, _, gap, _ := n.take()
	if len(got) != 2 || got[0].id != "vch_c" || got[1].id != "vch_d" {
		t.Fatalf("kept %+v, want the newest two", got)
	}
	if !gap.Equal(t0) {
		t.Fatalf("gap since %v, want the oldest dropped change's time %v", gap, t0)
	}
	if _, _, again, _ := n.take(); !again.IsZero() {
		t.Fatal("the gap is reported once")
	}

	n.Publish(change(5))
	n.putBack(got, []string{"wake"}, time.Time{}) // c, d back in front of f: one too many
	rest, signals, gap, _ := n.take()
	if len(rest) != 2 || rest[0].id != "vch_d" || rest[1].id != "vch_f" || len(signals) != 1 {
		t.Fatalf("after put-back: %+v %v", rest, signals)
	}
	if !gap.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("put-back overflow gap %v", gap)
	}
}

// The notifier's session commits without waiting for a WAL flush, and
// shows itself in pg_stat_activity (storage.AsyncCommitURL, tested there
// against a server, sets both).
func TestNotifierSession(t *testing.T) {
	dsn, err := notifierURL("postgres://u@127.0.0.1:5432/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if q.Get("synchronous_commit") != "off" || q.Get("application_name") != NotifierApplicationName || q.Get("sslmode") != "disable" {
		t.Fatalf("notifier session URL %s", dsn)
	}
}

// A lone notifier sends nothing and remembers its first unsent change;
// the first peer to join gets a gap from the later of that change and the
// peer's start (what a newcomer's subscribers can have missed; all of it
// for a peer that was wrongly taken for gone), and later peers none.
func TestPeerJoinedGap(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) VoucherChange {
		v := &ent.Voucher{ID: "vch_x", Version: 2, UpdatedAt: t0.Add(d)}
		return ChangeOf(v).WithState(v)
	}
	for _, tc := range []struct {
		name    string
		skipped bool
		started time.Time
		want    time.Time
	}{
		{"newcomer started after the first unsent change", true, t0.Add(time.Hour), t0.Add(time.Hour)},
		{"peer up all along (wrongly taken for gone)", true, t0.Add(-time.Hour), t0},
		{"nothing unsent", false, t0.Add(time.Hour), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Notifier{opts: NotifierOptions{MaxQueue: 8, MaxBatch: 8}, signals: map[string]bool{}, wake: make(chan struct{}, 1)}
			if tc.skipped {
				n.Publish(at(0))
				n.Publish(at(time.Minute))
			}
			n.Signal("wake")
			if got, signals, gap, _ := n.take(); len(got) != 0 || len(signals) != 0 || !gap.IsZero() {
				t.Fatalf("alone: queued %d changes, %d signals, gap %v", len(got), len(signals), gap)
			}
			n.PeerJoined(tc.started)
			n.PeerJoined(tc.started.Add(time.Hour)) // a second peer changes nothing
			n.Publish(at(2 * time.Minute))
			got, _, gap, _ := n.take()
			if !gap.Equal(tc.want) || len(got) != 1 {
				t.Fatalf("gap %v (want %v), %d changes queued", gap, tc.want, len(got))
			}
			n.PeersGone()
			n.Publish(at(3 * time.Minute))
			if got, _, _, _ := n.take(); len(got) != 0 {
				t.Fatal("queued a change with no peer left")
			}
		})
	}
}

// A legacy peer makes the notifier send its changes on Channel too, until
// none is left; if changes went out on its own channel alone after that
// peer started (a minute of margin for clocks), the replicas are told to
// resync from the later of the peer's start and the notifier's.
func TestLegacyJoinedGap(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) VoucherChange {
		v := &ent.Voucher{ID: "vch_x", Version: 2, UpdatedAt: t0.Add(d)}
		return ChangeOf(v).WithState(v)
	}
	for _, tc := range []struct {
		name     string
		sentOwn  bool // a change went out before the legacy peer was heard
		started  time.Time
		want     time.Time
		notifier time.Time
	}{
		{"old replica up before the notifier", true, t0.Add(-time.Hour), t0, t0},
		{"old replica started after the notifier", true, t0.Add(30 * time.Second), t0.Add(30 * time.Second), t0},
		{"own changes well before the old replica started", true, t0.Add(time.Hour), time.Time{}, t0},
		{"nothing sent", false, t0.Add(-time.Hour), time.Time{}, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Notifier{opts: NotifierOptions{MaxQueue: 8, MaxBatch: 8}, signals: map[string]bool{}, wake: make(chan struct{}, 1), started: tc.notifier}
			n.PeerJoined(tc.notifier) // a new replica
			if tc.sentOwn {
				n.Publish(at(time.Minute))
				if got, _, _, legacy := n.take(); len(got) != 1 || legacy {
					t.Fatalf("%d changes, legacy %v; want 1 on its own channel alone", len(got), legacy)
				}
			}
			n.LegacyJoined(tc.started)
			n.PeerJoined(tc.started)
			n.Publish(at(2 * time.Minute))
			got, _, gap, legacy := n.take()
			if len(got) != 1 || !legacy {
				t.Fatalf("%d changes, legacy %v; want 1 on Channel too", len(got), legacy)
			}
			if !gap.Equal(tc.want) {
				t.Fatalf("gap %v, want %v", gap, tc.want)
			}
			n.LegacyJoined(tc.started) // another old replica: nothing new went out alone
			if _, _, gap, _ := n.take(); !gap.IsZero() {
				t.Fatalf("a second old replica made a gap %v", gap)
			}
			// One that started earlier missed what went out alone since
			// its start (when that is after the notifier's).
			n.LegacyJoined(tc.started.Add(-10 * time.Second))
			if _, _, gap, _ := n.take(); tc.want.After(tc.notifier) != !gap.IsZero() ||
				(!gap.IsZero() && !gap.Equal(tc.want.Add(-10*time.Second))) {
				t.Fatalf("an earlier old replica made a gap %v", gap)
			}
			n.LegacyGone()
			n.Publish(at(3 * time.Minute))
			if got, _, _, legacy := n.take(); len(got) != 1 || legacy {
				t.Fatalf("after LegacyGone: %d changes, legacy %v", len(got), legacy)
			}
		})
	}
}
