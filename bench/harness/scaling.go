package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/voucherd/voucherd/bench/pgref"
	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// The "scaling" group measures how far one database carries the service
// (docs/scaling.md): the cross-replica commit→subscriber latency over
// LISTEN/NOTIFY and over NATS, transitions per second with 1, 2 and 3
// replicas on one database, and the transition (= notification) rate at
// which commit latency bends on each transport. Replicas are fresh
// processes on the run's database; NATS is a nats-server started in this
// process on a loopback port (its CPU is the load generator's).

// Cross-replica transports, as the scaling results name them.
const (
	transportNotify = "notify"
	transportNATS   = "nats"
)

var transportNames = map[string]string{transportNotify: "LISTEN/NOTIFY", transportNATS: "NATS"}

// startNATS runs a NATS server in a child process (voucherbench nats,
// ServeNATS) on free loopback ports: a process of its own, as NATS is
// deployed, so its garbage collector and scheduling are its own and not
// the load generator's and subscribers' (until 2026-11-27 it ran inside
// the bench process, whose collections and run queue it shared); stop
// stops it.
func (h *Harness) startNATS() (url string, stop func(), err error) {
	client, err := FreeAddr()
	if err != nil {
		return "", nil, err
	}
	monitor, err := FreeAddr()
	if err != nil {
		return "", nil, err
	}
	p, err := StartProcess("nats", h.cfg.Self, []string{"nats", "-addr", client, "-monitor", monitor}, nil, monitor, "/healthz")
	if err != nil {
		return "", nil, err
	}
	return "nats://" + client, func() { p.Stop() }, nil
}

