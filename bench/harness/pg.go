package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/bench/pgref"
	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// pgScenarios is everything that runs against the service on PostgreSQL.
type pgScenarios struct {
	h     *Harness
	svc   *Process
	pprof string
	api   *API
	feat  features

	payer  Identity
	user   Identity
	sess   Session
	payee  string // resource token of sess
	clone  string // a RESERVED voucher of sess: the row seeds are cloned from
	readID string // a REDEEMED voucher the read scenarios fetch
	redeem []pgref.Statement
	script string
	// scriptVars are the script's bind values, passed to pgbench as -D.
	scriptVars []pgref.Var
	read       *floor.ReadQuery
	// redeemQ is the captured redeem as one statement, for the redeem
	// floor (nil when the redeem was not one statement).
	redeemQ  *floor.ReadQuery
	floorPid int
	setupOK  error
	biz      string
	bizErr   error
}

// features says which parts of the interface the running service has.
type features struct {
	reserve, redeem, negotiate, resolve, get, business, webhook bool
	gqlVoucher                                                  bool
	subArgs                                                     map[string]bool
}

func (f features) missing(names ...string) string {
	var out []string
	have := map[string]bool{
		"reserve-voucher": f.reserve, "redeem-voucher": f.redeem, "negotiate-voucher": f.negotiate,
		"resolve-voucher": f.resolve, "GET voucher": f.get, "create-business": f.business,
		"create-endpoint": f.webhook, "GraphQL voucher(id:)": f.gqlVoucher,
		"voucherUpdated(id:)": f.subArgs["id"], "voucherUpdated(sessionId:)": f.subArgs["sessionId"],
		"voucherUpdated(businessId:)": f.subArgs["businessId"],
	}
	for _, n := range names {
		if !have[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "the service has no " + strings.Join(out, ", ") + " yet"
}

func (s *pgScenarios) start(ctx context.Context) error {
	svc, pp, err := s.h.startService(s.h.dsn)
	if err != nil {
		return err
	}
	s.svc, s.pprof = svc, pp
	s.api = NewAPI(svc.URL, 256)
	return nil
}

func (s *pgScenarios) stop() {
	if s.svc != nil {
		s.api.CloseIdle()
		s.svc.Stop()
		s.svc = nil
	}
}

func (s *pgScenarios) all(ctx context.Context) {
	h := s.h
	if err := s.start(ctx); err != nil {
		h.notRun("service", "setup", "voucherd on PostgreSQL", err.Error())
		return
	}
	defer s.stop()
	s.feat = s.probe(ctx)
	h.log.Info("service features", "features", fmt.Sprintf("%+v", s.feat))
	s.setupOK = guard(func() error { return s.setup(ctx) })
	if s.setupOK != nil {
		h.log.Error("setup failed", "err", s.setupOK)
	}
	if h.want("transitions") {
		s.transitions(ctx)
		s.settle(ctx)
	}
	if h.want("read") {
		s.reads(ctx)
	}
	if h.want("hostile") {
		s.hostile(ctx)
	}
	if h.want("lifecycle") {
		h.lifecycle(ctx, "lifecycle-postgres", "lifecycle on PostgreSQL", s.api, s.svc, s.pprof, s.feat)
	}
	if h.want("webhooks") {
		s.webhooks(ctx)
		s.settle(ctx)
	}
	if h.want("apikeys") {
		s.apiKeys(ctx)
		s.settle(ctx)
	}
	if h.want("subscriptions") {
		s.commitToClient(ctx)
		s.fanout(ctx)
		s.idle(ctx)
	}
	if h.want("scaling") {
		s.scaling(ctx)
	}
}

// settle cleans up after a writing phase before anything else is
// measured: the transitions update tens of thousands of rows (the webhook
// phase thousands more), and PostgreSQL would
// otherwise vacuum them and write them out (autovacuum, the checkpointer)
// during the next phases, on the same two CPUs and disk. It vacuums and
// checkpoints now, then waits (up to 10 s) for a second in which the
// machine is under 20% busy.
func (s *pgScenarios) settle(ctx context.Context) {
	for _, q := range []string{"VACUUM (ANALYZE) vouchers", "CHECKPOINT"} {
		if _, err := s.h.adm.ExecContext(ctx, q); err != nil {
			s.h.log.Warn("settle", "statement", q, "err", err.Error())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy := proc.MachineBusy()
		time.Sleep(time.Second)
		if b := busy(); b >= 0 && b < 0.2 {
			return
		}
	}
}

func (s *pgScenarios) probe(ctx context.Context) features {
	a := s.api
	const v = "/api/v1/vouchers/vch_00000000000000000000000000"
	f := features{
		reserve:   a.Probe(ctx, http.MethodPost, "/api/v1/vouchers/reserve-voucher"),
		redeem:    a.Probe(ctx, http.MethodPost, v+"/redeem-voucher"),
		negotiate: a.Probe(ctx, http.MethodPost, v+"/negotiate-voucher"),
		resolve:   a.Probe(ctx, http.MethodPost, v+"/resolve-voucher"),
		get:       a.Probe(ctx, http.MethodGet, v),
		business:  a.Probe(ctx, http.MethodPost, "/api/v1/businesses/create-business"),
		webhook:   a.Probe(ctx, http.MethodPost, "/api/v1/businesses/biz_00000000000000000000000000/webhook-endpoints/create-endpoint"),
		subArgs:   map[string]bool{},
	}
	var schema struct {
		Schema struct {
			QueryType struct {
				Fields []struct{ Name string } `json:"fields"`
			} `json:"queryType"`
			SubscriptionType *struct {
				Fields []struct {
					Name string
					Args []struct{ Name string } `json:"args"`
				} `json:"fields"`
			} `json:"subscriptionType"`
		} `json:"__schema"`
	}
	err := a.GraphQL(ctx, "", `{ __schema { queryType { fields { name } } subscriptionType { fields { name args { name } } } } }`, nil, &schema)
	if err != nil {
		s.h.log.Warn("GraphQL introspection failed", "err", err)
		return f
	}
	for _, fl := range schema.Schema.QueryType.Fields {
		if fl.Name == "voucher" {
			f.gqlVoucher = true
		}
	}
	if st := schema.Schema.SubscriptionType; st != nil {
		for _, fl := range st.Fields {
			if fl.Name == "voucherUpdated" {
				for _, arg := range fl.Args {
					f.subArgs[arg.Name] = true
				}
			}
		}
	}
	return f
}

func (s *pgScenarios) setup(ctx context.Context) error {
	a := s.api
	var err error
	if s.payer, err = a.Device(ctx); err != nil {
		return err
	}
	if s.user, err = a.User(ctx); err != nil {
		return err
	}
	if s.sess, err = a.CreateSession(ctx, s.payer.Token); err != nil {
		return err
	}
	if s.payee, err = a.Resource(ctx, s.sess.Code); err != nil {
		return err
	}
	if !s.feat.reserve {
		return nil
	}
	clone, err := a.Reserve(ctx, s.payee, s.sess.Code, "")
	if err != nil {
		return err
	}
	s.clone = clone.ID
	if !s.feat.redeem {
		return nil
	}
	capture, err := a.Reserve(ctx, s.payee, s.sess.Code, "")
	if err != nil {
		return err
	}
	conn, err := s.h.adm.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stmts, err := pgref.Capture(ctx, conn, func() error {
		_, err := a.Redeem(ctx, s.payee, capture.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("capture redeem: %w", err)
	}
	if s.redeem, err = pgref.Transition(stmts, capture.ID); err != nil {
		return err
	}
	if len(s.redeem) == 1 && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(s.redeem[0].SQL)), "UPDATE") {
		st := s.redeem[0]
		q := &floor.ReadQuery{SQL: st.SQL, Params: st.Params, Prepared: st.Prepared, IDParam: -1}
		for i, p := range st.Params {
			if p != nil && *p == capture.ID {
				q.IDParam = i
			}
		}
		if q.IDParam >= 0 {
			s.redeemQ = q
		}
	}
	s.script, s.scriptVars, err = pgref.Script(s.redeem, capture.ID, func(q string) ([]string, error) { return pgref.ParamTypes(ctx, conn, q) })
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.h.cfg.OutDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.h.cfg.OutDir, "redeem.pgbench.sql"), []byte(s.script), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.h.cfg.OutDir, "redeem.pgbench.vars"), []byte(varLines(s.scriptVars)), 0o644); err != nil {
		return err
	}

	read, err := a.Reserve(ctx, s.payee, s.sess.Code, "")
	if err != nil {
		return err
	}
	if _, err := a.Redeem(ctx, s.payee, read.ID); err != nil {
		return err
	}
	s.readID = read.ID
	if s.feat.get {
		stmts, err := pgref.Capture(ctx, conn, func() error {
			_, err := a.Raw(ctx, http.MethodGet, "/api/v1/vouchers/"+read.ID, s.payee, nil)
			return err
		})
		if err != nil {
			return fmt.Errorf("capture GET voucher: %w", err)
		}
		st, err := pgref.PrimaryKeyRead(stmts, read.ID)
		if err != nil {
			return err
		}
		q := &floor.ReadQuery{SQL: st.SQL, Params: st.Params, Prepared: st.Prepared}
		for i, p := range st.Params {
			if p != nil && *p == read.ID {
				q.IDParam = i
			}
		}
		s.read = q
	}
	return nil
}

