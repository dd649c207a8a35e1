// Command voucherbench is `make bench`: it measures the voucherd binary on
// a throwaway durable PostgreSQL (and on SQLite for the lifecycle) next to
// references measured in the same run — pgbench running the service's own
// redeem statements, a bare net/http handler doing the same primary-key
// read, a bare websocket server fanning out one frame — and prints every
// figure with its reference, ratio and target, writing bench/out/results.json
// and bench/out/report.html. See docs/performance.md.
//
// "voucherbench floor -config FILE" is the floor servers' child process;
// "voucherbench nats -addr A -monitor M" the scaling group's NATS server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/voucherd/voucherd/bench/floor"
	"github.com/voucherd/voucherd/bench/harness"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		err = runFloor(os.Args[2:], log)
	} else if len(os.Args) > 1 && os.Args[1] == "nats" {
		err = runNATS(os.Args[2:])
	} else {
		err = runBench(os.Args[1:], log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "voucherbench:", err)
		os.Exit(1)
	}
}

func runFloor(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	path := fs.String("config", "", "floor configuration (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var cfg floor.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return floor.Serve(ctx, cfg, log)
}

// runNATS is the scaling group's NATS server, in a process of its own.
func runNATS(args []string) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4222", "client address")
	monitor := fs.String("monitor", "127.0.0.1:8222", "monitoring address (/healthz)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return harness.ServeNATS(ctx, *addr, *monitor)
}

func runBench(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("voucherbench", flag.ContinueOnError)
	var (
		bin       = fs.String("voucherd", "bin/voucherd", "the service binary to measure")
		out       = fs.String("out", "bench/out", "where results.json, report.html, scripts and profiles go")
		duration  = fs.Duration("duration", 6*time.Second, "length of each loaded phase")
		unloaded  = fs.Duration("unloaded", 3*time.Second, "length of each single-client latency phase")
		warmup    = fs.Duration("warmup", time.Second, "unrecorded warm-up before each phase")
		clients   = fs.String("clients", "16,64", "client counts for transitions (and pgbench connections)")
		readC     = fs.Int("read-clients", 16, "clients for the loaded read phase")
		lifeC     = fs.Int("lifecycle-clients", 16, "clients for the lifecycle")
		maxTPS    = fs.Int("pgbench-max-tps", 15000, "upper bound on transition rate, for sizing pre-created vouchers")
		idle      = fs.Int("idle-subs", 20000, "idle subscriptions")
		c2cRate   = fs.Float64("c2c-rate", 1000, "transitions per second for commit-to-subscriber latency")
		c2cSlice  = fs.Duration("c2c-slice", 0, "length of each turn of the two-replica commit-to-subscriber phase (0: 250ms)")
		c2cTurns  = fs.Bool("c2c-turns", false, "the service and the HTTP floor take whole turns in the two-replica commit-to-subscriber phase, as until the eighth pass of issue 25 (default: their negotiations interleave, one schedule, each side half the rate)")
		c2cDur    = fs.Duration("c2c-duration", 12*time.Second, "how long each side of the two-replica commit-to-subscriber phase runs at the full rate (service, HTTP floor, NOTIFY floor), in turns of -c2c-slice; the service and the HTTP floor, interleaved at half the rate each, run twice as long together")
		fanSubs   = fs.Int("fanout-subs", 5000, "subscribers on one business")
		fanEvents = fs.Int("fanout-events", 20, "events fanned out to them")
		whRate    = fs.Float64("webhook-rate", 100, "business redeems per second for webhook latency")
		whBurst   = fs.Int("webhook-burst", 2000, "business redeems in the webhook throughput burst")
		only      = fs.String("only", "", "comma-separated groups: transitions,read,hostile,lifecycle,webhooks,apikeys,subscriptions,scaling,settlement (default all)")
		settleT   = fs.String("settlement-test", "", "internal/settlement's compiled tests (go test -c), for the settlement group (make bench builds bin/settlement.test)")
		sweepT    = fs.String("sweep-test", "", "cmd/voucherd's compiled tests (go test -c), for the settlement group's sweeps (make bench builds bin/voucherd.test)")
		profile   = fs.Bool("profile", false, "capture pprof CPU and allocation profiles of the service per scenario (needs VOUCHER_PPROF_ADDR support)")
		timeout   = fs.Duration("timeout", 15*time.Minute, "give up after this long")
		selfProf  = fs.String("cpuprofile", "", "write a CPU profile of the load generator itself to this file (what the harness costs the machine)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cs []int
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-clients: %q is not a positive number", s)
		}
		cs = append(cs, n)
	}
	groups := map[string]bool{}
	for _, g := range strings.Split(*only, ",") {
		if g = strings.TrimSpace(g); g != "" {
			switch g {
			case "transitions", "read", "hostile", "lifecycle", "webhooks", "apikeys", "subscriptions", "scaling", "settlement":
				groups[g] = true
			default:
				return fmt.Errorf("-only: unknown group %q", g)
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	vd, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(vd); err != nil {
		return fmt.Errorf("service binary: %w (run make bench, which builds it)", err)
	}
	if *selfProf != "" {
		f, err := os.Create(*selfProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	run, err := harness.Run(ctx, harness.Config{
		Voucherd: vd, Self: self, OutDir: *out, Only: groups,
		Warmup: *warmup, Duration: *duration, Unloaded: *unloaded,
		TransitionClients: cs, ReadClients: *readC, LifecycleClients: *lifeC, PgbenchMaxTPS: *maxTPS,
		IdleSubs: *idle, C2CRate: *c2cRate, C2CDuration: *c2cDur, C2CSlice: *c2cSlice, C2CTurns: *c2cTurns, FanoutSubs: *fanSubs, FanoutEvents: *fanEvents,
		WebhookRate: *whRate, WebhookBurst: *whBurst,
		SettlementTest: *settleT, SweepTest: *sweepT, RepoDir: ".",
		Profile: *profile, Log: log, Out: os.Stdout,
	})
	if err != nil {
		return err
	}
	// A missed target fails the run (and make bench), as a failing test
	// would.
	if failed := harness.Failures(run); len(failed) > 0 {
		return fmt.Errorf("%d target(s) not met:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}
