// Package harness is `make bench`: it starts a throwaway durable
// PostgreSQL and the real voucherd binary, measures the service's hot paths
// next to references measured in the same run on the same machine (pgbench
// running the service's own redeem statements, a bare net/http read, a bare
// websocket fan-out), and reports every figure with its reference, ratio and
// target. A scenario whose feature the service does not have yet is
// reported as not run, with the reason; nothing is ever estimated.
package harness

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/voucherd/voucherd/bench/pgref"
	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/testsupport/testpg"
)

// Config is the bench's settings (flags of cmd/voucherbench).
type Config struct {
	Voucherd string // the service binary
	Self     string // this binary, for the floor child process
	OutDir   string
	Only     map[string]bool // scenario groups to run; empty means all

	Warmup   time.Duration
	Duration time.Duration // each loaded phase
	Unloaded time.Duration // each single-client latency phase

	TransitionClients []int
	ReadClients       int
	LifecycleClients  int
	PgbenchMaxTPS     int

	IdleSubs int
	C2CRate  float64
	// C2CDuration is how long each side of the two-replica
	// commit→subscriber phase runs in all at C2CRate (in c2cSlice turns;
	// the service and the HTTP floor, interleaved at half the rate each,
	// run twice as long together, for as many changes): its p99s are the
	// targets' ratios, and a tail of 1 % needs enough changes to be more
	// than a few bursts (0: Duration).
	C2CDuration time.Duration
	// C2CSlice is the length of each turn (0: c2cSlice).
	C2CSlice time.Duration
	// C2CTurns has the service and the HTTP floor take whole turns in
	// the two-replica commit→subscriber phase instead of interleaving
	// their negotiations on one schedule (interleave).
	C2CTurns     bool
	FanoutSubs   int
	FanoutEvents int
	WebhookRate  float64
	WebhookBurst int

	// SettlementTest and SweepTest are the compiled test binaries of
	// internal/settlement and cmd/voucherd (go test -c), whose benchmarks
	// the settlement group runs; RepoDir is the repository (their packages'
	// directories are their working directories).
	SettlementTest, SweepTest, RepoDir string

	// Profile captures CPU and allocation profiles of the service for every
	// scenario (VOUCHER_PPROF_ADDR must be supported by the binary).
	Profile bool

	Log *slog.Logger
	Out io.Writer
}

// Harness is one bench run.
type Harness struct {
	cfg  Config
	log  *slog.Logger
	run  *report.Run
	pg   *testpg.Cluster
	dsn  string
	adm  *sql.DB
	fdLm uint64
}

func (h *Harness) want(group string) bool { return len(h.cfg.Only) == 0 || h.cfg.Only[group] }

// Run runs the whole bench and writes the report.
func Run(ctx context.Context, cfg Config) (*report.Run, error) {
	h := &Harness{cfg: cfg, log: cfg.Log, run: &report.Run{StartedAt: time.Now().UTC()}}
	var err error
	if h.fdLm, err = proc.RaiseFileLimit(); err != nil {
		return nil, fmt.Errorf("raise file limit: %w", err)
	}
	h.run.Machine = machine(h.fdLm)
	h.run.Settings = []report.Figure{
		{Name: "loaded phase", Value: cfg.Duration.Seconds(), Unit: "s"},
		{Name: "unloaded phase", Value: cfg.Unloaded.Seconds(), Unit: "s"},
		{Name: "warm-up", Value: cfg.Warmup.Seconds(), Unit: "s"},
	}
	start := time.Now()

	h.log.Info("starting PostgreSQL (durable: fsync and synchronous_commit on)")
	opts := []testpg.Option{testpg.WithDurable(), testpg.WithMaxConnections(300)}
	for _, s := range pgref.RequiredSettings {
		opts = append(opts, testpg.WithSetting(s[0], s[1]))
	}
	if h.pg, err = testpg.Start(opts...); err != nil {
		return nil, err
	}
	defer h.pg.Stop()
	if h.dsn, err = h.pg.CreateDatabase(ctx, "voucherd"); err != nil {
		return nil, err
	}
	if h.adm, err = sql.Open("postgres", h.dsn); err != nil {
		return nil, err
	}
	defer h.adm.Close()
	var ver string
	if err := h.adm.QueryRowContext(ctx, "SHOW server_version").Scan(&ver); err == nil {
		h.run.Machine.PostgreSQL = "PostgreSQL " + ver
	}

	h.diskProbe(ctx, h.pg.Dir(), 5*time.Second)
	pgRun := &pgScenarios{h: h}
	pgRun.all(ctx)
	if h.want("lifecycle") || h.want("subscriptions") {
		h.sqlite(ctx)
	}
	if h.want("settlement") {
		h.settlement(ctx)
	}

	h.run.Elapsed = time.Since(start)
	h.run.Checks = checks(h.run)
	if err := h.run.WriteJSON(filepath.Join(cfg.OutDir, "results.json")); err != nil {
		return h.run, err
	}
	if err := h.run.WriteHTML(filepath.Join(cfg.OutDir, "report.html")); err != nil {
		return h.run, err
	}
	h.run.WriteTable(cfg.Out)
	fmt.Fprintf(cfg.Out, "\nwrote %s and %s (%s)\n", filepath.Join(cfg.OutDir, "results.json"),
		filepath.Join(cfg.OutDir, "report.html"), h.run.Elapsed.Round(time.Second))
	return h.run, nil
}

