package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/bench/stats"
)

// c2cSide is one side of the commit→subscriber phase: a committing server
// (the service, or the floor with the HTTP hop), optionally an other
// replica, one subscriber per voucher (odd vouchers on the other replica),
// and the load generator's negotiations, sent slice by slice. The service
// and the HTTP floor are measured by this same code: the same load
// generator, the same lean readers, the same matching of updates to
// transitions by version.
type c2cSide struct {
	ids    []string
	paths  []string // each voucher's negotiate path, built once
	token  string
	remote bool // odd vouchers' subscribers are on the other replica
	subs   *subSet

	writers *leanPool

	mu         sync.Mutex
	initialVer []int
	recvs      []map[int]time.Time
	sends      [][]c2cSent
	// frame is the first message a subscriber read (a voucher's current
	// state, as the server wrote it), with its voucher and version.
	frame    []byte
	frameID  string
	frameVer int
	bad      atomic.Int64
	badMsg   atomic.Value
	initial  atomic.Int64
	neg      *stats.Recorder
	n        int
	errs     *stats.Recorder
	lagP99   time.Duration
	elapsed  time.Duration
	// partners are the sides whose negotiations were interleaved with
	// this one's (interleave) in the measured turns: the phase's rate is
	// theirs and its own together.
	partners []*c2cSide
}

// c2cSent is one negotiation: t0 request sent, t1 answer read, tc the
// server's commit (its Server-Timing stamp, same machine clock; zero if it
// sent none); warm ones are not measured.
type c2cSent struct {
	t0, t1, tc time.Time
	warm       bool
}

// openC2CSide subscribes to every voucher (odd ones on other when it is
// set) and waits until each subscriber has the voucher's current state.
func openC2CSide(ctx context.Context, commitAddr, otherAddr, token string, ids []string) (*c2cSide, error) {
	k := len(ids)
	s := &c2cSide{ids: ids, paths: make([]string, k), token: token, remote: otherAddr != "",
		initialVer: make([]int, k), recvs: make([]map[int]time.Time, k), sends: make([][]c2cSent, k),
		writers: newLeanPool(commitAddr), neg: stats.NewRecorder(0), errs: stats.NewRecorder(0)}
	for i, id := range ids {
		s.paths[i] = "/api/v1/vouchers/" + id + "/negotiate-voucher"
		s.sends[i] = make([]c2cSent, 0, 16)
	}
	url := func(i int) string {
		if s.isRemote(i) {
			return "ws://" + otherAddr + "/graphql"
		}
		return "ws://" + commitAddr + "/graphql"
	}
	subs, err := openSubs(ctx, url, &s.token, k, 32,
		func(i int) []op {
			return []op{{id: "1", query: `subscription($id: ID!) { voucherUpdated(id: $id) ` + voucherSelection + ` }`, vars: map[string]any{"id": ids[i]}}}
		},
		s.read)
	if err != nil {
		s.writers.Close()
		return nil, err
	}
	s.subs = subs
	if !waitFor(ctx, 30*time.Second, func() bool { return s.initial.Load() >= int64(k) }) {
		s.close()
		return nil, fmt.Errorf("only %d of %d subscriptions sent the voucher's current state (bad messages: %d %v)", s.initial.Load(), k, s.bad.Load(), s.badMsg.Load())
	}
	return s, nil
}

func (s *c2cSide) isRemote(i int) bool { return s.remote && i%2 == 1 }

// read is every subscriber's handler: each voucher's first message is its
// current state, then one update per negotiation, matched to it by
// version (a repeated or coalesced message cannot pair with the wrong
// one). It allocates nothing per update but the map's growth.
func (s *c2cSide) read(i int, frame []byte, at time.Time) {
	id, ver, ok := voucherUpdate(frame)
	if !ok || string(id) != s.ids[i] {
		_, err := parseUpdate(frame)
		s.bad.Add(1)
		s.badMsg.CompareAndSwap(nil, fmt.Sprintf("%v (want %s) %.200s", err, s.ids[i], frame))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recvs[i] == nil {
		s.recvs[i] = make(map[int]time.Time, 16)
		s.initialVer[i] = ver
		if s.frame == nil {
			s.frame, s.frameID, s.frameVer = append([]byte(nil), frame...), s.ids[i], ver
		}
		s.initial.Add(1)
		return
	}
	if _, seen := s.recvs[i][ver]; !seen {
		s.recvs[i][ver] = at
	}
}

// send is one negotiation of voucher v, recorded with its timings; a warm
// one is not measured.
func (s *c2cSide) send(ctx context.Context, v int, warm bool) error {
	t0 := time.Now()
	_, tc, err := s.writers.okCommitted(ctx, http.MethodPost, s.paths[v], s.token, negotiateBody)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if !warm {
		s.neg.Add(t1.Sub(t0))
	}
	s.mu.Lock()
	s.sends[v] = append(s.sends[v], c2cSent{t0, t1, tc, warm})
	s.mu.Unlock()
	return nil
}

// slice sends negotiations at rate for d (cursor: the next voucher); a
// warm slice's are not measured.
func (s *c2cSide) slice(ctx context.Context, rate float64, d time.Duration, warm bool) {
	interleave(ctx, rate, d, warm, s)
}

// interleave sends negotiations at rate for d, dealt to sides in turn
// (the i-th to sides[i mod len(sides)], each side's to its next voucher),
// on one open-loop schedule: every side sends rate/len(sides) a second,
// and whatever the machine does meanwhile (a stalled disk flush and the
// burst of commits it releases, a busy second) falls on every side
// alike. A side's elapsed time is the slice's; its errors are its own.
func interleave(ctx context.Context, rate float64, d time.Duration, warm bool, sides ...*c2cSide) {
	m := len(sides)
	bases := make([]int, m)
	errs := make([]*stats.Recorder, m)
	for j, s := range sides {
		bases[j] = s.n
		errs[j] = stats.NewRecorder(0)
	}
	sn, _, slag, sel := OpenLoop(ctx, rate, d, 512, func(ctx context.Context, i int) error {
		j := i % m
		s := sides[j]
		if err := s.send(ctx, (bases[j]+i/m)%len(s.ids), warm); err != nil {
			errs[j].Error(err)
		}
		return nil
	})
	for j, s := range sides {
		s.n += (sn - j + m - 1) / m
		if warm {
			continue
		}
		s.errs.Merge(errs[j])
		s.elapsed += sel
		s.lagP99 = max(s.lagP99, slag.P99)
	}
}

// allRead says whether every answered negotiation's update was read.
func (s *c2cSide) allRead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v := range s.sends {
		if len(s.recvs[v]) < len(s.sends[v]) {
			return false
		}
	}
	return true
}

