package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The settlement group (-only settlement) runs the settlement benchmarks
// (docs/settlement.md, "Cost") from their compiled test binaries, which
// make bench builds beside voucherd (go test -c): internal/settlement's
// BenchmarkWatcher1000 and BenchmarkDetect1000 on SQLite and PostgreSQL
// (each starts its own throwaway database and fake chain) and
// cmd/voucherd's BenchmarkSweeps100 (anvil and the real binary). Each
// benchmark line becomes a result whose figures are its metrics, and
// their targets join the one table (settlementChecks). They run after
// voucherbench's own scenarios, alone on the machine: the service and the
// database of the other groups are stopped by then.
//
// -test.benchtime 1x: Go runs a benchmark once with b.N = 1 before the
// b.N it was asked for, and each of these sets up 1,000 vouchers and waits
// for their deliveries in every run, so 20x cost two whole runs; the
// per-block figures average over settlementPolls polls of one run instead
// (SETTLEMENT_BENCH_POLLS, read by the benchmarks).

const settlementPolls = 20

type settlementBench struct {
	bin, dir, pattern string
}

func (h *Harness) settlement(ctx context.Context) {
	if h.cfg.SettlementTest == "" && h.cfg.SweepTest == "" {
		h.notRun("settlement", "settlement", "settlement benchmarks", "no test binaries given (-settlement-test, -sweep-test; make bench builds them)")
		return
	}
	root := h.cfg.RepoDir
	if root == "" {
		root = "."
	}
	var runs []settlementBench
	if h.cfg.SettlementTest != "" {
		runs = append(runs, settlementBench{h.cfg.SettlementTest, filepath.Join(root, "internal", "settlement"), "Watcher1000|Detect1000"})
	}
	if h.cfg.SweepTest != "" {
		runs = append(runs, settlementBench{h.cfg.SweepTest, filepath.Join(root, "cmd", "voucherd"), "Sweeps100"})
	}
	for _, r := range runs {
		start := time.Now()
		lines, err := h.runGoBench(ctx, r)
		if err != nil {
			h.notRun("settlement-"+filepath.Base(r.bin), "settlement", "settlement benchmarks ("+r.pattern+")", err.Error())
			continue
		}
		for _, l := range lines {
			h.add(l)
		}
		h.log.Info("settlement benchmarks done", "bench", r.pattern, "took", time.Since(start).Round(time.Second))
	}
}

// runGoBench runs one test binary's benchmarks and parses its lines.
func (h *Harness) runGoBench(ctx context.Context, r settlementBench) ([]*report.Result, error) {
	bin, err := filepath.Abs(r.bin)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", r.pattern, "-test.benchtime", "1x", "-test.timeout", "10m")
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "SETTLEMENT_BENCH_POLLS="+strconv.Itoa(settlementPolls))
	if vd, err := filepath.Abs(h.cfg.Voucherd); err == nil {
		cmd.Env = append(cmd.Env, testserver.BinaryEnv+"="+vd)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tail := string(out) + stderr.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("%s: %v\n%s", filepath.Base(r.bin), err, tail)
	}
	res := parseGoBench(out)
	if len(res) == 0 {
		return nil, fmt.Errorf("%s printed no benchmark line:\n%s", filepath.Base(r.bin), out)
	}
	return res, nil
}

// parseGoBench turns `BenchmarkX/sub-2  1  123 ns/op  4.5 unit ...` lines
// into results with one figure per metric (ns/op left out: each
// benchmark names what it timed). Go prints a benchmark's name before it
// runs and its figures after, so anything the benchmark writes to stdout
// can come between them: figures belong to the last name printed.
func parseGoBench(out []byte) []*report.Result {
	var res []*report.Result
	name := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			name, f = f[0], f[1:]
		}
		if name == "" || len(f) < 3 || !slices.Contains(f, "ns/op") {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue
		}
		n := strings.TrimPrefix(name, "Benchmark")
		if i := strings.LastIndex(n, "-"); i > 0 { // GOMAXPROCS suffix
			if _, err := strconv.Atoi(n[i+1:]); err == nil {
				n = n[:i]
			}
		}
		r := &report.Result{ID: "settlement-" + strings.ToLower(strings.ReplaceAll(n, "/", "-")), Group: "settlement", Name: "settlement: " + n}
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || f[i+1] == "ns/op" {
				continue
			}
			r.Figures = append(r.Figures, report.Figure{Name: f[i+1], Value: v})
		}
		res = append(res, r)
		name = ""
	}
	return res
}