// ServeNATS runs a NATS server on addr (host:port), with its monitoring
// endpoint (/healthz) on monitor, until ctx ends: the bench's
// `voucherbench nats` child process.
func ServeNATS(ctx context.Context, addr, monitor string) error {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return err
	}
	mhost, mport, err := splitHostPort(monitor)
	if err != nil {
		return err
	}
	srv, err := server.NewServer(&server.Options{Host: host, Port: port, HTTPHost: mhost, HTTPPort: mport, NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("nats-server not ready")
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}

// replicas starts n replicas of the service on the run's database over
// transport; stop stops them all.
func (s *pgScenarios) replicas(n int, transport, natsURL string) (ps []*Process, stop func(), err error) {
	env := map[string]string{}
	if transport == transportNATS {
		env["VOUCHER_PUBSUB_URL"] = natsURL
	}
	stop = func() {
		for _, p := range ps {
			p.Stop()
		}
	}
	for range n {
		p, _, err := s.h.startService(s.h.dsn, env)
		if err != nil {
			stop()
			return nil, func() {}, err
		}
		ps = append(ps, p)
	}
	// Each replica hears the others' first heartbeat (1 s) before it is
	// measured: until then a LISTEN/NOTIFY notifier sends nothing.
	time.Sleep(1500 * time.Millisecond)
	return ps, stop, nil
}

func (s *pgScenarios) scaling(ctx context.Context) {
	h := s.h
	// A group that cannot run says so under every id its checks read, so
	// the checks fail as not run instead of passing as not asked for.
	notRun := func(reason string) {
		for _, id := range []string{"scale-c2c-" + transportNotify, "scale-c2c-" + transportNATS, "scale-tx-r1", "scale-tx-r2", "scale-tx-r3",
			"scale-bend-" + transportNotify, "scale-bend-" + transportNATS} {
			h.notRun(id, "scaling", id, reason)
		}
	}
	if r := s.setupReason("reserve-voucher", "redeem-voucher", "negotiate-voucher", "voucherUpdated(id:)"); r != "" {
		notRun(r)
		return
	}
	natsURL, stopNATS, err := h.startNATS()
	if err != nil {
		notRun("nats-server: " + err.Error())
		return
	}
	defer stopNATS()
	s.scalingC2C(ctx, natsURL)
	s.settle(ctx)
	s.replicaTransitions(ctx)
	s.settle(ctx)
	s.notifyBend(ctx, natsURL)
}

// scalingC2C: commitToClient's phase on two fresh replicas, first over
// LISTEN/NOTIFY, then over NATS, one after the other: half the subscribers
// on the replica that commits, half on the other. On NATS the HTTP floor,
// its changes carried over NATS too, interleaves with the service
// (floor.C2C's NATS): the NATS line's bound is its ratio to that floor.
func (s *pgScenarios) scalingC2C(ctx context.Context, natsURL string) {
	h := s.h
	for _, tr := range []string{transportNotify, transportNATS} {
		// Each transport starts from a settled database and a quiet
		// machine: the subscriptions group's 20,000 sockets before the
		// first, the first's 10,000 updates (autovacuum, a checkpoint)
		// before the second.
		s.settle(ctx)
		id, rid := "scale-c2c-same-"+tr, "scale-c2c-"+tr
		name := fmt.Sprintf("commit→subscriber PG over %s, same replica, %.0f transitions/s", transportNames[tr], h.cfg.C2CRate)
		rname := fmt.Sprintf("commit→subscriber PG over %s, other replica, %.0f transitions/s", transportNames[tr], h.cfg.C2CRate)
		err := guard(func() error {
			// On NATS the HTTP floor over NATS interleaves with the
			// service (its line's bound): k vouchers for each.
			k, n := int(h.cfg.C2CRate), int(h.cfg.C2CRate)
			if tr == transportNATS {
				n = 2 * k
			}
			run, err := s.seed(ctx, s.clone, 1, n)
			if err != nil {
				return err
			}
			all := make([]string, n)
			for i := range all {
				all[i] = pgref.SeedID(run, 0, i+1)
			}
			if err := s.redeemAll(ctx, s.payee, all); err != nil {
				return fmt.Errorf("setup redeem: %w", err)
			}
			ids := all[:k]
			target := c2cTarget{id: id, name: name, payer: s.payer.Token, ids: ids, rid: rid, rname: rname, flushDir: h.pg.Dir(), noFloor: true}
			if tr == transportNATS {
				target.floorIDs = all[k:]
				target.floorNATS, target.floorVia = natsURL, "NATS"
				// As many changes as the phase had before its floor
				// (-duration at the full rate, 3,000 a path), interleaved
				// over twice that: the bench stays under 8 minutes.
				target.duration = h.cfg.Duration
				target.floorID, target.floorRID = c2cNATSFloorID, c2cNATSFloorReplicaID
				update, err := s.captureNegotiate(ctx, target.floorIDs[0])
				if err != nil {
					target.floorWhy = err.Error()
				}
				target.floorUpdate = update
			}
			ps, stop, err := s.replicas(2, tr, natsURL)
			if err != nil {
				return err
			}
			defer stop()
			// Fresh replicas open their database connections (and NATS
			// its buffers) on first use: warm both at the phase's rate
			// first, as the subscriptions group's service is warm from the
			// groups before it, or the first second's slow requests are
			// the p99.
			for _, p := range ps {
				lp := newLeanPool(p.Addr)
				defer lp.Close()
				var cursor atomic.Int64
				OpenLoop(ctx, h.cfg.C2CRate/2, h.cfg.Warmup, 512, func(ctx context.Context, _ int) error {
					_, err := lp.ok(ctx, http.MethodPost, "/api/v1/vouchers/"+ids[int(cursor.Add(1))%k]+"/negotiate-voucher", s.payer.Token, negotiateBody)
					return err
				})
			}
			api := NewAPI(ps[0].URL, 64)
			defer api.CloseIdle()
			before := pubsubTrouble(ps)
			target.svc, target.api, target.replica = ps[0], api, ps[1]
			if err := h.commitToClient(ctx, target); err != nil {
				return err
			}
			// A lost connection, a slow-consumer drop or a replica taken
			// for silent ends in a resync, which delivers late: say whether
			// the phase had one, so a miss is not put down to load alone
			// when the transport lost something.
			trouble := float64(max(pubsubTrouble(ps)-before, 0))
			for _, x := range h.run.Results {
				if x.ID == id || x.ID == rid {
					x.Figures = append(x.Figures, report.Figure{Name: PubsubTroubleFigure, Value: trouble, Unit: ""})
				}
			}
			return nil
		})
		if err != nil {
			h.notRun(id, "scaling", name, "failed: "+err.Error())
			h.notRun(rid, "scaling", rname, "failed: "+err.Error())
		}
	}
}

// capShare is the CPU each replica gets in the capped steps of
// replicaTransitions: small enough that two capped replicas, PostgreSQL
// and the load generator leave the machine's two cores part idle, so the
// replicas (not the machine) are what limits those steps.
const capShare = 0.2

// PubsubTroubleFigure counts the warnings the replicas of a cross-replica
// phase logged about their transport (pubsubTrouble).
const PubsubTroubleFigure = "transport warnings logged by the replicas (lost connection, dropped messages, silent replica)"

// pubsubTrouble counts the warnings and errors about cross-replica
// signals in the replicas' logs so far (JSON lines at level WARN or ERROR
// whose message starts "pubsub:"; the bench runs them at level warn).
func pubsubTrouble(ps []*Process) int {
	n := 0
	for _, p := range ps {
		n += countPubsubTrouble(p.Output())
	}
	return n
}

func countPubsubTrouble(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"msg":"pubsub:`) && (strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`)) {
			n++
		}
	}
	return n
}