// c2cSpans is what a side measured, per path (0: same replica, 1: other).
type c2cSpans struct {
	c2c, a2c, w2c [2][]time.Duration
	missing       [2]int64
	unstamped     [2]int64
}

// spans pairs each measured negotiation with its update: commit→subscriber
// (from the server's stamp; from the answer when it sent none),
// answer→subscriber and write→subscriber.
func (s *c2cSide) spans() c2cSpans {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out c2cSpans
	for v := range s.sends {
		side := 0
		if s.isRemote(v) {
			side = 1
		}
		for j, snd := range s.sends[v] {
			at, ok := s.recvs[v][s.initialVer[v]+j+1]
			if snd.warm {
				continue
			}
			if !ok {
				out.missing[side]++
				continue
			}
			from := snd.tc
			if from.IsZero() {
				from = snd.t1
				out.unstamped[side]++
			}
			out.c2c[side] = append(out.c2c[side], max(at.Sub(from), 0))
			out.a2c[side] = append(out.a2c[side], max(at.Sub(snd.t1), 0))
			out.w2c[side] = append(out.w2c[side], at.Sub(snd.t0))
		}
	}
	return out
}

func (s *c2cSide) close() {
	if s.subs != nil {
		s.subs.close()
	}
	s.writers.Close()
}

// c2cHTTPFloor is the commit→subscriber floor with the HTTP hop
// (floor.C2C): two `voucherbench floor` processes on the run's database,
// the committing replica and the listening one, with their subscribers.
type c2cHTTPFloor struct {
	commit, other *Process
	side          *c2cSide
	payloadSent   bool
}

// startC2CHTTPFloor starts the floor's two replicas, the committing one
// running update (the service's negotiate statement) on ids (its own
// vouchers in the service's table) and both writing the service's frame
// (captured by the service's side), and opens their subscribers. The
// changes go between them by NOTIFY, or over NATS at natsURL when it is
// set.
func (h *Harness) startC2CHTTPFloor(ctx context.Context, token string, ids []string, update floor.ReadQuery, frame []byte, frameID string, frameVer int, natsURL string) (_ *c2cHTTPFloor, err error) {
	f := &c2cHTTPFloor{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	start := func(name string, listen bool) (*Process, error) {
		addr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		cfg := floor.Config{Addr: addr, DSN: h.dsn, MaxConns: 32, C2C: &floor.C2C{Channel: c2cHTTPFloorChannel, Table: "vouchers", Column: "version",
			Update: update, Listen: listen, NATS: natsURL, Frame: string(frame), FrameID: frameID, FrameVersion: int64(frameVer)}}
		path := filepath.Join(h.cfg.OutDir, name+".json")
		if err := os.WriteFile(path, mustJSON(cfg), 0o600); err != nil {
			return nil, err
		}
		return StartProcess(name, h.cfg.Self, []string{"floor", "-config", path}, nil, addr, "/count")
	}
	if f.commit, err = start("floor-c2c-commit", false); err != nil {
		return nil, err
	}
	if f.other, err = start("floor-c2c-other", true); err != nil {
		return nil, err
	}
	if f.side, err = openC2CSide(ctx, f.commit.Addr, f.other.Addr, token, ids); err != nil {
		return nil, fmt.Errorf("c2c HTTP floor subscribers: %w", err)
	}
	return f, nil
}

// c2cHTTPFloorChannel is the HTTP floor's NOTIFY channel.
const c2cHTTPFloorChannel = "voucherbench_c2c_http"

// setPayload gives the committing replica the service's notification
// payload (what it NOTIFYs with every transition), once.
func (f *c2cHTTPFloor) setPayload(ctx context.Context, payload string) error {
	if f.payloadSent {
		return nil
	}
	api := NewAPI(f.commit.URL, 1)
	defer api.CloseIdle()
	if _, err := api.Raw(ctx, http.MethodPost, "/c2c/payload", "", []byte(payload)); err != nil {
		return err
	}
	f.payloadSent = true
	return nil
}

func (f *c2cHTTPFloor) close() {
	if f.side != nil {
		f.side.close()
	}
	for _, p := range []*Process{f.commit, f.other} {
		if p != nil {
			p.Stop()
		}
	}
}
