package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/bench/pgref"
	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
	"github.com/voucherd/voucherd/bench/wsclient"
)

// loopbackSources spreads client connections over several source addresses
// so twenty thousand of them never run out of ephemeral ports.
var loopbackSources = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}

// subSet is a set of client connections.
type subSet struct {
	conns   []*wsclient.Conn
	ended   atomic.Int64 // Run returned
	broken  atomic.Int64 // Run returned an error (not our Close)
	wg      sync.WaitGroup
	connect *stats.Recorder
}

// openSubs opens n connections, connection i to url(i), with parallel dialers. For GraphQL
// (token != nil) each sends connection_init and the subscriptions ops(i)
// returns; for the bare floor (token == nil) it only connects. h receives
// every data message (the frame as read, valid during the call only: each
// connection reads into one buffer it reuses, wsclient.RunFrames) with the
// connection's index and the time it was read.
func openSubs(ctx context.Context, url func(i int) string, token *string, n, parallel int, ops func(i int) []op, h func(i int, frame []byte, at time.Time)) (*subSet, error) {
	s := &subSet{conns: make([]*wsclient.Conn, n), connect: stats.NewRecorder(n)}
	var next atomic.Int64
	var firstErr error
	var emu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t := time.Now()
				c, err := s.dial(ctx, url(i), token, i, ops)
				if err != nil {
					emu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
					}
					emu.Unlock()
					next.Store(int64(n)) // stop the other dialers
					return
				}
				s.connect.Add(time.Since(t))
				s.conns[i] = c
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					var err error
					if token != nil {
						err = c.RunFrames(func(frame []byte, at time.Time) { h(i, frame, at) })
					} else {
						err = c.RunRaw(func(frame []byte, at time.Time) { h(i, frame, at) })
					}
					if err != nil {
						s.broken.Add(1)
					}
					s.ended.Add(1)
				}()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		s.close()
		return nil, firstErr
	}
	return s, nil
}

type op struct {
	id, query string
	vars      map[string]any
}