// replicaTransitions: redeem over REST at 64 clients (the largest
// -clients value) spread evenly over replicas on one database
// (LISTEN/NOTIFY between them), client i on replica i mod n.
//
// First as they are, 1, 2 and 3 replicas (a quarter of -duration each).
// On this 2-core machine one replica at 64 clients already keeps both
// cores busy with PostgreSQL and the load generator, so these steps
// measure the machine (docs/scaling.md): they are reported, with the
// machine's busy share and the replicas' CPU per redeem.
//
// Then each replica capped at capShare of a CPU (cpuCap), 1, 2 and 1
// replicas (a quarter, a half and a quarter of -duration, so a drift of
// the machine's speed falls on both counts alike): now each replica is
// the bottleneck and the machine has room, so 2 replicas ÷ 1 is what a
// second replica adds when it has CPU of its own, the figure the 1.6×
// target is checked on.
func (s *pgScenarios) replicaTransitions(ctx context.Context) {
	h := s.h
	c := 0
	for _, x := range h.cfg.TransitionClients {
		c = max(c, x)
	}
	name := func(n int, capped bool) (string, string) {
		if capped {
			return fmt.Sprintf("scale-tx-cap-r%d", n), fmt.Sprintf("redeem REST PG, %d clients over %d replica(s), each capped at %.1f CPU", c, n, capShare)
		}
		return fmt.Sprintf("scale-tx-r%d", n), fmt.Sprintf("redeem REST PG, %d clients over %d replica(s)", c, n)
	}
	type step struct {
		n      int
		capped bool
		d      time.Duration
	}
	q := h.cfg.Duration / 4
	steps := []step{{1, false, q}, {2, false, q}, {3, false, q},
		{1, true, q}, {2, true, 2 * q}, {1, true, q}}
	fail := func(err error) {
		for _, capped := range []bool{false, true} {
			for n := 1; n <= 3; n++ {
				if capped && n == 3 {
					continue
				}
				id, nm := name(n, capped)
				h.notRun(id, "scaling", nm, "failed: "+err.Error())
			}
		}
	}
	ps, stop, err := s.replicas(3, transportNotify, "")
	if err != nil {
		fail(err)
		return
	}
	defer stop()
	// Replicas 2 and 3 are stopped while fewer are measured (a LISTEN/NOTIFY
	// notifier sends only while another replica listens): restart them.
	procs := ps
	restart := func(i int) error {
		procs[i].Stop()
		p, _, err := h.startService(h.dsn, nil)
		if err != nil {
			return err
		}
		procs[i] = p
		time.Sleep(1500 * time.Millisecond)
		return nil
	}
	procs[1].Stop()
	procs[2].Stop()
	var caps [2]*cpuCap
	capErr := error(nil)
	for i := range caps {
		if caps[i], capErr = newCPUCap(fmt.Sprintf("voucherbench-%d-r%d", os.Getpid(), i), capShare); capErr != nil {
			break
		}
		defer caps[i].close()
	}

	// Enough vouchers for every step at 5,000 redeems/s uncapped and 3,000
	// capped (more than this machine has carried), warm-ups included;
	// running out fails the step.
	total := 1000
	for _, st := range steps {
		rate := 5000.0
		if st.capped {
			rate = 3000
		}
		total += int(rate * (st.d + h.cfg.Warmup).Seconds())
	}
	run, err := s.seed(ctx, s.clone, 1, total)
	if err != nil {
		fail(err)
		return
	}
	var next atomic.Int64
	type acc struct {
		rec                *stats.Recorder
		elapsed, cpu       time.Duration
		busy, ticks        uint64
		periods, throttled int64
		waits, waited      float64 // pool waits and seconds waited
	}
	accs := map[step]*acc{}
	key := func(st step) step { return step{n: st.n, capped: st.capped} }
	measure := func(st step) error {
		n := st.n
		conns := make([]leanConns, n)
		for i := range n {
			conns[i] = newLeanConns(procs[i].Addr, c)
			defer conns[i].Close()
		}
		var exhausted atomic.Bool
		op := func(ctx context.Context, w int) error {
			k := int(next.Add(1))
			if k > total {
				exhausted.Store(true)
				return errors.New("seeded vouchers exhausted")
			}
			return redeemed(conns[w%n].ok(ctx, w, http.MethodPost, "/api/v1/vouchers/"+pgref.SeedID(run, 0, k)+"/redeem-voucher", s.payee, redeemBody))
		}
		warm(ctx, c, h.cfg.Warmup, op)
		a := accs[key(st)]
		if a == nil {
			a = &acc{rec: stats.NewRecorder(0)}
			accs[key(st)] = a
		}
		var c0 time.Duration
		var w0, ws0 float64
		for _, p := range procs[:n] {
			x, _ := proc.CPU(p.Pid())
			c0 += x
			w, ws := poolWaits(ctx, p)
			w0, ws0 = w0+w, ws0+ws
		}
		var p0, th0 [2]int64
		if st.capped {
			for i := range n {
				p0[i], th0[i] = caps[i].throttled()
			}
		}
		b0, t0, _ := proc.MachineCPU()
		a.elapsed += runLoop(ctx, c, st.d, op, a.rec)
		b1, t1, _ := proc.MachineCPU()
		for _, p := range procs[:n] {
			x, _ := proc.CPU(p.Pid())
			a.cpu += x
			w, ws := poolWaits(ctx, p)
			a.waits, a.waited = a.waits+w, a.waited+ws
		}
		a.cpu -= c0
		a.waits, a.waited = a.waits-w0, a.waited-ws0
		if st.capped {
			for i := range n {
				p1, th1 := caps[i].throttled()
				a.periods += p1 - p0[i]
				a.throttled += th1 - th0[i]
			}
		}
		a.busy, a.ticks = a.busy+b1-b0, a.ticks+t1-t0
		if exhausted.Load() {
			return errors.New("seeded vouchers exhausted")
		}
		return nil
	}
	err = guard(func() error {
		up := 1
		for _, st := range steps {
			if st.capped && capErr != nil {
				break
			}
			for up < st.n {
				if err := restart(up); err != nil {
					return err
				}
				up++
			}
			for up > st.n {
				up--
				procs[up].Stop()
			}
			if st.capped {
				for i := range st.n {
					if err := caps[i].add(procs[i].Pid()); err != nil {
						return err
					}
				}
			}
			if err := measure(st); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		fail(err)
		return
	}
	for _, capped := range []bool{false, true} {
		var one float64
		for n := 1; n <= 3; n++ {
			id, nm := name(n, capped)
			a := accs[step{n: n, capped: capped}]
			if capped && n == 3 {
				continue
			}
			if a == nil {
				h.notRun(id, "scaling", nm, "replicas not capped: "+errString(capErr))
				continue
			}
			sum := a.rec.Summary(a.elapsed)
			if n == 1 {
				one = sum.PerSec
			}
			figs := []report.Figure{
				{Name: "replicas", Value: float64(n), Unit: ""},
				{Name: "transitions per second", Value: sum.PerSec, Unit: "/s"},
				busyFigure(busyShare(a.busy, a.ticks)),
			}
			if one > 0 {
				figs = append(figs, report.Figure{Name: "× one replica", Value: sum.PerSec / one, Unit: "×"})
			}
			if sum.Count > 0 {
				figs = append(figs, report.Figure{Name: cpuPerRedeemFigure, Value: float64(a.cpu) / float64(sum.Count) / float64(time.Microsecond), Unit: "µs"},
					report.Figure{Name: "database pool waits per redeem (all replicas)", Value: a.waits / float64(sum.Count), Unit: ""},
					report.Figure{Name: "database pool wait per redeem (all replicas)", Value: a.waited / float64(sum.Count) * 1e6, Unit: "µs"})
			}
			note := fmt.Sprintf("closed loop of %d clients, client i on replica i mod n; steps of 1, 2, 3 replicas (%s each) then, capped, 1, 2, 1 (%s, %s, %s); LISTEN/NOTIFY between replicas; replicas not measured are stopped",
				c, q, q, 2*q, q)
			if capped {
				figs = append(figs,
					report.Figure{Name: capUseFigure, Value: 100 * a.cpu.Seconds() / a.elapsed.Seconds() / (float64(n) * capShare), Unit: "%"},
					report.Figure{Name: capThrottledFigure, Value: 100 * float64(a.throttled) / float64(max(a.periods, 1)), Unit: "%"})
				note += fmt.Sprintf("; each replica in a cgroup of its own with a CPU quota of %.0f µs per %d µs", capShare*capPeriod, capPeriod)
			}
			h.add(&report.Result{ID: id, Group: "scaling", Name: nm, Unit: "req", Latency: &sum, Figures: figs, Notes: []string{note}})
		}
	}
}

// poolWaits reads a replica's database pool counters from its /metrics:
// how many times a request waited for a free connection, and for how long
// in all (seconds); zeros when they cannot be read.
func poolWaits(ctx context.Context, p *Process) (waits, seconds float64) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/metrics", nil)
	if err != nil {
		return 0, 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0
	}
	return parsePoolWaits(string(b))
}

func parsePoolWaits(metrics string) (waits, seconds float64) {
	for _, line := range strings.Split(metrics, "\n") {
		name, rest, _ := strings.Cut(line, "{")
		_, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_sql_wait_count_total":
			waits += v
		case "go_sql_wait_duration_seconds_total":
			seconds += v
		}
	}
	return waits, seconds
}