// startFloor starts a floor process (voucherbench floor) on the bench's
// database with cfg (its address, DSN and pool filled in here).
func (s *pgScenarios) startFloor(cfg floor.Config, name string) (*Process, error) {
	h := s.h
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cfg.Addr, cfg.DSN, cfg.MaxConns = addr, h.dsn, 32
	cfgPath := filepath.Join(h.cfg.OutDir, name)
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcess("floor", h.cfg.Self, []string{"floor", "-config", cfgPath}, nil, addr, "/count")
	if err == nil {
		s.floorPid = p.Pid()
	}
	return p, err
}

// floorResult records the redeem floor's side of a transitions pair, after
// checking that every redeem it answered changed a row.
func (s *pgScenarios) floorResult(ctx context.Context, c int, fl *Process, rec *stats.Recorder, elapsed, cpu time.Duration, run, slices int, slice time.Duration) error {
	sum := rec.Summary(elapsed)
	changed, err := pgref.Changed(ctx, s.h.adm, run, "RESERVED")
	if err != nil {
		return err
	}
	if ok := sum.Count - sum.Errors; changed < ok {
		return fmt.Errorf("the floor answered %d redeems but %d vouchers changed state", ok, changed)
	}
	usage := &proc.Usage{CPU: cpu}
	s.h.add(&report.Result{ID: fmt.Sprintf("ref-redeem-floor-c%d", c), Group: "references", Name: fmt.Sprintf("floor: net/http + the redeem statement, %d clients", c),
		Unit: "req", Latency: &sum, Usage: usage, Figures: cpuPer(usage, sum.Count, "redeem"),
		Notes: []string{fmt.Sprintf("%d slices of %s, after pgbench's and the service's in each turn; the captured statement, prepared as the service ran it, on rows of its own", slices, slice)}})
	return nil
}