func (s *subSet) dial(ctx context.Context, url string, token *string, i int, ops func(i int) []op) (*wsclient.Conn, error) {
	sub := ""
	if token != nil {
		sub = wsclient.Subprotocol
	}
	c, err := wsclient.Dial(ctx, url, sub, loopbackSources[i%len(loopbackSources)])
	if err != nil {
		return nil, err
	}
	if token == nil {
		return c, nil
	}
	if err := c.Init(*token, 30*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	for _, o := range ops(i) {
		if err := c.Subscribe(o.id, o.query, o.vars); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// close drops every connection and waits for the readers to end.
func (s *subSet) close() {
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
	s.wg.Wait()
}

const voucherSelection = `{ id version status updatedAt }`

// update is the part of a voucherUpdated message the bench reads.
type update struct {
	Data struct {
		VoucherUpdated struct {
			ID      string `json:"id"`
			Version int    `json:"version"`
		} `json:"voucherUpdated"`
	} `json:"data"`
	Errors []json.RawMessage `json:"errors"`
}

// parseUpdate decodes a data message; the readers use voucherUpdate, and
// this for what it does not read (an error, a message of another type).
func parseUpdate(frame []byte) (update, error) {
	var u update
	var m wsclient.Message
	if err := json.Unmarshal(frame, &m); err != nil {
		return u, err
	}
	if m.Type != "next" {
		return u, fmt.Errorf("%s: %s", m.Type, m.Payload)
	}
	if err := json.Unmarshal(m.Payload, &u); err != nil {
		return u, err
	}
	if len(u.Errors) > 0 {
		return u, fmt.Errorf("subscription error: %s", u.Errors[0])
	}
	return u, nil
}

// voucherUpdate reads a voucherUpdated "next" message's voucher id (a
// slice of frame) and version without decoding it or allocating (the
// subscribers read a thousand a second beside the service: their garbage
// must not be part of its tail). ok is false for anything else, an error
// included; the caller then decodes it with parseUpdate to say what it was.
func voucherUpdate(frame []byte) (id []byte, version int, ok bool) {
	if string(wsclient.MessageType(frame)) != "next" || bytes.Contains(frame, []byte(`"errors"`)) {
		return nil, 0, false
	}
	const key = `"voucherUpdated"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return nil, 0, false
	}
	obj := frame[i+len(key):]
	end := bytes.IndexByte(obj, '}') // the selection has no nested object
	if end < 0 {
		return nil, 0, false
	}
	obj = obj[:end]
	id = wsclient.StringField(obj, "id")
	version, ok = wsclient.IntField(obj, "version")
	return id, version, ok && id != nil
}

func (s *pgScenarios) wsURL() string { return "ws://" + s.svc.Addr + "/graphql" }

// wsURLs puts every connection on the service (see openSubs).
func (s *pgScenarios) wsURLs(int) string { return s.wsURL() }

// redeemAll redeems ids as the payee with 16 clients (setup, not measured).
func (s *pgScenarios) redeemAll(ctx context.Context, token string, ids []string) error {
	var firstErr atomic.Value
	parallel(ctx, 16, len(ids), func(ctx context.Context, i int) error {
		_, err := s.api.Redeem(ctx, token, ids[i])
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
		return err
	})
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	return nil
}

// c2cTarget is where the commit-to-subscriber phase runs: a service, the
// payer whose REDEEMED vouchers it negotiates, and optionally a second
// replica on the same database that gets half the subscribers.
type c2cTarget struct {
	id, name string
	svc      *Process
	api      *API
	pprof    string
	payer    string
	ids      []string
	// replica, when set, carries the subscribers of odd vouchers, reported
	// as rid.
	replica    *Process
	rid, rname string
	// flushDir, when set, is the database's filesystem: the disk is
	// sampled during the phase (flushWatch) and reported beside it.
	flushDir string
	// noFloor leaves out the NOTIFY floor (c2cFloor) on two replicas: the
	// scaling group's pairs, whose floor the subscriptions group measures.
	noFloor bool
	// floorIDs are the HTTP floor's own vouchers (REDEEMED, the service's
	// payer, on the same table) and floorUpdate the service's negotiate
	// statement it runs on them (captureNegotiate); without them the HTTP
	// floor does not run.
	floorIDs    []string
	floorUpdate *floor.ReadQuery
	floorWhy    string // why there is no floorUpdate
	// floorNATS, when set (the NATS server's URL), runs the HTTP floor
	// over NATS, the service's messages copied from NATS for its payload
	// (natsCapture); floorVia names its transport in its results' names,
	// floorID and floorRID are their ids (default: the PostgreSQL floor's).
	floorNATS         string
	floorVia          string
	floorID, floorRID string
	// duration, when set, is how long each side runs at the full rate
	// (C2CDuration otherwise, when a floor runs).
	duration time.Duration
}

// captureNegotiate negotiates voucher id (REDEEMED) through the service
// with statement logging on and returns the statement the service ran: one
// conditional UPDATE … RETURNING the row, the voucher's id one of its
// parameters. The HTTP floor of the commit→subscriber phase runs it on its
// own vouchers, as the redeem floor runs the captured redeem.
func (s *pgScenarios) captureNegotiate(ctx context.Context, id string) (*floor.ReadQuery, error) {
	conn, err := s.h.adm.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stmts, err := pgref.Capture(ctx, conn, func() error {
		return s.api.Negotiate(ctx, s.payer.Token, id)
	})
	if err != nil {
		return nil, fmt.Errorf("capture negotiate: %w", err)
	}
	tx, err := pgref.Transition(stmts, id)
	if err != nil {
		return nil, fmt.Errorf("capture negotiate: %w", err)
	}
	if len(tx) != 1 || !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(tx[0].SQL)), "UPDATE") {
		return nil, fmt.Errorf("capture negotiate: the service ran %d statements, not one UPDATE", len(tx))
	}
	q := &floor.ReadQuery{SQL: tx[0].SQL, Params: tx[0].Params, Prepared: tx[0].Prepared, IDParam: -1}
	for i, p := range q.Params {
		if p != nil && *p == id {
			q.IDParam = i
		}
	}
	if q.IDParam < 0 {
		return nil, fmt.Errorf("capture negotiate: the voucher is not a parameter of %.200s", q.SQL)
	}
	return q, nil
}

// commitToClient (PostgreSQL): one subscriber per voucher (the payer
// watching it by id) while negotiations run at a fixed rate on the service,
// each voucher changing once per second. Half the subscribers are on the
// service (the replica that commits), half on a second replica on the same
// database, so both paths are measured in the same phase: the committing
// replica hands its own change to its subscribers in process, the other one
// learns of it through LISTEN/NOTIFY.
func (s *pgScenarios) commitToClient(ctx context.Context) {
	h := s.h
	const id, rid = "subs-c2c", "subs-c2c-replica"
	name := fmt.Sprintf("commit→subscriber PG, same replica, %.0f transitions/s", h.cfg.C2CRate)
	rname := fmt.Sprintf("commit→subscriber PG, other replica, %.0f transitions/s", h.cfg.C2CRate)
	if r := s.setupReason("reserve-voucher", "redeem-voucher", "negotiate-voucher", "voucherUpdated(id:)"); r != "" {
		h.notRun(id, "subscriptions", name, r)
		h.notRun(rid, "subscriptions", rname, r)
		return
	}
	err := guard(func() error {
		// k vouchers for the service and k for the HTTP floor, which
		// negotiates its own on the same table.
		k := int(h.cfg.C2CRate)
		run, err := s.seed(ctx, s.clone, 1, 2*k)
		if err != nil {
			return err
		}
		all := make([]string, 2*k)
		for i := range all {
			all[i] = pgref.SeedID(run, 0, i+1)
		}
		if err := s.redeemAll(ctx, s.payee, all); err != nil {
			return fmt.Errorf("setup redeem: %w", err)
		}
		ids, floorIDs := all[:k], all[k:]
		// Without the statement the floor does not run (its lines say
		// why); the service's are measured all the same.
		update, capErr := s.captureNegotiate(ctx, floorIDs[0])
		floorWhy := ""
		if capErr != nil {
			floorWhy = capErr.Error()
		}
		replica, _, err := h.startService(h.dsn)
		if err != nil {
			return fmt.Errorf("second replica: %w", err)
		}
		defer replica.Stop()
		return h.commitToClient(ctx, c2cTarget{id: id, name: name, svc: s.svc, api: s.api, pprof: s.pprof,
			payer: s.payer.Token, ids: ids, replica: replica, rid: rid, rname: rname, flushDir: h.pg.Dir(),
			floorIDs: floorIDs, floorUpdate: update, floorWhy: floorWhy})
	})
	if err != nil {
		h.notRun(id, "subscriptions", name, "failed: "+err.Error())
		h.notRun(rid, "subscriptions", rname, "failed: "+err.Error())
	}
}

// sqliteCommitToClient is the same phase on the embedded database (one
// process, so one replica), with vouchers reserved and redeemed through
// the API.
func (h *Harness) sqliteCommitToClient(ctx context.Context, api *API, svc *Process, pprof string, f features) {
	const id = "subs-c2c-sqlite"
	name := fmt.Sprintf("commit→subscriber SQLite, %.0f transitions/s", h.cfg.C2CRate)
	if r := f.missing("reserve-voucher", "redeem-voucher", "negotiate-voucher", "voucherUpdated(id:)"); r != "" {
		h.notRun(id, "subscriptions", name, r)
		return
	}
	err := guard(func() error {
		payer, err := api.Device(ctx)
		if err != nil {
			return err
		}
		sess, err := api.CreateSession(ctx, payer.Token)
		if err != nil {
			return err
		}
		payee, err := api.Resource(ctx, sess.Code)
		if err != nil {
			return err
		}
		ids := make([]string, int(h.cfg.C2CRate))
		var firstErr atomic.Value
		parallel(ctx, 16, len(ids), func(ctx context.Context, i int) error {
			v, err := api.Reserve(ctx, payee, sess.Code, "")
			if err == nil {
				ids[i] = v.ID
				_, err = api.Redeem(ctx, payee, v.ID)
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			return err
		})
		if err, ok := firstErr.Load().(error); ok {
			return fmt.Errorf("setup: %w", err)
		}
		return h.commitToClient(ctx, c2cTarget{id: id, name: name, svc: svc, api: api, pprof: pprof, payer: payer.Token, ids: ids})
	})
	if err != nil {
		h.notRun(id, "subscriptions", name, "failed: "+err.Error())
	}
}

// commitToClient runs the phase on t. Each voucher's subscriber first gets
// its current state, then one update per negotiation. Latency is from the
// commit (the instant the database returned it to the service, which the
// answer carries in Server-Timing: voucher.CommitStamp; the harness and the
// service read the same machine clock) to the subscriber reading the
// update: the span the floors measure, from their own commit's return. The
// writer's answer→subscriber time (what this figure was until 2026-11-27:
// shorter by the service's work after commit and the answer's hop) and the
// write→subscriber time (from sending the request: the upper bound) are
// reported beside it.
//
// On two replicas (unless t.noFloor) two floors take turns with the
// service, slice by slice at the same rate: the HTTP floor (floor.C2C: the
// same negotiate request, one UPDATE committed, the frame written to the
// subscriber in process, or NOTIFYed after commit and written by a
// listening second process; read by the same subscribers' code, c2cSide), which is what the
// targets are ratios to, and the bare NOTIFY→LISTEN client (c2cFloor),
// reported beside it.
func (h *Harness) commitToClient(ctx context.Context, t c2cTarget) error {
	other := ""
	if t.replica != nil {
		other = t.replica.Addr
	}
	svc, err := openC2CSide(ctx, t.svc.Addr, other, t.payer, t.ids)
	if err != nil {
		return err
	}
	defer svc.close()
	var fl *c2cFloor
	var hf *c2cHTTPFloor
	var hfErr error
	// src is where the HTTP floor's payload comes from: the NOTIFY
	// floor's listener, or on NATS a capture of the service's messages.
	var src payloadSource
	if t.replica != nil && !t.noFloor {
		if fl, err = newC2CFloor(ctx, h.dsn); err != nil {
			return err
		}
		defer fl.close()
		src = fl
	}
	if t.replica != nil && t.floorNATS != "" {
		nc, err := newNATSCapture(t.floorNATS)
		if err != nil {
			return err
		}
		defer nc.close()
		src = nc
	}
	if src != nil {
		svc.mu.Lock()
		frame, fid, fver := svc.frame, svc.frameID, svc.frameVer
		svc.mu.Unlock()
		hfErr = guard(func() error {
			if t.floorUpdate == nil || len(t.floorIDs) != len(t.ids) {
				return errors.New(cmp.Or(t.floorWhy, "no negotiate statement captured for it"))
			}
			var err error
			hf, err = h.startC2CHTTPFloor(ctx, t.payer, t.floorIDs, *t.floorUpdate, frame, fid, fver, t.floorNATS)
			return err
		})
		if hf != nil {
			defer hf.close()
		}
	}
	prof := h.profile(t.pprof, t.id)
	smp := sampler(t.svc, true)
	var rsmp *proc.Sampler
	if t.replica != nil {
		rsmp = sampler(t.replica, true)
	}
	// The bench's own collector stays off while the sides take turns
	// (quietGC): its pauses stop the subscribers' reads and the load
	// generator, which is the bench measuring itself.
	defer quietGC()()
	busy := proc.MachineBusy()
	self := selfGC()
	disk := func() []report.Figure { return nil }
	if t.flushDir != "" {
		disk = flushWatch(t.flushDir)
	}
	slice, total := h.cfg.Duration, h.cfg.Duration
	if src != nil {
		slice = c2cSlice
		if h.cfg.C2CSlice > 0 {
			slice = h.cfg.C2CSlice
		}
		if h.cfg.C2CDuration > 0 {
			total = h.cfg.C2CDuration
		}
		if t.duration > 0 {
			total = t.duration
		}
	}
	var (
		floorSent    int
		floorErrs    = stats.NewRecorder(0)
		floorSlices  int
		floorSkipped int
		httpSlices   int
		// What each side's measured turns cost: its two processes' CPU
		// and the machine's, per transition (turnCost).
		svcCost, httpCost turnCost
	)
	svcPids := []int{t.svc.Pid()}
	if t.replica != nil {
		svcPids = append(svcPids, t.replica.Pid())
	}
	// The service and the HTTP floor interleave their negotiations on one
	// schedule (interleave), half the rate each, unless asked to take
	// whole turns: a stalled flush then holds back both sides' commits
	// and the burst it releases is both sides'. In whole turns, however
	// short, a turn ends when its last answer is read, so a stall is
	// absorbed by the side whose turn it is (docs/performance.md, "Issue
	// 25, eighth pass"). The bare NOTIFY floor keeps turns of its own.
	interleaved := hf != nil && hfErr == nil && !h.cfg.C2CTurns
	if interleaved {
		// The floors copy the service's notification payload: unmeasured
		// service slices until it is copied (the first, nearly always),
		// then the HTTP floor's payload and warm-up.
		for tries := 0; !src.captured() && tries < 40 && ctx.Err() == nil; tries++ {
			svc.slice(ctx, h.cfg.C2CRate, slice, true)
			floorSkipped++
		}
		if !src.captured() {
			interleaved = false
		} else if hfErr = hf.setPayload(ctx, src.capturedPayload()); hfErr == nil {
			hf.side.slice(ctx, h.cfg.C2CRate, h.cfg.Warmup, true)
		} else {
			interleaved = false
		}
	}
	// notifyTurn is the bare NOTIFY floor's turn, when it runs.
	notifyTurn := func() {
		if fl == nil {
			return
		}
		fn, ferrs := fl.run(ctx, h.cfg.C2CRate, slice, int64(floorSent))
		floorSent += fn
		floorErrs.Merge(ferrs)
		floorSlices++
	}
	if interleaved {
		span := 2 * slice
		floorPids := []int{hf.commit.Pid(), hf.other.Pid()}
		for svc.elapsed < 2*total-span/2 && ctx.Err() == nil {
			measureTurn(func() { interleave(ctx, h.cfg.C2CRate, span, false, svc, hf.side) },
				costPart{&svcCost, svcPids, &svc.n}, costPart{&httpCost, floorPids, &hf.side.n})
			httpSlices++
			notifyTurn()
		}
		svc.partners, hf.side.partners = []*c2cSide{hf.side}, []*c2cSide{svc}
	}
	for !interleaved && svc.elapsed < total-slice/2 && ctx.Err() == nil {
		svcCost.measure(svcPids, &svc.n, func() { svc.slice(ctx, h.cfg.C2CRate, slice, false) })
		if src == nil {
			continue
		}
		if !src.captured() {
			floorSkipped++
			continue
		}
		if hf != nil && hfErr == nil {
			if !hf.payloadSent {
				// Its first turn: the payload, then an unrecorded
				// warm-up (its pool's connections open on first use;
				// the service's are warm from the groups before).
				if hfErr = hf.setPayload(ctx, src.capturedPayload()); hfErr == nil {
					hf.side.slice(ctx, h.cfg.C2CRate, h.cfg.Warmup, true)
				}
			}
			if hfErr == nil {
				httpCost.measure([]int{hf.commit.Pid(), hf.other.Pid()}, &hf.side.n, func() { hf.side.slice(ctx, h.cfg.C2CRate, slice, false) })
				httpSlices++
			}
		}
		notifyTurn()
	}
	machineBusy := busy()
	sent := svc.n + floorSent
	if hf != nil {
		sent += hf.side.n
	}
	selfFigures := self(sent)
	diskFigures := disk()
	// Let the last updates arrive (up to 2 s: a coalesced version never
	// does, and then the wait runs out).
	waitFor(ctx, 2*time.Second, func() bool {
		return svc.allRead() && (fl == nil || fl.allRead()) && (hf == nil || hf.side.allRead())
	})
	usage := stopSampler(smp, t.svc, true)
	var rusage *proc.Usage
	if t.replica != nil {
		rusage = stopSampler(rsmp, t.replica, true)
	}
	prof()

	k := len(t.ids)
	sp := svc.spans()
	es := svc.errs.Summary(svc.elapsed)
	sides := []struct {
		id, name string
		usage    *proc.Usage
		subs     int
	}{{t.id, t.name, usage, k}}
	if t.replica != nil {
		sides[0].subs = (k + 1) / 2
		sides = append(sides, struct {
			id, name string
			usage    *proc.Usage
			subs     int
		}{t.rid, t.rname, rusage, k / 2})
	}
	for side, x := range sides {
		res := svc.result(x.id, x.name, sp, side, x.subs, x.usage)
		if side == 0 {
			// Request errors and broken sockets are not attributed to a
			// side; they count once, here.
			res.Latency.Errors += es.Errors + svc.bad.Load() + svc.subs.broken.Load()
			res.Latency.ErrorMsg = es.ErrorMsg
			if v, _ := svc.badMsg.Load().(string); v != "" {
				res.Latency.ErrorMsg = append(res.Latency.ErrorMsg, v)
			}
		}
		res.Figures = append(res.Figures, report.Figure{Name: "machine CPU busy (all processes, both CPUs)", Value: 100 * machineBusy, Unit: "%"})
		if src != nil {
			res.Figures = append(res.Figures, svcCost.figures()...)
		}
		res.Figures = append(res.Figures, selfFigures...)
		res.Figures = append(res.Figures, diskFigures...)
		h.add(res)
	}
	if fl != nil {
		h.addNotifyFloor(fl, svc.elapsed, floorSent, floorSlices, floorSkipped, floorErrs, slice)
	}
	if src == nil {
		return nil
	}
	hname := func(path string) string {
		return fmt.Sprintf("floor: HTTP negotiate → commit + %s → websocket, %s, %.0f/s", cmp.Or(t.floorVia, "NOTIFY"), path, h.cfg.C2CRate)
	}
	fid, frid := cmp.Or(t.floorID, c2cHTTPFloorID), cmp.Or(t.floorRID, c2cHTTPFloorReplicaID)
	switch {
	case hfErr != nil || hf == nil:
		why := "failed to start"
		if hfErr != nil {
			why = "failed: " + hfErr.Error()
		}
		h.notRun(fid, "subscriptions", hname("same replica"), why)
		h.notRun(frid, "subscriptions", hname("other replica"), why)
	case httpSlices == 0:
		h.notRun(fid, "subscriptions", hname("same replica"), "no service notification carrying a row was seen to copy")
		h.notRun(frid, "subscriptions", hname("other replica"), "no service notification carrying a row was seen to copy")
	default:
		hsp := hf.side.spans()
		hes := hf.side.errs.Summary(hf.side.elapsed)
		for side, id := range []string{fid, frid} {
			res := hf.side.result(id, hname([]string{"same replica", "other replica"}[side]), hsp, side, []int{(k + 1) / 2, k / 2}[side], nil)
			if side == 0 {
				res.Latency.Errors += hes.Errors + hf.side.bad.Load() + hf.side.subs.broken.Load()
				res.Latency.ErrorMsg = hes.ErrorMsg
				if v, _ := hf.side.badMsg.Load().(string); v != "" {
					res.Latency.ErrorMsg = append(res.Latency.ErrorMsg, v)
				}
			}
			res.Group = "subscriptions"
			res.Figures = append(res.Figures, report.Figure{Name: "slices (its negotiations interleaved with the service's; whole turns with -c2c-turns)", Value: float64(httpSlices), Unit: ""})
			res.Figures = append(res.Figures, httpCost.figures()...)
			h.add(res)
		}
	}
	return nil
}

// addNotifyFloor adds the bare NOTIFY floor's result.
func (h *Harness) addNotifyFloor(fl *c2cFloor, elapsed time.Duration, floorSent, floorSlices, floorSkipped int, floorErrs *stats.Recorder, slice time.Duration) {
	lats, fromSent, miss := fl.latencies()
	ss := stats.Summarize(fromSent, 0, elapsed, nil)
	fes := floorErrs.Summary(time.Duration(floorSlices) * slice)
	fsum := stats.Summarize(lats, miss+fes.Errors, time.Duration(floorSlices)*slice, fes.ErrorMsg)
	note := ""
	if floorSlices == 0 {
		note = "no service notification carrying a row was seen to copy"
	}
	h.add(&report.Result{ID: c2cFloorID, Group: "subscriptions", Name: fmt.Sprintf("floor: NOTIFY in a committing transaction → LISTEN, %.0f/s", h.cfg.C2CRate),
		Unit: "notification", Latency: &fsum, NotRun: note,
		Figures: []report.Figure{
			{Name: "transactions sent", Value: float64(floorSent), Unit: ""},
			{Name: "slices (taking turns with the service)", Value: float64(floorSlices), Unit: ""},
			{Name: "slices skipped (payload not captured yet)", Value: float64(floorSkipped), Unit: ""},
			{Name: "notification payload (the service's, copied)", Value: float64(len(fl.capturedPayload())), Unit: "B"},
			{Name: "COMMIT sent→listener p50 (includes the WAL flush)", Value: ms(ss.P50), Unit: "ms"},
			{Name: "COMMIT sent→listener p99 (includes the WAL flush)", Value: ms(ss.P99), Unit: "ms"},
		}})
}

// turnCost adds up what one side's measured turns of the
// commit→subscriber phase cost: the CPU its server processes used (both
// replicas), the machine's busy and total CPU time, and the transitions
// sent. The two sides do the same transitions at the same rate, so the
// difference in what they cost the machine is what their tails are
// measured under. When the sides' negotiations are interleaved in one
// turn (interleave), each side's servers are still its own, and what the
// turn cost the rest of the machine (the bench, PostgreSQL, every
// process) is shared: it is counted per transition of every side in the
// turn (nAll).
type turnCost struct {
	cpu         time.Duration
	each        []time.Duration // per process, in the order measure got them
	self        time.Duration   // the bench process's own (load generator, subscribers)
	pg          time.Duration   // PostgreSQL's processes
	busy, total uint64
	n           int // this side's transitions
	nAll        int // every side's, in the turns measured
}

// costPart is one side in a measured turn: its cost, its server
// processes and its count of transitions sent.
type costPart struct {
	c    *turnCost
	pids []int
	sent *int
}

// measure runs one turn of one side, adding the CPU pids used during it,
// the machine's, and how much *sent grew.
func (c *turnCost) measure(pids []int, sent *int, turn func()) {
	measureTurn(turn, costPart{c, pids, sent})
}

// measureTurn runs one turn shared by parts (one part: a turn of its
// own), adding to each part its servers' CPU and transitions, and to
// every part what the turn cost the bench, PostgreSQL and the machine.
func measureTurn(turn func(), parts ...costPart) {
	cpu := func(pids []int) ([]time.Duration, bool) {
		out := make([]time.Duration, len(pids))
		for i, pid := range pids {
			d, err := proc.CPU(pid)
			if err != nil {
				return nil, false
			}
			out[i] = d
		}
		return out, true
	}
	c0, ok0 := make([][]time.Duration, len(parts)), make([]bool, len(parts))
	n0 := make([]int, len(parts))
	for i, p := range parts {
		c0[i], ok0[i] = cpu(p.pids)
		n0[i] = *p.sent
	}
	s0, errS0 := proc.CPU(os.Getpid())
	p0, errP0 := proc.CommandCPU("postgres")
	b0, t0, err0 := proc.MachineCPU()
	turn()
	s1, errS1 := proc.CPU(os.Getpid())
	p1, errP1 := proc.CommandCPU("postgres")
	b1, t1, err1 := proc.MachineCPU()
	all := 0
	for i, p := range parts {
		all += *p.sent - n0[i]
	}
	for i, p := range parts {
		c := p.c
		c1, ok1 := cpu(p.pids)
		c.n += *p.sent - n0[i]
		c.nAll += all
		if errS0 == nil && errS1 == nil {
			c.self += s1 - s0
		}
		if errP0 == nil && errP1 == nil && p1 >= p0 {
			c.pg += p1 - p0
		}
		if ok0[i] && ok1 {
			if len(c.each) < len(p.pids) {
				c.each = append(c.each, make([]time.Duration, len(p.pids)-len(c.each))...)
			}
			for k := range p.pids {
				c.cpu += c1[k] - c0[i][k]
				c.each[k] += c1[k] - c0[i][k]
			}
		}
		if err0 == nil && err1 == nil && t1 >= t0 {
			c.busy += b1 - b0
			c.total += t1 - t0
		}
	}
}

// figures are the side's per-transition server CPU and how busy the
// machine was during its turns.
func (c *turnCost) figures() []report.Figure {
	var out []report.Figure
	if c.n > 0 {
		per := func(d time.Duration) float64 { return float64(d) / float64(c.n) / float64(time.Millisecond) }
		// What a shared turn cost outside the side's servers is per
		// transition of every side in it.
		perAll := per
		if c.nAll > 0 {
			perAll = func(d time.Duration) float64 { return float64(d) / float64(c.nAll) / float64(time.Millisecond) }
		}
		out = append(out, report.Figure{Name: "server CPU per transition (both replicas, during its turns)", Value: per(c.cpu), Unit: "ms"})
		if len(c.each) == 2 {
			out = append(out,
				report.Figure{Name: "of which the committing replica's", Value: per(c.each[0]), Unit: "ms"},
				report.Figure{Name: "of which the other replica's", Value: per(c.each[1]), Unit: "ms"})
		}
		out = append(out, report.Figure{Name: "bench process CPU per transition (load generator and subscribers, during its turns)", Value: perAll(c.self), Unit: "ms"},
			report.Figure{Name: "PostgreSQL CPU per transition (all its processes, during its turns)", Value: perAll(c.pg), Unit: "ms"})
		if c.total > 0 {
			// /proc/stat counts in clock ticks (USER_HZ, 100 a second).
			out = append(out, report.Figure{Name: "machine CPU per transition (every process, during its turns)", Value: perAll(time.Duration(c.busy) * 10 * time.Millisecond), Unit: "ms"})
		}
	}
	if c.total > 0 {
		out = append(out, report.Figure{Name: "machine CPU busy during its turns (both CPUs)", Value: 100 * float64(c.busy) / float64(c.total), Unit: "%"})
	}
	return out
}

// The HTTP floor's results (c2cHTTPFloor): the same replica's path and the
// other replica's.
const (
	c2cHTTPFloorID        = "ref-c2c-http-floor"
	c2cHTTPFloorReplicaID = "ref-c2c-http-floor-replica"
)

// result is one path's (0: same replica, 1: other) figures of a side.
func (s *c2cSide) result(id, name string, sp c2cSpans, side, subs int, usage *proc.Usage) *report.Result {
	sum := stats.Summarize(sp.c2c[side], sp.missing[side], s.elapsed, nil)
	ws := stats.Summarize(sp.w2c[side], 0, s.elapsed, nil)
	as := stats.Summarize(sp.a2c[side], 0, s.elapsed, nil)
	ns := s.neg.Summary(s.elapsed)
	es := s.errs.Summary(s.elapsed)
	// The rate the target names is the phase's: with interleaved
	// partners, every side's answered negotiations over the same turns.
	answered := ns.Count
	for _, p := range s.partners {
		answered += p.neg.Summary(p.elapsed).Count
	}
	achieved := float64(answered) / s.elapsed.Seconds()
	figs := []report.Figure{
		{Name: "subscribers", Value: float64(subs), Unit: ""},
		{Name: "transitions sent (all subscribers)", Value: float64(ns.Count + es.Errors), Unit: ""},
		{Name: "transitions failed", Value: float64(es.Errors), Unit: ""},
		{Name: "achieved transition rate", Value: achieved, Unit: "/s"},
		{Name: "updates delivered", Value: float64(len(sp.c2c[side])), Unit: ""},
		{Name: "updates missing", Value: float64(sp.missing[side]), Unit: ""},
		{Name: "negotiate request p50", Value: ms(ns.P50), Unit: "ms"},
		{Name: "negotiate request p99", Value: ms(ns.P99), Unit: "ms"},
		{Name: "write→subscriber p50 (upper bound)", Value: ms(ws.P50), Unit: "ms"},
		{Name: "write→subscriber p99 (upper bound)", Value: ms(ws.P99), Unit: "ms"},
		{Name: "answer→subscriber p50 (the writer's answer read, after commit)", Value: ms(as.P50), Unit: "ms"},
		{Name: "answer→subscriber p99 (the writer's answer read, after commit)", Value: ms(as.P99), Unit: "ms"},
		{Name: "answers without a commit stamp (measured from the answer)", Value: float64(sp.unstamped[side]), Unit: ""},
		{Name: "schedule lag p99", Value: ms(s.lagP99), Unit: "ms"},
	}
	if len(s.partners) > 0 {
		figs = append(figs, report.Figure{Name: "this side's transition rate (its negotiations interleaved with the other side's)", Value: float64(ns.Count) / s.elapsed.Seconds(), Unit: "/s"})
	}
	return &report.Result{ID: id, Group: "subscriptions", Name: name, Unit: "update", Latency: &sum, Usage: usage, Figures: figs}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// business creates (once) a business owned by the bench's user.
func (s *pgScenarios) business(ctx context.Context) (string, error) {
	if s.bizErr != nil || s.biz != "" {
		return s.biz, s.bizErr
	}
	var b struct {
		ID string `json:"id"`
	}
	s.bizErr = s.api.Do(ctx, http.MethodPost, "/api/v1/businesses/create-business", s.user.Token, map[string]any{"name": "voucherbench"}, &b)
	s.biz = b.ID
	return s.biz, s.bizErr
}

// fanout: N dashboard subscriptions on one business; each business voucher
// change must reach all of them. The same N connections to the bare floor
// server receive a pre-built frame of the same size, the least any server
// could do. Cost per subscriber is the time from commit (floor: from the
// broadcast request) until the last subscriber has the update, over N.
// fanoutSide is one side of the fan-out comparison (the service, or the
// bare websocket floor) with its n connections open: event sends one
// event and waits for every connection to read it.
type fanoutSide struct {
	event       func(ctx context.Context) (completion time.Duration, per []time.Duration, ok bool, err error)
	completions []time.Duration
	per         []time.Duration
	incomplete  int
}

// result is the side's report: every subscriber's latency, the last
// subscriber's per event, the cost per subscriber (last subscriber's
// median over n) and the process's CPU per delivery.
func (f *fanoutSide) result(id, group, name string, n int, usage *proc.Usage, first report.Figure, cpuName, note string) *report.Result {
	cs := stats.Summarize(f.completions, int64(f.incomplete), 0, nil)
	sum := stats.Summarize(f.per, int64(f.incomplete), 0, nil)
	res := &report.Result{ID: id, Group: group, Name: name, Unit: "delivery", Latency: &sum, Usage: usage,
		Figures: []report.Figure{
			first,
			{Name: "last subscriber p50", Value: ms(cs.P50), Unit: "ms"},
			{Name: "last subscriber p99", Value: ms(cs.P99), Unit: "ms"},
			{Name: "cost per subscriber", Value: float64(cs.P50) / float64(n) / float64(time.Microsecond), Unit: "µs"},
		},
		Notes: []string{note}}
	if usage != nil && len(f.per) > 0 {
		res.Figures = append(res.Figures, report.Figure{Name: cpuName, Value: float64(usage.CPU) / float64(len(f.per)) / float64(time.Microsecond), Unit: "µs"})
	}
	return res
}

func (f *fanoutSide) run(ctx context.Context) error {
	c, per, ok, err := f.event(ctx)
	if err != nil {
		return err
	}
	if !ok {
		f.incomplete++
	}
	f.completions = append(f.completions, c)
	f.per = append(f.per, per...)
	return nil
}

// fanout: the service's events and the floor's frames
// take turns (service, floor, service, ...), both sides' connections open
// all along, so a change in how fast this shared VM runs falls on both
// alike. (Measured one after the other, the ratio of the same code moved
// between 1.19 and 1.56 across runs.)
func (s *pgScenarios) fanout(ctx context.Context) {
	h := s.h
	n := h.cfg.FanoutSubs
	const id, fid = "subs-fanout", "ref-ws-floor-fanout"
	name := fmt.Sprintf("fan-out: %d subscribers on one business", n)
	fname := fmt.Sprintf("floor: bare websocket, 1 frame to %d conns", n)
	if r := s.setupReason("reserve-voucher", "redeem-voucher", "negotiate-voucher", "create-business", "voucherUpdated(businessId:)"); r != "" {
		h.notRun(id, "subscriptions", name, r)
		h.notRun(fid, "references", fname, r)
		return
	}
	var frame []byte
	var svc, fl *fanoutSide
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	err := guard(func() error {
		var err error
		svc, frame, err = s.fanoutService(ctx, n, &cleanup)
		return err
	})
	if err != nil {
		h.notRun(id, "subscriptions", name, "failed: "+err.Error())
		h.notRun(fid, "references", fname, "the service side did not run, so there is no frame to send")
		return
	}
	var floorProc *Process
	if err := guard(func() error {
		var err error
		fl, floorProc, err = s.fanoutFloor(ctx, n, frame, &cleanup)
		return err
	}); err != nil {
		h.notRun(fid, "references", fname, "failed: "+err.Error())
		fl = nil
	}

	smp := sampler(s.svc, true)
	var fsmp *proc.Sampler
	if fl != nil {
		fsmp = sampler(floorProc, false)
	}
	prof := s.profile(id)
	var svcErr, flErr error
	for e := 0; e < h.cfg.FanoutEvents && ctx.Err() == nil; e++ {
		if svcErr == nil {
			svcErr = guard(func() error { return svc.run(ctx) })
		}
		time.Sleep(50 * time.Millisecond)
		if fl != nil && flErr == nil {
			flErr = guard(func() error { return fl.run(ctx) })
		}
		time.Sleep(50 * time.Millisecond)
	}
	usage := stopSampler(smp, s.svc, true)
	prof()
	var fusage *proc.Usage
	if fl != nil {
		fusage = stopSampler(fsmp, floorProc, false)
	}
	if svcErr != nil {
		h.notRun(id, "subscriptions", name, "failed: "+svcErr.Error())
	} else {
		res := svc.result(id, "subscriptions", name, n, usage,
			report.Figure{Name: "events", Value: float64(len(svc.completions)), Unit: ""},
			"service CPU per delivery (whole phase)", "events take turns with the floor's frames")
		h.add(res)
	}
	if fl == nil {
		return
	}
	if flErr != nil {
		h.notRun(fid, "references", fname, "failed: "+flErr.Error())
		return
	}
	res := fl.result(fid, "references", fname, n, fusage,
		report.Figure{Name: "frame bytes", Value: float64(len(frame)), Unit: "B"},
		"floor CPU per delivery (whole phase)", "frames take turns with the service's events")
	h.add(res)
}

// fanoutService opens n business subscriptions on the service and warms
// them up; its events are negotiations of one business voucher, timed
// from the response (sent after commit) to each subscriber's read.
func (s *pgScenarios) fanoutService(ctx context.Context, n int, cleanup *[]func()) (*fanoutSide, []byte, error) {
	biz, err := s.business(ctx)
	if err != nil {
		return nil, nil, err
	}
	v, err := s.api.Reserve(ctx, s.user.Token, s.sess.Code, biz)
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.api.Redeem(ctx, s.user.Token, v.ID); err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	var frame []byte
	byVersion := map[int][]time.Time{}
	var bad atomic.Int64
	var badMsg atomic.Value
	subs, err := openSubs(ctx, s.wsURLs, &s.user.Token, n, 32,
		func(int) []op {
			return []op{{id: "1", query: `subscription($b: ID!) { voucherUpdated(businessId: $b) ` + voucherSelection + ` }`, vars: map[string]any{"b": biz}}}
		},
		func(i int, raw []byte, at time.Time) {
			id, ver, ok := voucherUpdate(raw)
			if !ok {
				_, err := parseUpdate(raw)
				bad.Add(1)
				badMsg.CompareAndSwap(nil, fmt.Sprintf("%v %.200s", err, raw))
				return
			}
			if string(id) != v.ID {
				return
			}
			mu.Lock()
			byVersion[ver] = append(byVersion[ver], at)
			if frame == nil {
				frame = append([]byte(nil), raw...)
			}
			mu.Unlock()
		})
	if err != nil {
		return nil, nil, err
	}
	*cleanup = append(*cleanup, subs.close)
	count := func(ver int) int { mu.Lock(); defer mu.Unlock(); return len(byVersion[ver]) }
	latest := func() int {
		mu.Lock()
		defer mu.Unlock()
		best := 0
		for ver := range byVersion {
			best = max(best, ver)
		}
		return best
	}
	// Warm-up events until every subscriber receives one: that is when
	// all N subscriptions are registered.
	ready := false
	for attempt := 0; attempt < 10 && !ready; attempt++ {
		if err := s.api.Negotiate(ctx, s.payer.Token, v.ID); err != nil {
			return nil, nil, err
		}
		time.Sleep(100 * time.Millisecond)
		ready = waitFor(ctx, 5*time.Second, func() bool { ver := latest(); return ver > 0 && count(ver) >= n })
	}
	if !ready {
		return nil, nil, fmt.Errorf("subscribers never all received an update (latest version reached %d of %d; bad messages %d %v)", count(latest()), n, bad.Load(), badMsg.Load())
	}
	mu.Lock()
	f := append([]byte(nil), frame...)
	mu.Unlock()
	side := &fanoutSide{event: func(ctx context.Context) (time.Duration, []time.Duration, bool, error) {
		if b := bad.Load(); b > 0 {
			return 0, nil, false, fmt.Errorf("%d bad messages: %v", b, badMsg.Load())
		}
		before := latest()
		if err := s.api.Negotiate(ctx, s.payer.Token, v.ID); err != nil {
			return 0, nil, false, err
		}
		t1 := time.Now()
		ver := before + 1
		ok := waitFor(ctx, 10*time.Second, func() bool { return count(ver) >= n })
		mu.Lock()
		defer mu.Unlock()
		last := t1
		per := make([]time.Duration, 0, n)
		for _, at := range byVersion[ver] {
			per = append(per, max(at.Sub(t1), 0))
			if at.After(last) {
				last = at
			}
		}
		return last.Sub(t1), per, ok, nil
	}}
	return side, f, nil
}

// fanoutFloor starts the bare websocket floor with the service's frame,
// opens n connections to it and warms it up.
func (s *pgScenarios) fanoutFloor(ctx context.Context, n int, frame []byte, cleanup *[]func()) (*fanoutSide, *Process, error) {
	h := s.h
	addr, err := FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	cfgPath := filepath.Join(h.cfg.OutDir, "floor-ws.json")
	if err := os.WriteFile(cfgPath, mustJSON(map[string]any{"addr": addr}), 0o600); err != nil {
		return nil, nil, err
	}
	fl, err := StartProcess("floor", h.cfg.Self, []string{"floor", "-config", cfgPath}, nil, addr, "/count")
	if err != nil {
		return nil, nil, err
	}
	*cleanup = append(*cleanup, func() { fl.Stop() })
	var mu sync.Mutex
	seen := make([]int, n)
	byEvent := map[int][]time.Time{}
	subs, err := openSubs(ctx, func(int) string { return "ws://" + addr + "/ws" }, nil, n, 32, nil, func(i int, _ []byte, at time.Time) {
		mu.Lock()
		seen[i]++
		byEvent[seen[i]] = append(byEvent[seen[i]], at)
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, err
	}
	*cleanup = append(*cleanup, subs.close)
	api := NewAPI(fl.URL, 4)
	if !waitFor(ctx, 10*time.Second, func() bool {
		b, err := api.Raw(ctx, http.MethodGet, "/count", "", nil)
		return err == nil && string(b) == fmt.Sprint(n)
	}) {
		return nil, nil, errors.New("floor did not see every connection")
	}
	count := func(e int) int { mu.Lock(); defer mu.Unlock(); return len(byEvent[e]) }
	sent := 0
	broadcast := func(ctx context.Context) (time.Duration, []time.Duration, bool, error) {
		t0 := time.Now()
		if _, err := api.Raw(ctx, http.MethodPost, "/broadcast", "", frame); err != nil {
			return 0, nil, false, err
		}
		sent++
		e := sent
		ok := waitFor(ctx, 10*time.Second, func() bool { return count(e) >= n })
		mu.Lock()
		defer mu.Unlock()
		last := t0
		per := make([]time.Duration, 0, n)
		for _, at := range byEvent[e] {
			per = append(per, at.Sub(t0))
			if at.After(last) {
				last = at
			}
		}
		return last.Sub(t0), per, ok, nil
	}
	if _, _, ok, err := broadcast(ctx); err != nil || !ok { // warm-up
		return nil, nil, fmt.Errorf("floor warm-up frame did not reach every connection (%v)", err)
	}
	return &fanoutSide{event: broadcast}, fl, nil
}

// idle: many idle voucherUpdated subscriptions; what each costs the
// service in memory and goroutines, and whether everything is given back
// when the clients go away.
func (s *pgScenarios) idle(ctx context.Context) {
	h := s.h
	const id = "subs-idle"
	subsWanted := h.cfg.IdleSubs
	name := fmt.Sprintf("%d idle voucherUpdated subscriptions", subsWanted)
	arg := "sessionId"
	if !s.feat.subArgs["sessionId"] && s.feat.subArgs["id"] {
		arg = "id"
	}
	needs := []string{"voucherUpdated(" + arg + ":)"}
	if arg == "id" {
		needs = append(needs, "reserve-voucher", "redeem-voucher")
	}
	if r := s.setupReason(needs...); r != "" {
		h.notRun(id, "subscriptions", name, r)
		return
	}
	err := guard(func() error {
		// A fresh process: what the earlier scenarios grew (heap, pools,
		// goroutine descriptors) would otherwise count towards the
		// subscriptions, or, handed back to the OS meanwhile, against them.
		s.stop()
		if err := s.start(ctx); err != nil {
			return fmt.Errorf("restart the service: %w", err)
		}
		s.api.CloseIdle()
		// Each connection is a file descriptor in both processes; the hard
		// limit (which a process without CAP_SYS_RESOURCE cannot raise)
		// decides how many fit. Subscriptions beyond that share
		// connections, two per connection.
		used := max(OpenFiles(os.Getpid()), OpenFiles(s.svc.Pid()))
		budget := int(h.fdLm) - used - 300
		conns := min(subsWanted, budget)
		if conns < subsWanted/2 {
			return fmt.Errorf("file descriptor limit %d allows only %d connections", h.fdLm, conns)
		}
		extra := subsWanted - conns
		query := `subscription($s: ID!) { voucherUpdated(sessionId: $s) ` + voucherSelection + ` }`
		vars := map[string]any{"s": s.sess.ID}
		if arg == "id" {
			query = `subscription($s: ID!) { voucherUpdated(id: $s) ` + voucherSelection + ` }`
			vars = map[string]any{"s": s.readID}
		}
		metrics := s.svc.URL + "/metrics"
		time.Sleep(2 * time.Second)
		gc := s.h.collect(s.pprof, "")
		base, err := proc.Take(ctx, s.svc.Pid(), http.DefaultClient, metrics)
		if err != nil {
			return err
		}
		var msgs atomic.Int64
		t0 := time.Now()
		subs, err := openSubs(ctx, s.wsURLs, &s.payer.Token, conns, 64,
			func(i int) []op {
				ops := []op{{id: "1", query: query, vars: vars}}
				if i < extra {
					ops = append(ops, op{id: "2", query: query, vars: vars})
				}
				return ops
			},
			func(int, []byte, time.Time) { msgs.Add(1) })
		if err != nil {
			return err
		}
		connectTime := time.Since(t0)
		time.Sleep(3 * time.Second) // the last subscribe messages are processed
		peak, err := proc.Take(ctx, s.svc.Pid(), http.DefaultClient, metrics)
		if err != nil {
			subs.close()
			return err
		}
		// What the open subscriptions hold while idle: measured like the
		// baseline, after a collection (so the garbage of setting them up
		// does not count) and a few seconds for the runtime to return what
		// it freed; with the live heap's profile for the report.
		live := peak
		if gc && s.h.collect(s.pprof, "subs-idle.heap.pprof") {
			time.Sleep(3 * time.Second)
			if m, err := proc.Take(ctx, s.svc.Pid(), http.DefaultClient, metrics); err == nil {
				live = m
			}
		}
		alive := int64(conns) - subs.ended.Load()
		subs.close()
		t1 := time.Now()
		back := waitFor(ctx, 60*time.Second, func() bool {
			m, err := proc.ScrapeMetrics(ctx, http.DefaultClient, metrics)
			return err == nil && m.Goroutines <= base.Goroutines+5
		})
		drain := time.Since(t1)
		time.Sleep(2 * time.Second)
		if gc {
			s.h.collect(s.pprof, "subs-idle.after.heap.pprof")
		}
		after, err := proc.Take(ctx, s.svc.Pid(), http.DefaultClient, metrics)
		if err != nil {
			return err
		}
		cs := s.connectSummary(subs, connectTime)
		cs.Errors = int64(conns) - alive
		per := func(a, b int64) float64 { return float64(a-b) / float64(subsWanted) }
		res := &report.Result{ID: id, Group: "subscriptions", Name: name, Unit: "conn", Latency: &cs,
			Usage: &proc.Usage{StartRSS: base.RSS, PeakRSS: peak.RSS, EndRSS: after.RSS, PeakGoroutines: peak.Goroutines,
				EndGoroutines: after.Goroutines, PeakHeapInuse: peak.HeapInuse, CPU: after.CPU - base.CPU},
			Figures: []report.Figure{
				{Name: "subscriptions", Value: float64(subsWanted), Unit: ""},
				{Name: "connections", Value: float64(conns), Unit: ""},
				{Name: "connections alive at the peak", Value: float64(alive), Unit: ""},
				{Name: "memory per subscription (RSS)", Value: per(live.RSS, base.RSS) / 1024, Unit: "KiB"},
				{Name: "RSS per subscription right after connecting (with setup garbage)", Value: per(peak.RSS, base.RSS) / 1024, Unit: "KiB"},
				{Name: "live Go heap per subscription (after GC)", Value: per(live.HeapInuse, base.HeapInuse) / 1024, Unit: "KiB"},
				{Name: "goroutines per subscription", Value: per(peak.Goroutines, base.Goroutines), Unit: ""},
				{Name: "goroutines before / peak / after", Value: float64(base.Goroutines), Unit: fmt.Sprintf("/ %d / %d", peak.Goroutines, after.Goroutines)},
				{Name: "live heap before / with subs / after (MiB, after GC)", Value: float64(base.HeapInuse) / (1 << 20), Unit: fmt.Sprintf("/ %.1f / %.1f", float64(live.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20))},
				{Name: "RSS before / peak / idle with subs / after (MiB)", Value: float64(base.RSS) / (1 << 20), Unit: fmt.Sprintf("/ %.1f / %.1f / %.1f", float64(peak.RSS)/(1<<20), float64(live.RSS)/(1<<20), float64(after.RSS)/(1<<20))},
				{Name: "goroutines back to baseline", Value: b2f(back), Unit: fmt.Sprintf("(1 = yes, after %.1f s)", drain.Seconds())},
				{Name: "messages received while idle", Value: float64(msgs.Load()), Unit: ""},
			}}
		if !gc {
			res.Notes = append(res.Notes, "the service has no pprof endpoint (VOUCHER_PPROF_ADDR): heap figures include uncollected garbage")
		}
		if extra > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("the hard file-descriptor limit (%d) allows %d connections; %d of them carry two subscriptions", h.fdLm, conns, extra))
		}
		h.add(res)
		return nil
	})
	if err != nil {
		h.notRun(id, "subscriptions", name, "failed: "+err.Error())
	}
}

func (s *pgScenarios) connectSummary(subs *subSet, elapsed time.Duration) stats.Summary {
	return subs.connect.Summary(elapsed)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// selfGC starts counting the bench process's own heap allocations and
// garbage collections (its load generator, its subscribers, and the
// NOTIFY floor's client, which run in it beside the service); the
// function it returns reports them over the phase, per transition sent.
// A collection stops the subscribers' reads as it stops the service's
// writes, so these say how much of a tail the bench could be adding.
func selfGC() func(sent int) []report.Figure {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	return func(sent int) []report.Figure {
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		var worst uint64
		for c := before.NumGC; c < after.NumGC && after.NumGC-c <= 256; c++ {
			worst = max(worst, after.PauseNs[c%256])
		}
		return []report.Figure{
			{Name: SelfAllocsFigure, Value: float64(after.Mallocs-before.Mallocs) / float64(max(sent, 1)), Unit: ""},
			{Name: "bench process: garbage collections during the phase", Value: float64(after.NumGC - before.NumGC), Unit: ""},
			{Name: "bench process: longest stop-the-world pause", Value: float64(worst) / 1e6, Unit: "ms"},
		}
	}
}

// SelfAllocsFigure is the bench process's heap allocations per transition
// sent during a commit→subscriber phase (selfGC).
const SelfAllocsFigure = "bench process: heap allocations per transition sent (load generator, subscribers, floor client)"

// quietGC collects once and turns the bench process's garbage collector
// off until the function it returns is called (which collects and
// restores it). A commit→subscriber phase allocates a few tens of MB in
// the bench (the lean readers one small object per frame, the load
// generator and the NOTIFY floor's client a few dozen per transition), so
// nothing needs collecting while it runs; with the collector on it ran
// every 2 s, each time stopping the subscribers, the load generator and
// the floor's client for up to 3.5 ms (selfGC's figures, "Issue 25, third
// pass" in docs/performance.md). A memory limit 512 MiB above the live
// heap stays as a backstop, so a phase that allocates more than expected
// is collected rather than run out of memory.
func quietGC() (restore func()) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(int64(m.HeapAlloc) + 512<<20)
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
		runtime.GC()
	}
}