// Figures of the replica steps that scalingChecks reads.
const (
	cpuPerRedeemFigure = "replicas' CPU per redeem (all replicas)"
	capUseFigure       = "replicas' CPU used, share of their caps"
	capThrottledFigure = "quota periods in which a replica was held back"
)

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// bendRates are the transition rates notifyBend offers, low to high. It
// stops after the first rate neither transport kept up with (under 90 %
// achieved): past it both only queue (on this machine, from 3,000/s).
var bendRates = []float64{250, 500, 1000, 2000, 3000, 4000}

const bendFigure = "bend rate (p99 > 2 × reference, or < 90% achieved)"

// bendSlices is how many turns each transport takes at each rate.
const bendSlices = 2

// notifyBend: negotiations at fixed rates, half sent to each of two
// replicas (so every transition is one cross-replica notification), on a
// LISTEN/NOTIFY pair and on a NATS pair taking turns at each rate. The
// figure is the negotiate request's latency, which includes its commit;
// the bend is the first rate whose p99 is over twice the reference or
// that the service could not keep up with (achieved < 90% of offered),
// the reference being the better p99 of the two lowest rates.
func (s *pgScenarios) notifyBend(ctx context.Context, natsURL string) {
	h := s.h
	const pool = 2000
	d := max(h.cfg.Unloaded*2/3, 2*time.Second) // per transport and rate
	fail := func(reason string) {
		for _, tr := range []string{transportNotify, transportNATS} {
			h.notRun("scale-bend-"+tr, "scaling", "commit-latency bend over "+transportNames[tr], reason)
		}
	}
	run, err := s.seed(ctx, s.clone, 1, pool)
	if err != nil {
		fail("failed: " + err.Error())
		return
	}
	ids := make([]string, pool)
	for i := range ids {
		ids[i] = pgref.SeedID(run, 0, i+1)
	}
	if err := s.redeemAll(ctx, s.payee, ids); err != nil {
		fail("setup redeem: " + err.Error())
		return
	}
	type pair struct {
		tr   string
		ps   []*Process
		pool []*leanPool
	}
	var pairs []*pair
	for _, tr := range []string{transportNotify, transportNATS} {
		ps, stop, err := s.replicas(2, tr, natsURL)
		if err != nil {
			fail("failed: " + err.Error())
			return
		}
		defer stop()
		p := &pair{tr: tr, ps: ps}
		for _, x := range ps {
			lp := newLeanPool(x.Addr)
			defer lp.Close()
			p.pool = append(p.pool, lp)
		}
		pairs = append(pairs, p)
	}
	type point struct {
		rate, achieved float64
		sum            stats.Summary
		busy           float64
	}
	points := map[string][]point{}
	var cursor atomic.Int64
	// Each rate starts with an unrecorded warm-up per transport: long
	// enough for the connection pools to grow to the rate.
	warmup := min(h.cfg.Warmup, 500*time.Millisecond)
	offered := 0.0
	for _, rate := range bendRates {
		// At each rate the transports take turns in bendSlices slices, so
		// a change in what else the machine is doing falls on both.
		type acc struct {
			rec         *stats.Recorder
			errs        int64
			errMsg      []string
			sent        int
			elapsed     time.Duration
			busy, ticks uint64
		}
		accs := make([]*acc, len(pairs))
		for i := range accs {
			accs[i] = &acc{rec: stats.NewRecorder(0)}
		}
		slice := max(d/bendSlices, time.Second)
		for n := 0; n < bendSlices && ctx.Err() == nil; n++ {
			for j, p := range pairs {
				a := accs[j]
				op := func(ctx context.Context, i int) error {
					v := ids[int(cursor.Add(1))%pool]
					_, err := p.pool[i%2].ok(ctx, http.MethodPost, "/api/v1/vouchers/"+v+"/negotiate-voucher", s.payer.Token, negotiateBody)
					return err
				}
				if n == 0 {
					OpenLoop(ctx, rate, warmup, 1024, op) // unrecorded
				}
				timed := func(ctx context.Context, i int) error {
					t0 := time.Now()
					err := op(ctx, i)
					if err == nil {
						a.rec.Add(time.Since(t0))
					}
					return err
				}
				b0, t0, _ := proc.MachineCPU()
				sent, errs, _, elapsed := OpenLoop(ctx, rate, slice, 1024, timed)
				b1, t1, _ := proc.MachineCPU()
				es := errs.Summary(elapsed)
				a.sent += sent
				a.errs += es.Errors
				a.errMsg = append(a.errMsg, es.ErrorMsg...)
				a.elapsed += elapsed
				a.busy, a.ticks = a.busy+b1-b0, a.ticks+t1-t0
			}
		}
		offered = rate
		saturated := true
		for j, p := range pairs {
			a := accs[j]
			sum := a.rec.Summary(a.elapsed)
			sum.Errors, sum.ErrorMsg = a.errs, a.errMsg
			pt := point{rate: rate, achieved: float64(int64(a.sent)-a.errs) / a.elapsed.Seconds(), sum: sum, busy: busyShare(a.busy, a.ticks)}
			points[p.tr] = append(points[p.tr], pt)
			saturated = saturated && pt.achieved < 0.9*rate
		}
		if saturated {
			break
		}
	}
	for _, p := range pairs {
		pts := points[p.tr]
		sort.Slice(pts, func(i, j int) bool { return pts[i].rate < pts[j].rate })
		// The reference is the better p99 of the two lowest rates: one
		// stalled flush in a 3-second phase can make either look slow.
		base := pts[0].sum.P99
		if len(pts) > 1 {
			base = min(base, pts[1].sum.P99)
		}
		bend := 0.0
		for _, pt := range pts {
			id := fmt.Sprintf("scale-bend-%s-%.0f", p.tr, pt.rate)
			nm := fmt.Sprintf("negotiate PG over %s, 2 replicas, %.0f/s offered", transportNames[p.tr], pt.rate)
			sum := pt.sum
			h.add(&report.Result{ID: id, Group: "scaling", Name: nm, Unit: "req", Latency: &sum, Figures: []report.Figure{
				{Name: "offered rate", Value: pt.rate, Unit: "/s"},
				{Name: "achieved rate", Value: pt.achieved, Unit: "/s"},
				{Name: "p99 × reference p99", Value: float64(sum.P99) / float64(max(base, time.Microsecond)), Unit: "×"},
				busyFigure(pt.busy),
			}})
			if bend == 0 && (sum.P99 > 2*base || pt.achieved < 0.9*pt.rate) {
				bend = pt.rate
			}
		}
		id := "scale-bend-" + p.tr
		nm := fmt.Sprintf("commit-latency bend over %s (2 replicas, notifications/s = transitions/s)", transportNames[p.tr])
		figs := []report.Figure{{Name: bendFigure, Value: bend, Unit: "/s"},
			{Name: "highest rate offered", Value: offered, Unit: "/s"},
			{Name: "reference p99 (the better of the two lowest rates')", Value: ms(base), Unit: "ms"}}
		note := fmt.Sprintf("rates %v per second (stopping after the first neither transport kept up with), %d slices of %s each after %s unrecorded, the two transports taking turns slice by slice; negotiations round-robin over %d redeemed vouchers, alternate requests to each replica", bendRates, bendSlices, max(d/bendSlices, time.Second), warmup, pool)
		if bend == 0 {
			note += "; no bend up to the highest rate offered (bend rate 0)"
		}
		h.add(&report.Result{ID: id, Group: "scaling", Name: nm, Figures: figs, Notes: []string{note}})
	}
}

