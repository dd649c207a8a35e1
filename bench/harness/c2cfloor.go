package harness

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go"

	"github.com/voucherd/voucherd/bench/stats"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/pubsub/natsbus"
)

// c2cFloor is the commit→subscriber floor on PostgreSQL: the least a
// database-carried change can cost on this machine and database. A bare
// client commits transactions that write a row and NOTIFY the service's own
// notification payload (a real voucherUpdated change, captured from the
// service's notifier in the same phase) in the committing transaction, and
// another connection LISTENs; latency is from the commit's return to the
// listener reading the notification, as the service's is from the
// response (sent after commit) to the subscriber reading the update. It
// takes turns with the service (and the HTTP floor, interleaved) in the commit→subscriber phase, at the same
// rate.
type c2cFloor struct {
	db      *sql.DB
	l       *pq.Listener
	payload string

	mu   sync.Mutex
	done map[int64]time.Time // sequence → commit returned
	sent map[int64]time.Time // sequence → COMMIT sent
	recv map[int64]time.Time // sequence → notification read
	stop chan struct{}
	wg   sync.WaitGroup

	// Capturing: each replica notifies its changes on a channel of its own
	// (pubsub.ChangeChannel of its name), named in its heartbeats on
	// pubsub.ReplicaChannel. The reader hands new names to listenLoop
	// (lib/pq's Listen must not be called from the goroutine draining
	// Notify), which LISTENs on their change channels until a payload is
	// captured; then captured() UNLISTENs them all and ReplicaChannel.
	names chan string
	heard map[string]bool // names handed over (reader only)
	// lmu orders listenLoop's LISTENs before captured()'s UNLISTENs.
	lmu        sync.Mutex
	listened   []string // the replicas' change channels listened on
	unlistened bool     // nothing of the service is listened to any more
}

const (
	// c2cFloorID is the floor's result; c2cSlice how long each side runs
	// in its turn (the service and the HTTP floor, interleaved, share
	// turns of twice that). Turns are short so that whatever the machine
	// does for longer than a turn (a disk flush stalling for 50-600 ms,
	// another tenant's burst) falls on every side rather than on one: in
	// 2-s turns (6 a side) the same binary's same-replica ratio ranged
	// 1.86 to 4.59 over three runs, in 250-ms turns (48 a side) 1.61 to
	// 2.02 (docs/performance.md, "Issue 25, sixth pass"). A turn ends
	// when its last answer is read, though, so a stall still falls on the
	// side whose turn it is: the service and the HTTP floor now interleave
	// ("Issue 25, eighth pass").
	c2cFloorID      = "ref-c2c-floor"
	c2cSlice        = 250 * time.Millisecond
	c2cFloorChannel = "voucherbench_c2c_floor"
)