func (s *pgScenarios) setupReason(needs ...string) string {
	if r := s.feat.missing(needs...); r != "" {
		return r
	}
	if s.setupOK != nil {
		return "setup failed: " + s.setupOK.Error()
	}
	return ""
}

// seedRun numbers seeded batches so their ids never collide.
var seedRun atomic.Int32

func (s *pgScenarios) seed(ctx context.Context, source string, clients, perClient int) (int, error) {
	run := int(seedRun.Add(1))
	return run, pgref.Seed(ctx, s.h.adm, source, run, clients, perClient)
}

// transitionSlice is how long pgbench and the REST redeems each run in
// their turn at each client count; they take as many turns as fill the
// loaded phase (-duration: 3 each at the default 6 s). The disk's flush
// rate and the VM's speed drift by the minute here; taking turns in
// 2-second slices puts the same drift on the reference and on the service,
// so their ratio holds from run to run (in contiguous 10-second blocks the
// 16-client ratio moved between 0.44 and 0.70 across runs of the same
// code).
const transitionSlice = 2 * time.Second

// transitionSlices is how many turns each side takes.
func (h *Harness) transitionSlices() int {
	return max(2, int((h.cfg.Duration+transitionSlice/2)/transitionSlice))
}

// transitions: pgbench running the captured redeem and redeem over REST,
// taking turns, at each client count. The service stays up while pgbench
// runs: the captured statement notifies nobody (notifications leave the
// service after commit), so an idle service has nothing to do for it.
func (s *pgScenarios) transitions(ctx context.Context) {
	h := s.h
	for _, c := range h.cfg.TransitionClients {
		refID, refName := fmt.Sprintf("ref-pgbench-c%d", c), fmt.Sprintf("pgbench: redeem SQL, %d conns", c)
		id, name := fmt.Sprintf("redeem-rest-c%d", c), fmt.Sprintf("redeem REST PG, %d clients", c)
		if reason := s.setupReason("reserve-voucher", "redeem-voucher"); reason != "" {
			h.notRun(refID, "references", refName, reason)
			h.notRun(id, "transitions", name, reason)
			continue
		}
		if err := guard(func() error { return s.transitionPair(ctx, c, refID, refName, id, name) }); err != nil {
			h.notRun(refID, "references", refName, "failed: "+err.Error())
			h.notRun(id, "transitions", name, "failed: "+err.Error())
		}
	}
}

