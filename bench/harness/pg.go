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
	"github.com/voucherd/voucherd/bench/report"
)

// pgScenarios is everything that runs against the service on PostgreSQL.
type pgScenarios struct {
	h     *Harness
	svc   *Process
	pprof string
	api   *API
	feat  features

	payer   Identity
	user    Identity
	sess    Session
	payee   string // resource token of sess
	clone   string // a RESERVED voucher of sess: the row seeds are cloned from
	readID  string // a REDEEMED voucher the read scenarios fetch
	redeem  []pgref.Statement
	script  string
	read    *floor.ReadQuery
	setupOK error
	biz     string
	bizErr  error
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
	}
	if h.want("read") {
		s.reads(ctx)
	}
	if h.want("lifecycle") {
		h.lifecycle(ctx, "lifecycle-postgres", "lifecycle on PostgreSQL", s.api, s.svc, s.pprof, s.feat)
	}
	if h.want("webhooks") {
		s.webhooks(ctx)
	}
	if h.want("subscriptions") {
		s.commitToClient(ctx)
		s.fanout(ctx)
		s.idle(ctx)
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
	s.script, err = pgref.Script(s.redeem, capture.ID, func(q string) ([]string, error) { return pgref.ParamTypes(ctx, conn, q) })
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.h.cfg.OutDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.h.cfg.OutDir, "redeem.pgbench.sql"), []byte(s.script), 0o644); err != nil {
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
		q := &floor.ReadQuery{SQL: st.SQL, Params: st.Params}
		for i, p := range st.Params {
			if p != nil && *p == read.ID {
				q.IDParam = i
			}
		}
		s.read = q
	}
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

// transitions: pgbench running the captured redeem at each client count,
// with the service stopped (its LISTEN side would otherwise do work for
// every NOTIFY), then redeem over REST at the same counts.
func (s *pgScenarios) transitions(ctx context.Context) {
	h := s.h
	clients := h.cfg.TransitionClients
	if reason := s.setupReason("reserve-voucher", "redeem-voucher"); reason != "" {
		for _, c := range clients {
			h.notRun(fmt.Sprintf("ref-pgbench-c%d", c), "references", fmt.Sprintf("pgbench: redeem SQL, %d conns", c), reason)
			h.notRun(fmt.Sprintf("redeem-rest-c%d", c), "transitions", fmt.Sprintf("redeem REST PG, %d clients", c), reason)
		}
		return
	}
	s.stop()
	scriptPath := filepath.Join(h.cfg.OutDir, "redeem.pgbench.sql")
	bin := filepath.Join(h.pg.BinDir(), "pgbench")
	for _, c := range clients {
		id := fmt.Sprintf("ref-pgbench-c%d", c)
		name := fmt.Sprintf("pgbench: redeem SQL, %d conns", c)
		err := guard(func() error {
			per := int(float64(h.cfg.PgbenchMaxTPS)*h.cfg.Duration.Seconds()/float64(c)) + 100
			if h.cfg.Warmup > 0 {
				wper := int(float64(h.cfg.PgbenchMaxTPS)*h.cfg.Warmup.Seconds()/float64(c)) + 100
				run, err := s.seed(ctx, s.clone, c, wper)
				if err != nil {
					return err
				}
				if _, err := pgref.Run(ctx, pgref.Options{Bin: bin, Port: h.pg.Port(), DB: "voucherd", Clients: c,
					Duration: h.cfg.Warmup, Script: scriptPath, LogDir: filepath.Join(h.cfg.OutDir, "pgbench"), Run: run}); err != nil {
					return err
				}
			}
			run, err := s.seed(ctx, s.clone, c, per)
			if err != nil {
				return err
			}
			res, err := pgref.Run(ctx, pgref.Options{Bin: bin, Port: h.pg.Port(), DB: "voucherd", Clients: c,
				Duration: h.cfg.Duration, Script: scriptPath, LogDir: filepath.Join(h.cfg.OutDir, "pgbench"), Run: run})
			if err != nil {
				return err
			}
			changed, err := pgref.Changed(ctx, h.adm, run, "RESERVED")
			if err != nil {
				return err
			}
			r := &report.Result{ID: id, Group: "references", Name: name, Unit: "tx", Latency: &res.Latency,
				Figures: []report.Figure{{Name: "rows transitioned (must equal transactions)", Value: float64(changed), Unit: "rows"}},
				Notes:   []string{fmt.Sprintf("pgbench -n -M extended -c %d -j %d -T %d -f redeem.pgbench.sql (script below, per-client vouchers cloned from a reserved one)", c, c, int(h.cfg.Duration.Seconds())), s.script}}
			// A transaction in flight when -T runs out may commit uncounted.
			if changed < res.Processed || changed > res.Processed+int64(c) {
				return fmt.Errorf("pgbench processed %d transactions but %d vouchers changed state (seed exhausted or the captured UPDATE did not apply): not a valid reference", res.Processed, changed)
			}
			h.add(r)
			return nil
		})
		if err != nil {
			h.notRun(id, "references", name, "failed: "+err.Error())
		}
	}
	if err := s.start(ctx); err != nil {
		h.notRun("service-restart", "setup", "voucherd restart after pgbench", err.Error())
		return
	}
	for _, c := range clients {
		id := fmt.Sprintf("redeem-rest-c%d", c)
		name := fmt.Sprintf("redeem REST PG, %d clients", c)
		err := guard(func() error {
			total := int(float64(h.cfg.PgbenchMaxTPS)*(h.cfg.Duration+h.cfg.Warmup).Seconds()) + 1000
			run, err := s.seed(ctx, s.clone, 1, total)
			if err != nil {
				return err
			}
			var next atomic.Int64
			prof := s.profile(id)
			smp := sampler(s.svc, true)
			sum := ClosedLoop(ctx, c, h.cfg.Warmup, h.cfg.Duration, func(ctx context.Context, _ int) error {
				n := int(next.Add(1))
				if n > total {
					return errors.New("seeded vouchers exhausted: raise -pgbench-max-tps")
				}
				_, err := s.api.Redeem(ctx, s.payee, pgref.SeedID(run, 0, n))
				return err
			})
			usage := stopSampler(smp, s.svc, true)
			prof()
			h.add(&report.Result{ID: id, Group: "transitions", Name: name, Unit: "req", Latency: &sum, Usage: usage})
			return nil
		})
		if err != nil {
			h.notRun(id, "transitions", name, "failed: "+err.Error())
		}
	}
}

