package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

func TestChecks(t *testing.T) {
	lat := func(rate float64, p50, p99 time.Duration) *stats.Summary {
		return &stats.Summary{Count: 1, PerSec: rate, P50: p50, P99: p99}
	}
	run := &report.Run{Results: []*report.Result{
		{ID: "ref-pgbench-c16", Latency: lat(1000, 0, 0)},
		{ID: "redeem-rest-c16", Latency: lat(600, 0, 0)},
		{ID: "ref-pgbench-c64", Latency: lat(1000, 0, 0)},
		{ID: "redeem-rest-c64", Latency: lat(400, 0, 0)},
		{ID: "ref-redeem-floor-c16", Latency: lat(700, 0, 0)},
		{ID: "ref-redeem-floor-c64", Latency: lat(800, 0, 0)},
		{ID: "read-rest-unloaded", Group: "read", Latency: lat(0, 400*time.Microsecond, 0)},
		{ID: "ref-read-floor-unloaded", Group: "read", Latency: lat(0, 300*time.Microsecond, 0)},
		{ID: "read-graphql-unloaded", Group: "read", Latency: lat(0, 600*time.Microsecond, 0)},
		{ID: "read-rest-c16", Group: "read", NotRun: "the service has no GET voucher yet"},
		{ID: "subs-idle", Latency: lat(0, 0, 0), Figures: []report.Figure{{Name: "memory per subscription (RSS)", Value: 12}}},
		// Fast enough, but at a lower rate than the target names.
		{ID: "subs-c2c", Name: "commit→subscriber, same replica, 1000 transitions/s", Latency: lat(0, 0, 2*time.Millisecond),
			Figures: []report.Figure{{Name: "achieved transition rate", Value: 600}}},
		{ID: "subs-c2c-replica", Name: "commit→subscriber, other replica, 1000 transitions/s", Latency: lat(0, 0, 4*time.Millisecond),
			Figures: []report.Figure{{Name: "achieved transition rate", Value: 990}}},
		{ID: c2cFloorID, Latency: lat(0, 0, 3*time.Millisecond)},
		{ID: c2cHTTPFloorID, Latency: lat(0, 0, 1500*time.Microsecond), Figures: []report.Figure{{Name: "achieved transition rate", Value: 1000}}},
		{ID: c2cHTTPFloorReplicaID, Latency: lat(0, 0, 3*time.Millisecond), Figures: []report.Figure{{Name: "achieved transition rate", Value: 1000}}},
		{ID: "lifecycle-postgres", Latency: lat(100, 0, 0)},
		{ID: "lifecycle-sqlite", Latency: lat(200, 0, 0)},
	}}
	got := map[string]string{}
	for _, c := range checks(run) {
		res := "MISSED"
		switch {
		case c.NotRun != "":
			res = "NOT RUN"
		case c.Info:
			res = "INFO"
		case c.Met:
			res = "MET"
		}
		got[c.Target+" "+c.Figure] = res
	}
	want := map[string]string{
		"transitions >= 0.8 x bare HTTP redeem (16) redeem REST":                                          "MET",
		"transitions >= 0.8 x bare HTTP redeem (64) redeem REST":                                          "MISSED",
		"transitions x pgbench (16) redeem REST":                                                          "INFO",
		"bare HTTP redeem x pgbench (64): the machine's limit bare HTTP redeem":                           "INFO",
		"REST GET p50 unloaded <= 1.2 x bare handler GET p50":                                             "MISSED",
		"REST GET p50 unloaded, 0.3 ms GET p50":                                                           "INFO",
		"REST GET throughput >= 0.8 x minimal handler GET req/s":                                          "NOT RUN",
		"GraphQL read <= 1.3 x REST read latency GraphQL p50 unloaded":                                    "MISSED",
		"<= 16 KiB per idle subscription RSS per subscription":                                            "MET",
		"commit->subscriber p99 <= 1.2 x HTTP floor at 1000/s (PG, same replica) commit->subscriber p99":  "MISSED",
		"commit->subscriber p99 <= 1.5 x HTTP floor at 1000/s (PG, other replica) commit->subscriber p99": "MET",
		"commit->subscriber p99 x NOTIFY floor (PG, same replica) commit->subscriber p99":                 "INFO",
		"commit->subscriber p99 x NOTIFY floor (PG, other replica) commit->subscriber p99":                "INFO",
		"commit->subscriber p99, 5 ms (PG, same replica) commit->subscriber p99":                          "INFO",
		"commit->subscriber p99, 5 ms (PG, other replica) commit->subscriber p99":                         "INFO",
		"commit->subscriber p99 <= 5 ms at 1000/s (SQLite) p99":                                           "NOT RUN",
		"full lifecycles per second (PostgreSQL) lifecycles/s":                                            "INFO",
		"full lifecycles per second (SQLite) lifecycles/s":                                                "INFO",
		"webhook deliveries per second deliveries/s":                                                      "NOT RUN",
		"fan-out per subscriber <= 1.5 x bare websocket cost per subscriber":                              "NOT RUN",
		"webhook commit->first attempt p99 <= 50 ms p99":                                                  "NOT RUN",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	var b strings.Builder
	run.Checks = checks(run)
	run.WriteTable(&b)
	for _, s := range []string{"MET", "MISSED", "NOT RUN: read-rest-c16: the service has no GET voucher yet", "not run: the service has no GET voucher yet",
		"MISSED (only 600 of 1000 transitions/s achieved)", "reported"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}

	// What fails the run: each MISSED, and a NOT RUN of a group that ran;
	// not a group left out, nor a reported figure.
	failed := strings.Join(Failures(run), "\n")
	for _, s := range []string{"transitions >= 0.8 x bare HTTP redeem (64): MISSED", "REST GET p50 unloaded <= 1.2 x bare handler: MISSED",
		"GraphQL read <= 1.3 x REST read latency: MISSED", "(PG, same replica): MISSED",
		"REST GET throughput >= 0.8 x minimal handler: NOT RUN: read-rest-c16: the service has no GET voucher yet"} {
		if !strings.Contains(failed, s) {
			t.Errorf("failures lack %q:\n%s", s, failed)
		}
	}
	for _, s := range []string{"(16)", "SQLite", "fan-out", "lifecycles", "(PG, other replica)", "webhook"} {
		if strings.Contains(failed, s) {
			t.Errorf("failures name %q:\n%s", s, failed)
		}
	}
}

func TestCommitToSubscriberMissNamesTheDiskStalls(t *testing.T) {
	c2c := func(id string, p99 time.Duration, stalls float64) *report.Result {
		return &report.Result{ID: id, Name: "commit→subscriber PG, 1000 transitions/s",
			Latency: &stats.Summary{Count: 1, P99: p99},
			Figures: []report.Figure{{Name: "achieved transition rate", Value: 1000},
				{Name: stallFigure, Value: stalls}, {Name: slowestFlushFigure, Value: 412}}}
	}
	run := &report.Run{Results: []*report.Result{
		c2c("subs-c2c", 9*time.Millisecond, 3),         // missed while the disk stalled
		c2c("subs-c2c-replica", 9*time.Millisecond, 0), // missed on a calm disk
		{ID: c2cFloorID, Latency: &stats.Summary{Count: 1, P99: 2 * time.Millisecond}},
		{ID: c2cHTTPFloorID, Latency: &stats.Summary{Count: 1, P99: 2 * time.Millisecond}},
		{ID: c2cHTTPFloorReplicaID, Latency: &stats.Summary{Count: 1, P99: 2 * time.Millisecond}},
	}}
	notes := map[string]string{}
	for _, c := range checks(run) {
		if strings.HasPrefix(c.Target, "commit->subscriber") && c.NotRun == "" && !c.Info {
			if c.Met {
				t.Errorf("%s: met at 9 ms", c.Target)
			}
			notes[c.Target] = c.Note
		}
	}
	if got, want := notes["commit->subscriber p99 <= 1.2 x HTTP floor at 1000/s (PG, same replica)"], "disk: 3 flushes over 20 ms during the phase, slowest 412 ms"; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
	if got := notes["commit->subscriber p99 <= 1.5 x HTTP floor at 1000/s (PG, other replica)"]; got != "" {
		t.Errorf("a calm disk is blamed: %q", got)
	}
}

// The service's line is a ratio to the HTTP floor of its own path; a floor
// that fell short of the rate measured an easier load, so the line cannot
// be met against it; without the HTTP floor the line is not run (and the
// run fails), whatever the NOTIFY floor says.
func TestCommitToSubscriberAgainstTheHTTPFloor(t *testing.T) {
	res := func(id string, p99 time.Duration, rate float64) *report.Result {
		return &report.Result{ID: id, Name: "x, 1000 transitions/s", Latency: &stats.Summary{Count: 1, P99: p99},
			Figures: []report.Figure{{Name: "achieved transition rate", Value: rate}}}
	}
	verdicts := func(run *report.Run) map[string]report.Check {
		out := map[string]report.Check{}
		for _, c := range checks(run) {
			if strings.Contains(c.Target, "(PG, ") {
				out[c.Target] = c
			}
		}
		return out
	}
	same := "commit->subscriber p99 <= 1.2 x HTTP floor at 1000/s (PG, same replica)"
	other := "commit->subscriber p99 <= 1.5 x HTTP floor at 1000/s (PG, other replica)"
	v := verdicts(&report.Run{Results: []*report.Result{
		res("subs-c2c", 2*time.Millisecond, 1000), res("subs-c2c-replica", 5*time.Millisecond, 1000),
		res(c2cHTTPFloorID, 1800*time.Microsecond, 1000), res(c2cHTTPFloorReplicaID, 4*time.Millisecond, 900),
		{ID: c2cFloorID, Latency: &stats.Summary{Count: 1, P99: 400 * time.Microsecond}},
	}})
	if c := v[same]; !c.Met || c.Reference != "HTTP floor p99" || c.Ratio < 1.1 || c.Ratio > 1.12 {
		t.Errorf("same replica: %+v", c)
	}
	if c := v[other]; c.Met || c.Note != "the HTTP floor reached only 900 of 1000 transitions/s" {
		t.Errorf("other replica against a floor short of the rate: %+v", c)
	}
	if c := v["commit->subscriber p99 x NOTIFY floor (PG, same replica)"]; !c.Info || c.Ratio != 5 {
		t.Errorf("NOTIFY floor ratio: %+v", c)
	}
	v = verdicts(&report.Run{Results: []*report.Result{
		res("subs-c2c", 2*time.Millisecond, 1000), res("subs-c2c-replica", 5*time.Millisecond, 1000),
		{ID: c2cHTTPFloorID, NotRun: "failed: floor did not start"}, {ID: c2cHTTPFloorReplicaID, NotRun: "failed: floor did not start"},
		{ID: c2cFloorID, Latency: &stats.Summary{Count: 1, P99: 400 * time.Microsecond}},
	}})
	for _, target := range []string{same, other} {
		if c := v[target]; c.NotRun == "" || !strings.Contains(c.NotRun, "floor did not start") {
			t.Errorf("%s without the HTTP floor: %+v", target, c)
		}
	}
}

// A phase short of its rate by no more than the disk's stalls during it
// account for ran the load the machine could carry: the ratio to the floor
// decides, and the note says why the rate fell short. Short by more, the
// line is missed, whatever the ratio.
func TestCommitToSubscriberRateShortByTheDiskStalls(t *testing.T) {
	res := func(id string, p99 time.Duration, rate, samples, stalledMs float64) *report.Result {
		return &report.Result{ID: id, Name: "x, 1000 transitions/s", Latency: &stats.Summary{Count: 1, P99: p99},
			Figures: []report.Figure{{Name: "achieved transition rate", Value: rate},
				{Name: flushesSampledFigure, Value: samples}, {Name: stalledTimeFigure, Value: stalledMs}}}
	}
	same := "commit->subscriber p99 <= 1.2 x HTTP floor at 1000/s (PG, same replica)"
	verdict := func(rate, stalledMs float64) report.Check {
		run := &report.Run{Results: []*report.Result{
			// 245 samples and 1,620 ms stalled: 11.7 % of the phase.
			res("subs-c2c", 2*time.Millisecond, rate, 245, stalledMs), res("subs-c2c-replica", 5*time.Millisecond, 1000, 0, 0),
			res(c2cHTTPFloorID, 1800*time.Microsecond, rate, 245, stalledMs), res(c2cHTTPFloorReplicaID, 4*time.Millisecond, 1000, 0, 0),
			{ID: c2cFloorID, Latency: &stats.Summary{Count: 1, P99: 400 * time.Microsecond}},
		}}
		for _, c := range checks(run) {
			if c.Target == same {
				return c
			}
		}
		t.Fatalf("no %q", same)
		return report.Check{}
	}
	if c := verdict(927, 1620); !c.Met || c.Note != "927 of 1000 transitions/s achieved, the disk stalled for 12% of the phase" {
		t.Errorf("short by the stalls: %+v", c)
	}
	if c := verdict(927, 100); c.Met || c.Note != "only 927 of 1000 transitions/s achieved" {
		t.Errorf("short by more than the stalls: %+v", c)
	}
	if c := verdict(700, 1620); c.Met || c.Note != "only 700 of 1000 transitions/s achieved" {
		t.Errorf("far short: %+v", c)
	}
	if c := verdict(990, 0); !c.Met || c.Note != "" {
		t.Errorf("at the rate: %+v", c)
	}
}