// varLines lists the script's bind values, one -D argument a line.
func varLines(vars []pgref.Var) string {
	var b strings.Builder
	for _, v := range vars {
		b.WriteString(v.Arg())
		b.WriteByte('\n')
	}
	return b.String()
}

// pgbenchOptions runs the captured redeem the way the service ran it:
// prepared when every captured statement was a named prepared statement.
func (s *pgScenarios) pgbenchOptions(bin string, clients int, d time.Duration, script string, run int) pgref.Options {
	prepared := len(s.redeem) > 0
	for _, st := range s.redeem {
		prepared = prepared && st.Prepared
	}
	return pgref.Options{Bin: bin, Port: s.h.pg.Port(), DB: "voucherd", Clients: clients, Duration: d,
		Script: script, Vars: s.scriptVars, LogDir: filepath.Join(s.h.cfg.OutDir, "pgbench"), Run: run, Prepared: prepared}
}

func (s *pgScenarios) transitionPair(ctx context.Context, c int, refID, refName, id, name string) error {
	h := s.h
	scriptPath := filepath.Join(h.cfg.OutDir, "redeem.pgbench.sql")
	bin := filepath.Join(h.pg.BinDir(), "pgbench")
	slice, slices := transitionSlice, h.transitionSlices()
	pgbench := func(d time.Duration) (*pgref.Result, int, error) {
		per := int(float64(h.cfg.PgbenchMaxTPS)*d.Seconds()/float64(c)) + 100
		run, err := s.seed(ctx, s.clone, c, per)
		if err != nil {
			return nil, 0, err
		}
		res, err := pgref.Run(ctx, s.pgbenchOptions(bin, c, d, scriptPath, run))
		return res, run, err
	}
	total := int(float64(h.cfg.PgbenchMaxTPS)*(time.Duration(slices)*slice+h.cfg.Warmup+2*time.Second).Seconds()) + 1000
	restRun, err := s.seed(ctx, s.clone, 1, total)
	if err != nil {
		return err
	}
	var next atomic.Int64
	conns := newLeanConns(s.svc.Addr, c)
	defer conns.Close()
	// The redeem floor (floor.Serve's POST /vouchers/{id}/redeem): a bare
	// net/http handler running the captured statement on fresh rows of its
	// own, taking turns with pgbench and the service. It is what a REST
	// redeem costs this machine without the service: the HTTP exchange,
	// decoding the body, the one statement, encoding the row.
	var (
		floorOp   func(ctx context.Context, w int) error
		floorWhy  string
		floorRec  = stats.NewRecorder(0)
		floorTime time.Duration
		floorCPU  time.Duration
	)
	if s.redeemQ == nil {
		floorWhy = "the redeem was not captured as one statement"
	} else {
		var floorNext atomic.Int64
		floorRun, err := s.seed(ctx, s.clone, 1, total)
		if err != nil {
			return err
		}
		fl, err := s.startFloor(floor.Config{Redeem: *s.redeemQ}, "floor-redeem.json")
		if err != nil {
			floorWhy = "floor: " + err.Error()
		} else {
			defer fl.Stop()
			fconns := newLeanConns(fl.Addr, c)
			defer fconns.Close()
			floorOp = func(ctx context.Context, w int) error {
				n := int(floorNext.Add(1))
				if n > total {
					return errors.New("seeded vouchers exhausted: raise -pgbench-max-tps")
				}
				_, err := fconns.ok(ctx, w, http.MethodPost, "/vouchers/"+pgref.SeedID(floorRun, 0, n)+"/redeem", "", redeemBody)
				return err
			}
			defer func() {
				if err := s.floorResult(ctx, c, fl, floorRec, floorTime, floorCPU, floorRun, slices, slice); err != nil {
					h.notRun(fmt.Sprintf("ref-redeem-floor-c%d", c), "references", fmt.Sprintf("floor: net/http + the redeem statement, %d clients", c), err.Error())
				}
			}()
		}
	}
	if floorWhy != "" {
		defer h.notRun(fmt.Sprintf("ref-redeem-floor-c%d", c), "references", fmt.Sprintf("floor: net/http + the redeem statement, %d clients", c), floorWhy)
	}
	redeem := func(ctx context.Context, w int) error {
		n := int(next.Add(1))
		if n > total {
			return errors.New("seeded vouchers exhausted: raise -pgbench-max-tps")
		}
		return redeemed(conns.ok(ctx, w, http.MethodPost, "/api/v1/vouchers/"+pgref.SeedID(restRun, 0, n)+"/redeem-voucher", s.payee, redeemBody))
	}
	if h.cfg.Warmup > 0 {
		if _, _, err := pgbench(h.cfg.Warmup.Round(time.Second) + time.Second/2); err != nil {
			return err
		}
		warm(ctx, c, h.cfg.Warmup, redeem)
		if floorOp != nil {
			warm(ctx, c, h.cfg.Warmup, floorOp)
		}
	}

	var (
		refSamples           []time.Duration
		refProcessed, refBad int64
		refTime              float64 // seconds of pgbench work (processed / tps per slice)
		refBusy, refTicks    uint64
		rec                  = stats.NewRecorder(0)
		elapsed, cpu         time.Duration
		busy, ticks          uint64
	)
	prof := s.profile(id)
	smp := sampler(s.svc, true)
	for n := 0; n < slices && ctx.Err() == nil; n++ {
		b0, t0, _ := proc.MachineCPU()
		res, run, err := pgbench(slice)
		if err != nil {
			return err
		}
		b1, t1, _ := proc.MachineCPU()
		refBusy, refTicks = refBusy+b1-b0, refTicks+t1-t0
		if res.Latency.Count != res.Processed {
			return fmt.Errorf("pgbench's per-transaction logs hold %d transactions, its summary %d", res.Latency.Count, res.Processed)
		}
		changed, err := pgref.Changed(ctx, h.adm, run, "RESERVED")
		if err != nil {
			return err
		}
		// A transaction in flight when -T runs out may commit uncounted.
		if changed < res.Processed || changed > res.Processed+int64(c) {
			return fmt.Errorf("pgbench processed %d transactions but %d vouchers changed state (seed exhausted or the captured UPDATE did not apply): not a valid reference", res.Processed, changed)
		}
		refSamples = append(refSamples, res.Samples...)
		refProcessed += res.Processed
		refBad += res.Failed
		if res.TPS > 0 {
			refTime += float64(res.Processed) / res.TPS
		}

		c0, _ := proc.CPU(s.svc.Pid())
		b0, t0, _ = proc.MachineCPU()
		elapsed += runLoop(ctx, c, slice, redeem, rec)
		c1, _ := proc.CPU(s.svc.Pid())
		b1, t1, _ = proc.MachineCPU()
		cpu += c1 - c0
		busy, ticks = busy+b1-b0, ticks+t1-t0

		if floorOp != nil {
			f0, _ := proc.CPU(s.floorPid)
			floorTime += runLoop(ctx, c, slice, floorOp, floorRec)
			f1, _ := proc.CPU(s.floorPid)
			floorCPU += f1 - f0
		}
	}
	usage := stopSampler(smp, s.svc, true)
	prof()

	refDur := time.Duration(refTime * float64(time.Second))
	ref := stats.Summarize(refSamples, refBad, refDur, nil)
	if refTime > 0 {
		ref.PerSec = float64(refProcessed) / refTime
	}
	h.add(&report.Result{ID: refID, Group: "references", Name: refName, Unit: "tx", Latency: &ref,
		Figures: []report.Figure{{Name: "rows transitioned (checked per slice against its transactions)", Value: float64(refProcessed), Unit: "rows"}, busyFigure(busyShare(refBusy, refTicks))},
		Notes: []string{fmt.Sprintf("pgbench -n -M %s -c %d -j %d -T %d -f redeem.pgbench.sql -D <each line of redeem.pgbench.vars>, %d times, taking turns with the REST redeems (script and its bind values below, per-client vouchers cloned from a reserved one)",
			s.pgbenchOptions(bin, c, slice, scriptPath, 0).Mode(), c, c, int(slice.Seconds()), slices), s.script, varLines(s.scriptVars)}})

	sum := rec.Summary(elapsed)
	if usage != nil {
		usage.CPU = cpu // the REST slices' own, not pgbench's
	}
	h.add(&report.Result{ID: id, Group: "transitions", Name: name, Unit: "req", Latency: &sum, Usage: usage,
		Figures: append(cpuPer(usage, sum.Count, "redeem"), busyFigure(busyShare(busy, ticks)))})
	return nil
}