// newC2CFloor connects the floor's committing pool (as many connections as
// the service's pool) and its listener, and creates its one-row-per-slot
// table.
func newC2CFloor(ctx context.Context, dsn string) (*c2cFloor, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS voucherbench_c2c_floor (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
		INSERT INTO voucherbench_c2c_floor (id) SELECT g FROM generate_series(0, 1023) g ON CONFLICT DO NOTHING`); err != nil {
		db.Close()
		return nil, fmt.Errorf("c2c floor table: %w", err)
	}
	f := &c2cFloor{db: db, done: map[int64]time.Time{}, sent: map[int64]time.Time{}, recv: map[int64]time.Time{}, stop: make(chan struct{}),
		names: make(chan string, 64), heard: map[string]bool{}}
	f.l = pq.NewListener(dsn, 100*time.Millisecond, time.Second, nil)
	f.wg.Add(2)
	go f.read()
	go f.listenLoop()
	for _, ch := range []string{c2cFloorChannel, pubsub.ReplicaChannel} {
		if err := f.l.Listen(ch); err != nil {
			f.close()
			return nil, fmt.Errorf("c2c floor LISTEN: %w", err)
		}
	}
	return f, nil
}

// listenLoop LISTENs on the change channel of every replica the reader
// heard, until a payload is captured.
func (f *c2cFloor) listenLoop() {
	defer f.wg.Done()
	for {
		select {
		case <-f.stop:
			return
		case name := <-f.names:
			f.lmu.Lock()
			if !f.unlistened {
				ch := pubsub.ChangeChannel(name)
				if err := f.l.Listen(ch); err == nil {
					f.listened = append(f.listened, ch)
				}
			}
			f.lmu.Unlock()
		}
	}
}

func (f *c2cFloor) read() {
	defer f.wg.Done()
	for {
		select {
		case <-f.stop:
			return
		case n, ok := <-f.l.Notify:
			if !ok {
				return
			}
			at := time.Now()
			if n == nil {
				continue
			}
			if n.Channel == pubsub.ReplicaChannel {
				var m struct{ Replica string }
				if json.Unmarshal([]byte(n.Extra), &m) == nil && m.Replica != "" && !f.heard[m.Replica] {
					f.heard[m.Replica] = true
					select {
					case f.names <- m.Replica:
					default: // more replicas than the bench starts
					}
				}
				continue
			}
			f.mu.Lock()
			if n.Channel != c2cFloorChannel {
				if f.payload == "" && strings.Contains(n.Extra, "\n") { // keys, then the row
					f.payload = n.Extra
				}
				f.mu.Unlock()
				continue
			}
			seq, _, _ := strings.Cut(n.Extra, " ")
			if i, err := strconv.ParseInt(seq, 10, 64); err == nil {
				if _, seen := f.recv[i]; !seen {
					f.recv[i] = at
				}
			}
			f.mu.Unlock()
		}
	}
}

// captured says whether a service notification carrying a row was seen
// (the floor sends that payload; until then the floor cannot run). Once
// one was, the floor stops listening to the replicas' channels, so
// PostgreSQL delivers the service's changes and heartbeats to no more
// backends than without the floor.
func (f *c2cFloor) captured() bool {
	f.mu.Lock()
	ok := f.payload != ""
	f.mu.Unlock()
	if ok {
		f.lmu.Lock()
		if !f.unlistened {
			ok := true
			for _, ch := range append(f.listened, pubsub.ReplicaChannel) {
				if err := f.l.Unlisten(ch); err != nil && !errors.Is(err, pq.ErrChannelNotOpen) {
					ok = false
				}
			}
			f.listened = nil
			f.unlistened = ok
		}
		f.lmu.Unlock()
	}
	return ok
}

// capturedPayload is the service's notification payload the floor copied
// (empty until captured).
func (f *c2cFloor) capturedPayload() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payload
}

// run commits at rate for d, sequence numbers from base; it returns how
// many it sent and the failures.
func (f *c2cFloor) run(ctx context.Context, rate float64, d time.Duration, base int64) (int, *stats.Recorder) {
	f.mu.Lock()
	payload := f.payload
	f.mu.Unlock()
	n, errs, _, _ := OpenLoop(ctx, rate, d, 512, func(ctx context.Context, i int) error {
		seq := base + int64(i)
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `UPDATE voucherbench_c2c_floor SET n = n + 1 WHERE id = $1`, seq%1024); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, c2cFloorChannel, strconv.FormatInt(seq, 10)+" "+payload); err != nil {
			return err
		}
		t0 := time.Now()
		if err := tx.Commit(); err != nil {
			return err
		}
		at := time.Now()
		f.mu.Lock()
		f.sent[seq] = t0
		f.done[seq] = at
		f.mu.Unlock()
		return nil
	})
	return n, errs
}

// allRead says whether every committed notification was read.
func (f *c2cFloor) allRead() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq := range f.done {
		if _, ok := f.recv[seq]; !ok {
			return false
		}
	}
	return true
}

// latencies pairs each commit with its notification: commit→listener
// times (never below zero: PostgreSQL signals the listening backend as it
// answers the COMMIT, so the notification is often read before the
// committer hears its commit returned, which is why the floor's median is
// 0), the COMMIT-sent→listener times beside them (which include the
// commit's WAL flush), and how many never arrived.
func (f *c2cFloor) latencies() (fromCommit, fromSent []time.Duration, missing int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq, t1 := range f.done {
		at, ok := f.recv[seq]
		if !ok {
			missing++
			continue
		}
		fromCommit = append(fromCommit, max(at.Sub(t1), 0))
		fromSent = append(fromSent, max(at.Sub(f.sent[seq]), 0))
	}
	return fromCommit, fromSent, missing
}

func (f *c2cFloor) close() {
	close(f.stop)
	_ = f.l.Close()
	f.wg.Wait()
	_, _ = f.db.Exec(`DROP TABLE IF EXISTS voucherbench_c2c_floor`)
	_ = f.db.Close()
}

// payloadSource is where the HTTP floor's notification payload comes
// from: a service change carrying its row, copied as the service sent it
// (the NOTIFY floor's listener on PostgreSQL, natsCapture on NATS).
type payloadSource interface {
	captured() bool
	capturedPayload() string
}

// natsCapture copies the first voucher change carrying its row that a
// replica publishes on NATS (natsbus's subjects, default prefix), for the
// HTTP floor over NATS to send with every change, as the service does.
type natsCapture struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	mu      sync.Mutex
	payload string
}

func newNATSCapture(url string) (*natsCapture, error) {
	nc, err := nats.Connect(url, nats.Name("voucherbench capture"))
	if err != nil {
		return nil, fmt.Errorf("nats capture: %w", err)
	}
	c := &natsCapture{nc: nc}
	c.sub, err = nc.Subscribe(natsbus.DefaultPrefix+"."+pubsub.Channel+".*", func(m *nats.Msg) {
		if !bytes.Contains(m.Data, []byte("\n")) { // keys only, no row
			return
		}
		c.mu.Lock()
		if c.payload == "" {
			c.payload = string(m.Data)
		}
		c.mu.Unlock()
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats capture: %w", err)
	}
	return c, nil
}

// captured says whether a change carrying its row was copied; once it is,
// the capture stops listening.
func (c *natsCapture) captured() bool {
	c.mu.Lock()
	ok := c.payload != ""
	c.mu.Unlock()
	if ok && c.sub.IsValid() {
		_ = c.sub.Unsubscribe()
	}
	return ok
}

func (c *natsCapture) capturedPayload() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.payload
}

func (c *natsCapture) close() { c.nc.Close() }
