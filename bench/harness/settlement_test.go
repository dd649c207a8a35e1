package harness

import (
	"strings"
	"testing"

	"github.com/voucherd/voucherd/bench/report"
)

func TestParseGoBench(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkWatcher1000/sqlite3-2         \t2026/11/27 09:04:01 INFO webhook endpoint created\n" +
		"      1\t  45848169 ns/op\t       686.6 confirm→delivered-burst-p99-ms\t       227.5 confirm→delivered-p99-ms\t     2.000 rpc-calls/block\n" +
		"--- BENCH: BenchmarkWatcher1000/sqlite3-2\n" +
		"    bench_test.go:288: 1000 deliveries: first 5.9ms\n" +
		"BenchmarkSweeps100-2   \t       1\t9000 ns/op\t         4.000 sweep-txs/100-confirmed\n" +
		"PASS\n"
	res := parseGoBench([]byte(out))
	if len(res) != 2 {
		t.Fatalf("parsed %d results, want 2: %+v", len(res), res)
	}
	w := res[0]
	if w.ID != "settlement-watcher1000-sqlite3" || len(w.Figures) != 3 ||
		w.Figures[1] != (report.Figure{Name: "confirm→delivered-p99-ms", Value: 227.5}) || w.Figures[2].Value != 2 {
		t.Fatalf("watcher: %+v", w)
	}
	if res[1].ID != "settlement-sweeps100" || len(res[1].Figures) != 1 || res[1].Figures[0].Value != 4 {
		t.Fatalf("sweeps: %+v", res[1])
	}
	run := &report.Run{Results: res}
	var met, missing int
	for _, c := range settlementChecks(run) {
		switch {
		case c.Target == "settlement confirm->deposit.confirmed delivered p99 <= 250 ms (SQLite)":
			if !c.Met || c.Value != 227.5 {
				t.Fatalf("watcher check: %+v", c)
			}
			met++
		case c.NotRun != "":
			// PostgreSQL's and detection's lines were not in the output:
			// a failure of the run, not a group left out.
			if !strings.Contains(c.NotRun, "was not part of this run") {
				missing++
			}
		}
	}
	if met != 1 || missing == 0 {
		t.Fatalf("met %d, not measured %d", met, missing)
	}
	if f := Failures(&report.Run{Checks: settlementChecks(run)}); len(f) == 0 {
		t.Fatal("unmeasured settlement targets do not fail the run")
	}
	if c := settlementChecks(&report.Run{}); len(Failures(&report.Run{Checks: c})) != 0 {
		t.Fatalf("a run without the settlement group fails on it: %v", Failures(&report.Run{Checks: c}))
	}
}