func busyShare(busy, ticks uint64) float64 {
	if ticks == 0 {
		return -1
	}
	return float64(busy) / float64(ticks)
}

// reads: the floor, REST and GraphQL reads of one redeemed voucher,
// unloaded (one client) and loaded, interleaved so drift hits all three.
func (s *pgScenarios) reads(ctx context.Context) {
	h := s.h
	lc := h.cfg.ReadClients
	names := []struct{ id, name string }{
		{"ref-read-floor-unloaded", "floor: net/http + same PK read, 1 client"},
		{"read-rest-unloaded", "GET voucher REST, 1 client"},
		{"read-graphql-unloaded", "voucher(id:) GraphQL, 1 client"},
		{fmt.Sprintf("ref-read-floor-c%d", lc), fmt.Sprintf("floor: net/http + same PK read, %d clients", lc)},
		{fmt.Sprintf("read-rest-c%d", lc), fmt.Sprintf("GET voucher REST, %d clients", lc)},
		{fmt.Sprintf("read-graphql-c%d", lc), fmt.Sprintf("voucher(id:) GraphQL, %d clients", lc)},
	}
	reason := s.setupReason("reserve-voucher", "redeem-voucher", "GET voucher")
	gqlReason := s.setupReason("reserve-voucher", "redeem-voucher", "GraphQL voucher(id:)")
	if reason == "" && s.read == nil {
		reason = "the GET voucher read could not be captured"
	}
	var fl *Process
	if reason == "" {
		err := guard(func() error {
			addr, err := FreeAddr()
			if err != nil {
				return err
			}
			cfgPath := filepath.Join(h.cfg.OutDir, "floor.json")
			b, _ := json.Marshal(floor.Config{Addr: addr, DSN: h.dsn, MaxConns: 32, Read: *s.read})
			if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
				return err
			}
			fl, err = StartProcess("floor", h.cfg.Self, []string{"floor", "-config", cfgPath}, nil, addr, "/count")
			return err
		})
		if err != nil {
			reason = "floor: " + err.Error()
		}
	}
	if fl != nil {
		defer fl.Stop()
	}
	// Each target has a connection per worker (the lean client: see
	// leanConn); the floor and the service are read the same way.
	floorConns := leanConns(nil)
	if fl != nil {
		floorConns = newLeanConns(fl.Addr, max(lc, 1))
		defer floorConns.Close()
	}
	restConns, gqlConns := newLeanConns(s.svc.Addr, max(lc, 1)), newLeanConns(s.svc.Addr, max(lc, 1))
	defer restConns.Close()
	defer gqlConns.Close()
	want := []byte(s.readID)
	check := func(b []byte, err error) error {
		if err != nil {
			return err
		}
		if !bytes.Contains(b, want) {
			return fmt.Errorf("answer does not name the voucher: %.200s", b)
		}
		return nil
	}
	floorOp := func(ctx context.Context, w int) error {
		return check(floorConns.ok(ctx, w, http.MethodGet, "/vouchers/"+s.readID, "", nil))
	}
	restOp := func(ctx context.Context, w int) error {
		return check(restConns.ok(ctx, w, http.MethodGet, "/api/v1/vouchers/"+s.readID, s.payee, nil))
	}
	gqlBody := mustJSON(map[string]any{"query": voucherQuery, "variables": map[string]any{"id": s.readID}})
	gqlOp := func(ctx context.Context, w int) error {
		b, err := gqlConns.ok(ctx, w, http.MethodPost, "/graphql", s.payee, gqlBody)
		if err == nil && bytes.Contains(b, []byte(`"errors"`)) {
			return fmt.Errorf("graphql errors: %.300s", b)
		}
		return check(b, err)
	}
	targets := []readTarget{
		{names[0].id, names[0].name, floorOp, fl, false},
		{names[1].id, names[1].name, restOp, s.svc, true},
		{names[2].id, names[2].name, gqlOp, s.svc, true},
	}
	for i, phase := range []struct {
		workers int
		d       time.Duration
		tag     string
	}{{1, h.cfg.Unloaded, "unloaded"}, {lc, h.cfg.Duration, fmt.Sprintf("c%d", lc)}} {
		s.readPhase(ctx, phase.workers, phase.d, phase.tag, targets, func(j int) (string, string, string, string) {
			id, name := names[i*3+j].id, names[i*3+j].name
			group := "read"
			if j == 0 {
				group = "references"
			}
			r := reason
			if j == 2 && r == "" {
				r = gqlReason
			}
			return id, name, group, r
		})
	}
}