// scalingChecks: 2 capped replicas' transitions against one capped
// replica's (the target), the uncapped figures and the notify-bend figures
// (reported, no bound).
func scalingChecks(r *report.Run) []report.Check {
	var out []report.Check
	get := func(id string) (*report.Result, string) {
		x := r.Find(id)
		switch {
		case x == nil:
			return nil, id + " was not part of this run"
		case x.NotRun != "":
			return nil, id + ": " + x.NotRun
		}
		return x, ""
	}
	figure := func(x *report.Result, name string) float64 {
		for _, f := range x.Figures {
			if f.Name == name {
				return f.Value
			}
		}
		return 0
	}
	// 2 replicas against 1, each capped at capShare of a CPU: the target.
	// It only counts when the caps, not the machine, were the limit.
	{
		target := fmt.Sprintf("transitions with 2 replicas >= 1.6 x one replica (each replica capped at %.1f CPU)", capShare)
		two, why1 := get("scale-tx-cap-r2")
		one, why2 := get("scale-tx-cap-r1")
		if two == nil || one == nil || two.Latency == nil || one.Latency == nil {
			out = append(out, report.Check{Target: target, Figure: "redeem REST /s, 2 capped replicas", Reference: "1 capped replica", Bound: 1.6, AtLeast: true, NotRun: first(why1, why2)})
		} else {
			c := report.NewCheck(target, "redeem REST, 2 capped replicas", two.Latency.PerSec, "/s", "1 capped replica", one.Latency.PerSec, 1.6, true)
			if busy := figure(two, busyFigure(0).Name); busy > 90 {
				c.Met = false
				c.Note = fmt.Sprintf("machine %.0f%% busy with 2 capped replicas: the machine, not the replicas, was the limit", busy)
			} else if use := figure(one, capUseFigure); use < 80 {
				c.Note = fmt.Sprintf("one capped replica used %.0f%% of its cap: something besides the cap held it back", use)
			}
			out = append(out, c)
		}
	}
	// The same without caps, reported: on 2 cores shared with PostgreSQL
	// and the load generator, one replica already fills the machine.
	{
		target := "transitions with 2 replicas, uncapped (2 cores shared with PostgreSQL and the load generator)"
		two, why1 := get("scale-tx-r2")
		one, why2 := get("scale-tx-r1")
		if two == nil || one == nil || two.Latency == nil || one.Latency == nil {
			out = append(out, report.Check{Target: target, Figure: "redeem REST /s, 2 replicas", Info: true, NotRun: first(why1, why2)})
		} else {
			c := report.NewInfo(target, "redeem REST, 2 replicas", two.Latency.PerSec, "/s", "1 replica", one.Latency.PerSec)
			busy := figure(one, busyFigure(0).Name)
			c.Note = fmt.Sprintf("machine %.0f%% busy with 1 replica", busy)
			if busy >= 90 {
				c.Note += ": one replica, PostgreSQL and the load generator fill it, so a second replica has no CPU to add (the capped line is the check)"
			}
			out = append(out, c)
		}
		if three, why := get("scale-tx-r3"); three == nil || one == nil || three.Latency == nil {
			out = append(out, report.Check{Target: "transitions with 3 replicas, uncapped", Figure: "redeem REST /s", Info: true, NotRun: first(why, why2)})
		} else {
			out = append(out, report.NewInfo("transitions with 3 replicas, uncapped", "redeem REST, 3 replicas", three.Latency.PerSec, "/s", "1 replica", one.Latency.PerSec))
		}
	}
	notify, why1 := get("scale-bend-" + transportNotify)
	nats, why2 := get("scale-bend-" + transportNATS)
	if notify == nil || nats == nil {
		out = append(out, report.Check{Target: "notify bend: commit latency bends at (0 = not up to the highest rate)", Figure: "transitions/s", Info: true, NotRun: first(why1, why2)})
	} else {
		out = append(out, report.NewInfo("notify bend: commit latency bends at (0 = not up to the highest rate)", "LISTEN/NOTIFY", figure(notify, bendFigure), "/s", "NATS", figure(nats, bendFigure)))
	}
	return out
}

// The HTTP floor over NATS (the scaling group's NATS phase): the same
// replica's path and the other replica's.
const (
	c2cNATSFloorID        = "ref-c2c-http-floor-nats"
	c2cNATSFloorReplicaID = "ref-c2c-http-floor-nats-replica"
)