// add records a result.
func (h *Harness) add(r *report.Result) *report.Result {
	h.run.Results = append(h.run.Results, r)
	if r.NotRun != "" {
		h.log.Warn("scenario not run", "scenario", r.Name, "reason", r.NotRun)
	} else if r.Latency != nil {
		h.log.Info("scenario done", "scenario", r.Name, "count", r.Latency.Count, "rate", fmt.Sprintf("%.1f/s", r.Latency.PerSec),
			"p50", r.Latency.P50, "p99", r.Latency.P99, "errors", r.Latency.Errors)
	} else {
		h.log.Info("scenario done", "scenario", r.Name)
	}
	return r
}

// notRun records a scenario that could not be measured.
func (h *Harness) notRun(id, group, name, reason string) *report.Result {
	return h.add(&report.Result{ID: id, Group: group, Name: name, NotRun: reason})
}

// guard runs fn, turning a panic into an error so one broken scenario does
// not lose the others' figures.
func guard(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	return fn()
}

// serviceEnv is the service's configuration for the bench: as shipped,
// except rate limits off (a load test would only measure 429s), logs at warn
// (an access log line per request is not what is being measured), private
// webhook targets allowed (the receiver is on loopback), and lifetimes long
// enough that nothing the bench set up expires mid-run.
func (h *Harness) serviceEnv(addr, dbURL, pprofAddr string) map[string]string {
	env := map[string]string{
		"VOUCHER_ADDR":                  addr,
		"VOUCHER_DATABASE_URL":          dbURL,
		"VOUCHER_RATE_LIMITS":           "off",
		"VOUCHER_LOG_LEVEL":             "warn",
		"VOUCHER_WEBHOOK_ALLOW_PRIVATE": "true",
		"VOUCHER_SESSION_TTL":           "1h",
		"VOUCHER_VOUCHER_TTL":           "1h",
		"VOUCHER_RESOURCE_TOKEN_TTL":    "1h",
	}
	if pprofAddr != "" {
		env["VOUCHER_PPROF_ADDR"] = pprofAddr
	}
	return env
}

// startService starts voucherd on dbURL. A free port found by FreeAddr
// is closed again before the service binds it, and the ephemeral range it
// comes from is the one the bench's own outgoing connections (thousands of
// them) draw from: a start that lost its port that way is tried again on
// new ports (seen once: the second replica's pprof port, mid-run).
// extra adds settings to serviceEnv's (a replica's VOUCHER_PUBSUB_URL).
func (h *Harness) startService(dbURL string, extra ...map[string]string) (*Process, string, error) {
	var err error
	for range 3 {
		var p *Process
		var pprofAddr string
		p, pprofAddr, err = h.startServiceOnce(dbURL, extra...)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return p, pprofAddr, err
		}
		h.log.Warn("a port the service was given was taken before it bound it; starting it again", "err", err)
	}
	return nil, "", err
}

func (h *Harness) startServiceOnce(dbURL string, extra ...map[string]string) (*Process, string, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, "", err
	}
	// pprof is always on (its own loopback listener, idle unless asked):
	// the idle-subscription scenario forces garbage collections through it
	// to compare live heaps, and -profile records profiles.
	pprofAddr, err := FreeAddr()
	if err != nil {
		return nil, "", err
	}
	env := h.serviceEnv(addr, dbURL, pprofAddr)
	for _, e := range extra {
		for k, v := range e {
			env[k] = v
		}
	}
	p, err := StartProcess("voucherd", h.cfg.Voucherd, nil, env, addr, "/readyz")
	return p, pprofAddr, err
}

func machine(fdLimit uint64) report.Machine {
	m := report.Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), FDLimit: fdLimit}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
			}
		}
		m.MemoryMiB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// sampler starts sampling a process (service: with /metrics).
func sampler(p *Process, metrics bool) *proc.Sampler {
	url := ""
	if metrics {
		url = p.URL + "/metrics"
	}
	s, err := proc.StartSampler(p.Pid(), http.DefaultClient, url, time.Second)
	if err != nil {
		return nil
	}
	return s
}

func stopSampler(s *proc.Sampler, p *Process, metrics bool) *proc.Usage {
	if s == nil {
		return nil
	}
	url := ""
	if metrics {
		url = p.URL + "/metrics"
	}
	u := s.Stop(p.Pid(), http.DefaultClient, url)
	return &u
}

// collect forces a garbage collection in the service (through pprof's
// heap endpoint with gc=1) and, when file is not empty, keeps the heap
// profile taken right after it. It reports whether it worked (a binary
// without VOUCHER_PPROF_ADDR support has no such endpoint).
func (h *Harness) collect(pprofAddr, file string) bool {
	if pprofAddr == "" {
		return false
	}
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	if file != "" {
		dir := filepath.Join(h.cfg.OutDir, "profiles")
		if os.MkdirAll(dir, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(dir, file), b, 0o644)
		}
	}
	return true
}