// readSlices is how many slices each read phase is cut into. The floor,
// REST and GraphQL take turns slice by slice (floor, REST, GraphQL, floor,
// ...), so a change in how fast the machine is (another tenant, a
// checkpoint) falls on all three alike instead of on whichever ran then,
// and the ratios between them hold from run to run.
const readSlices = 10

// readPhase measures the targets at workers clients for d each, in
// interleaved slices. Each target's CPU time and the machine's busy share
// are summed over its own slices only.
func (s *pgScenarios) readPhase(ctx context.Context, workers int, d time.Duration, tag string, targets []readTarget, label func(j int) (id, name, group, reason string)) {
	h := s.h
	type acc struct {
		id, name, group string
		rec             *stats.Recorder
		elapsed, cpu    time.Duration
		busy, ticks     uint64
		ok              bool
	}
	accs := make([]*acc, len(targets))
	for j, t := range targets {
		id, name, group, reason := label(j)
		a := &acc{id: id, name: name, group: group, rec: stats.NewRecorder(0)}
		accs[j] = a
		if reason != "" {
			h.notRun(id, group, name, reason)
			continue
		}
		if err := guard(func() error {
			if err := t.op(ctx, 0); err != nil {
				return err
			}
			warm(ctx, workers, h.cfg.Warmup, t.op)
			return nil
		}); err != nil {
			h.notRun(id, group, name, "failed: "+err.Error())
			continue
		}
		a.ok = true
	}
	// One CPU profile of the service for the whole phase (REST and GraphQL
	// slices alike) when -profile is on.
	prof := s.profile("read-" + tag)
	type sampled struct {
		smp     *proc.Sampler
		metrics bool
	}
	samplers := map[*Process]sampled{}
	for j, t := range targets {
		if _, ok := samplers[t.proc]; !ok && accs[j].ok {
			samplers[t.proc] = sampled{sampler(t.proc, t.metrics), t.metrics}
		}
	}
	slice := d / readSlices
	for n := 0; n < readSlices && ctx.Err() == nil; n++ {
		for j, t := range targets {
			a := accs[j]
			if !a.ok {
				continue
			}
			c0, _ := proc.CPU(t.proc.Pid())
			b0, t0, _ := proc.MachineCPU()
			a.elapsed += runLoop(ctx, workers, slice, t.op, a.rec)
			c1, _ := proc.CPU(t.proc.Pid())
			b1, t1, _ := proc.MachineCPU()
			a.cpu += c1 - c0
			a.busy += b1 - b0
			a.ticks += t1 - t0
		}
	}
	usage := map[*Process]*proc.Usage{}
	for p, x := range samplers {
		usage[p] = stopSampler(x.smp, p, x.metrics)
	}
	prof()
	for j, t := range targets {
		a := accs[j]
		if !a.ok {
			continue
		}
		sum := a.rec.Summary(a.elapsed)
		var u *proc.Usage
		if pu := usage[t.proc]; pu != nil {
			cp := *pu // peaks are the process's over the phase; CPU is this target's own
			cp.CPU = a.cpu
			u = &cp
		}
		share := -1.0
		if a.ticks > 0 {
			share = float64(a.busy) / float64(a.ticks)
		}
		res := &report.Result{ID: a.id, Group: a.group, Name: a.name, Unit: "req", Latency: &sum, Usage: u,
			Figures: append(cpuPer(u, sum.Count, "request"), busyFigure(share))}
		res.Notes = append(res.Notes, fmt.Sprintf("%d slices of %s, taking turns with the other read targets", readSlices, slice))
		if t.proc != s.svc && s.read != nil { // the floor
			res.Notes = append(res.Notes, "captured SQL: "+s.read.SQL)
		}
		h.add(res)
	}
}