// settlementChecks are the settlement targets (docs/settlement.md): the
// watcher's and detection's delivery and RPC bounds, detection's CPU per
// block against the receipt path's on the same database, and the sweep
// count reported.
func settlementChecks(r *report.Run) []report.Check {
	var out []report.Check
	ran := false
	for _, x := range r.Results {
		if x.Group == "settlement" {
			ran = true
		}
	}
	fig := func(id, name string) (float64, string) {
		x := r.Find(id)
		switch {
		case x == nil && !ran:
			return 0, id + " was not part of this run"
		case x == nil:
			return 0, id + " was not measured (see the settlement group's not-run lines)"
		case x.NotRun != "":
			return 0, id + ": " + x.NotRun
		}
		for _, f := range x.Figures {
			if f.Name == name {
				return f.Value, ""
			}
		}
		return 0, id + " has no " + name
	}
	bound := func(target, id, metric, figure, unit string, limit float64) {
		v, why := fig(id, metric)
		if why != "" {
			out = append(out, report.Check{Target: target, Figure: figure, Reference: fmt.Sprintf("target %g %s", limit, unit), Bound: 1, NotRun: why})
			return
		}
		out = append(out, report.NewCheck(target, figure, v, unit, fmt.Sprintf("target %g %s", limit, unit), limit, 1, false))
	}
	for _, db := range []struct{ sub, label string }{{"sqlite3", "SQLite"}, {"postgres", "PostgreSQL"}} {
		w, d := "settlement-watcher1000-"+db.sub, "settlement-detect1000-"+db.sub
		bound("settlement confirm->deposit.confirmed delivered p99 <= 250 ms ("+db.label+")", w, "confirm→delivered-p99-ms", "confirm→delivered p99", "ms", 250)
		bound("settlement RPC round trips per new block <= 3 ("+db.label+")", w, "rpc-calls/block", "RPC calls per block, 1,000 pending", "", 3)
		bound("settlement RPC calls per resolve <= 1 ("+db.label+")", w, "rpc-calls/resolve", "RPC calls per resolve", "", 1)
		bound("detection RPC round trips per new block <= 3 ("+db.label+")", d, "rpc-calls/block", "RPC calls per block, 1,000 watched", "", 3)
		bound("detection RPC round trips per paying block <= 3 ("+db.label+")", d, "rpc-calls/paid-block", "RPC calls, block paying 20", "", 3)
		bound("detection mined->pending p99 <= 1.2 s ("+db.label+")", d, "mined→pending-p99-ms", "mined→pending p99", "ms", 1200)
		bound("detection confirm->deposit.confirmed delivered p99 <= 450 ms ("+db.label+")", d, "confirm→delivered-p99-ms", "confirm→delivered p99", "ms", 450)
		{
			target := "detection CPU per block <= 1.5 x receipt path (" + db.label + ")"
			dv, why1 := fig(d, "cpu-µs/block")
			wv, why2 := fig(w, "cpu-µs/block")
			if why1 != "" || why2 != "" {
				out = append(out, report.Check{Target: target, Figure: "CPU per block", Reference: "receipt path", Bound: 1.5, NotRun: first(why1, why2)})
			} else {
				out = append(out, report.NewCheck(target, "detection CPU per block", dv/1000, "ms", "receipt path's", wv/1000, 1.5, false))
			}
		}
		if v, why := fig(w, "confirm→delivered-burst-p99-ms"); why == "" {
			out = append(out, report.NewInfo("settlement 1,000 confirmed by one block, delivered p99 ("+db.label+")", "burst p99", v, "ms", "-", 0))
		}
	}
	if v, why := fig("settlement-sweeps100", "sweep-txs/100-confirmed"); why != "" {
		out = append(out, report.Check{Target: "sweep transactions per 100 confirmed checkouts", Figure: "sweep txs", Info: true, NotRun: why})
	} else {
		out = append(out, report.NewInfo("sweep transactions per 100 confirmed checkouts", "sweep txs (anvil)", v, "", "-", 0))
	}
	return out
}