// reads: the floor, REST and GraphQL reads of one redeemed voucher,
// unloaded (one client) and loaded, interleaved so drift hits all three.
func (s *pgScenarios) reads(ctx context.Context) {
	h := s.h
	lc := h.cfg.ReadClients
	type target struct {
		id, name string
		op       Op
		proc     *Process
		metrics  bool
	}
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
	floorAPI := (*API)(nil)
	if fl != nil {
		floorAPI = NewAPI(fl.URL, 256)
	}
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
	floorOp := func(ctx context.Context, _ int) error {
		return check(floorAPI.Raw(ctx, http.MethodGet, "/vouchers/"+s.readID, "", nil))
	}
	restOp := func(ctx context.Context, _ int) error {
		return check(s.api.Raw(ctx, http.MethodGet, "/api/v1/vouchers/"+s.readID, s.payee, nil))
	}
	gqlBody := mustJSON(map[string]any{"query": voucherQuery, "variables": map[string]any{"id": s.readID}})
	gqlOp := func(ctx context.Context, _ int) error {
		b, err := s.api.Raw(ctx, http.MethodPost, "/graphql", s.payee, gqlBody)
		if err == nil && bytes.Contains(b, []byte(`"errors"`)) {
			return fmt.Errorf("graphql errors: %.300s", b)
		}
		return check(b, err)
	}
	targets := []target{
		{names[0].id, names[0].name, floorOp, fl, false},
		{names[1].id, names[1].name, restOp, s.svc, true},
		{names[2].id, names[2].name, gqlOp, s.svc, true},
	}
	for i, phase := range []struct {
		workers int
		d       time.Duration
	}{{1, h.cfg.Unloaded}, {lc, h.cfg.Duration}} {
		for j, t := range targets {
			id, name := names[i*3+j].id, names[i*3+j].name
			group := "read"
			if j == 0 {
				group = "references"
			}
			r := reason
			if j == 2 && r == "" {
				r = gqlReason
			}
			if r != "" {
				h.notRun(id, group, name, r)
				continue
			}
			err := guard(func() error {
				if err := t.op(ctx, 0); err != nil {
					return err
				}
				prof := func() {}
				if t.metrics {
					prof = s.profile(id)
				}
				smp := sampler(t.proc, t.metrics)
				sum := ClosedLoop(ctx, phase.workers, h.cfg.Warmup, phase.d, t.op)
				usage := stopSampler(smp, t.proc, t.metrics)
				prof()
				res := &report.Result{ID: id, Group: group, Name: name, Unit: "req", Latency: &sum, Usage: usage}
				if j == 0 {
					res.Notes = []string{"captured SQL: " + s.read.SQL}
				}
				h.add(res)
				return nil
			})
			if err != nil {
				h.notRun(id, group, name, "failed: "+err.Error())
			}
		}
	}
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