// readTarget is one server the read phases measure.
type readTarget struct {
	id, name string
	op       Op
	proc     *Process
	metrics  bool
}

// warm runs op unrecorded, so caches, pools and connections are warm.
func warm(ctx context.Context, workers int, d time.Duration, op Op) {
	if d > 0 {
		runLoop(ctx, workers, d, op, nil)
	}
}

// cpuPer is the measured process's CPU time per operation: unlike a rate,
// it hardly depends on what else the machine was doing.
func cpuPer(u *proc.Usage, n int64, what string) []report.Figure {
	if u == nil || n == 0 {
		return nil
	}
	return []report.Figure{{Name: "process CPU per " + what, Value: float64(u.CPU) / float64(n) / float64(time.Microsecond), Unit: "µs"}}
}

// busyFigure is how busy the machine's CPUs were during a phase: near 100%
// the figures measure the machine as much as the process.
func busyFigure(share float64) report.Figure {
	return report.Figure{Name: "machine CPU busy (all processes, both CPUs)", Value: 100 * share, Unit: "%"}
}

// voucherQuery selects what GET voucher returns for a redeemed SIMPLE
// voucher, so both doors do the same work.
const voucherQuery = `query($id: ID!) { voucher(id: $id) { id code status type expectedPayment { id network currency currencyAddress amount wallet { address } } expiresAt createdAt updatedAt } }`

// profile captures a CPU profile of the service for the scenario's
// duration and an allocation profile at its end, when -profile is on.
func (s *pgScenarios) profile(id string) func() { return s.h.profile(s.pprof, id) }

func (h *Harness) profile(pprofAddr, id string) func() {
	if pprofAddr == "" || !h.cfg.Profile {
		return func() {}
	}
	secs := int((h.cfg.Warmup + h.cfg.Duration).Seconds())
	done := make(chan struct{})
	get := func(path, file string) {
		resp, err := http.Get("http://" + pprofAddr + path)
		if err != nil {
			h.log.Warn("profile", "err", err)
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			h.log.Warn("profile", "path", path, "status", resp.Status)
			return
		}
		_ = os.MkdirAll(filepath.Join(h.cfg.OutDir, "profiles"), 0o755)
		_ = os.WriteFile(filepath.Join(h.cfg.OutDir, "profiles", file), buf.Bytes(), 0o644)
	}
	go func() {
		defer close(done)
		get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), id+".cpu.pprof")
	}()
	return func() {
		<-done
		get("/debug/pprof/allocs", id+".allocs.pprof")
	}
}
