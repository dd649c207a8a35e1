package harness

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// scalingRun is a scaling group's results: capped replicas at 1 and 2
// (rates and the machine's busy share given), uncapped ones that did not
// scale, both cross-replica phases and both bends.
func scalingRun(capped1, capped2, busy2 float64) *report.Run {
	tx := func(id string, rate, busy, capUse float64) *report.Result {
		return &report.Result{ID: id, Latency: &stats.Summary{Count: 1, PerSec: rate},
			Figures: []report.Figure{busyFigure(busy / 100), {Name: capUseFigure, Value: capUse}}}
	}
	c2c := func(id string, p99 time.Duration) *report.Result {
		return &report.Result{ID: id, Name: "commit→subscriber, other replica, 1000 transitions/s", Latency: &stats.Summary{Count: 1, P99: p99},
			Figures: []report.Figure{{Name: "achieved transition rate", Value: 1000}}}
	}
	bend := func(id string, rate float64) *report.Result {
		return &report.Result{ID: id, Figures: []report.Figure{{Name: bendFigure, Value: rate}}}
	}
	nats := c2c("scale-c2c-nats", 3*time.Millisecond)
	if capped2 < 0 { // a NATS phase that missed while the transport lost messages
		nats = c2c("scale-c2c-nats", 30*time.Millisecond)
		nats.Figures = append(nats.Figures, report.Figure{Name: PubsubTroubleFigure, Value: 2})
		capped2 = 1900
	}
	return &report.Run{Results: []*report.Result{
		tx("scale-tx-r1", 3500, 98, 0), tx("scale-tx-r2", 3000, 99, 0), tx("scale-tx-r3", 2800, 99, 0),
		tx("scale-tx-cap-r1", capped1, 40, 97), tx("scale-tx-cap-r2", capped2, busy2, 95),
		c2c("scale-c2c-notify", 9*time.Millisecond), nats, c2c(c2cNATSFloorReplicaID, 2500*time.Microsecond),
		bend("scale-bend-notify", 500), bend("scale-bend-nats", 2000),
	}}
}

// natsTarget is the NATS line: its ratio to the HTTP floor over NATS.
const natsTarget = "commit->subscriber p99 <= 1.5 x HTTP floor at 1000/s (PG over NATS, other replica)"

// A NATS miss while the replicas logged transport trouble says so.
func TestNATSMissNamesTransportTrouble(t *testing.T) {
	run := scalingRun(1000, -1, 60)
	for _, c := range checks(run) {
		if c.Target == natsTarget {
			if c.Met || c.Note != "the replicas logged 2 transport warnings (a resync delivers late)" {
				t.Errorf("NATS check %+v", c)
			}
			return
		}
	}
	t.Error("no NATS check")
}

func TestScalingChecks(t *testing.T) {
	for _, tc := range []struct {
		name             string
		capped2, busy2   float64
		met              bool
		note             string
		failuresMentions []string
	}{
		{name: "scales", capped2: 1900, busy2: 60, met: true},
		{name: "does not scale", capped2: 1400, busy2: 60, met: false,
			failuresMentions: []string{"transitions with 2 replicas >= 1.6 x one replica (each replica capped at 0.2 CPU): MISSED"}},
		// A ratio met while the machine was full does not count: the caps
		// were not what limited the step.
		{name: "machine full", capped2: 1900, busy2: 95, met: false, note: "machine 95% busy with 2 capped replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := scalingRun(1000, tc.capped2, tc.busy2)
			run.Checks = append(checks(run), scalingChecks(run)...)
			byTarget := map[string]report.Check{}
			for _, c := range run.Checks {
				byTarget[c.Target] = c
			}
			c, ok := byTarget["transitions with 2 replicas >= 1.6 x one replica (each replica capped at 0.2 CPU)"]
			if !ok || c.Info || c.NotRun != "" || c.Met != tc.met || !strings.Contains(c.Note, tc.note) {
				t.Errorf("capped check %+v, want met=%v note %q", c, tc.met, tc.note)
			}
			// Reported beside it, never failing: the uncapped ratios (the
			// machine's busy share named), LISTEN/NOTIFY's 9 ms, the bends.
			for target, note := range map[string]string{
				"transitions with 2 replicas, uncapped (2 cores shared with PostgreSQL and the load generator)": "machine 98% busy with 1 replica",
				"transitions with 3 replicas, uncapped":                                                         "",
				"commit->subscriber p99 at 1000/s, beside NATS's (PG over LISTEN/NOTIFY, other replica)":        "",
				"notify bend: commit latency bends at (0 = not up to the highest rate)":                         "",
			} {
				if c, ok := byTarget[target]; !ok || !c.Info || c.NotRun != "" || !strings.Contains(c.Note, note) {
					t.Errorf("%s: %+v, want reported with note %q", target, c, note)
				}
			}
			if c := byTarget[natsTarget]; c.Info || !c.Met || c.Value != 3 || c.RefValue != 2.5 {
				t.Errorf("NATS check %+v, want met at 3 ms against the floor's 2.5", c)
			}
			// The absolute 5 ms it had until the floor is reported.
			if c, ok := byTarget["commit->subscriber p99, 5 ms (PG over NATS, other replica)"]; !ok || !c.Info || c.Value != 3 {
				t.Errorf("NATS 5 ms line %+v (present %v), want reported at 3 ms", c, ok)
			}
			failed := strings.Join(Failures(run), "\n")
			for _, s := range tc.failuresMentions {
				if !strings.Contains(failed, s) {
					t.Errorf("failures lack %q:\n%s", s, failed)
				}
			}
			for _, s := range []string{"uncapped", "LISTEN/NOTIFY", "notify bend", "NATS"} {
				if strings.Contains(failed, s) {
					t.Errorf("failures name %q:\n%s", s, failed)
				}
			}
			var b strings.Builder
			run.WriteTable(&b)
			for _, s := range []string{"notify bend", "LISTEN/NOTIFY", "500 /s", "2000 /s"} {
				if !strings.Contains(b.String(), s) {
					t.Errorf("table lacks %q:\n%s", s, b.String())
				}
			}
		})
	}
}

// The replicas' JSON log lines about their transport are counted; other
// lines and levels are not.
func TestCountPubsubTrouble(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn}))
	log.Warn("pubsub: NATS dropped notifications for this replica; resyncing")
	log.Info("pubsub: NATS connection re-established; resyncing what subscribers may have missed")
	log.Error("pubsub: resync failed", "err", "boom")
	log.Warn("webhook: delivery failed")
	if got := countPubsubTrouble(b.String()); got != 2 {
		t.Errorf("counted %d in %s, want 2", got, b.String())
	}
}

func TestParsePoolWaits(t *testing.T) {
	m := `# HELP go_sql_wait_count_total The total number of connections waited for.
# TYPE go_sql_wait_count_total counter
go_sql_wait_count_total{db_name="voucherd"} 1234
# TYPE go_sql_wait_duration_seconds_total counter
go_sql_wait_duration_seconds_total{db_name="voucherd"} 2.5
go_sql_wait_count{db_name="voucherd"} 99
`
	if w, s := parsePoolWaits(m); w != 1234 || s != 2.5 {
		t.Errorf("parsed %v waits, %v s; want 1234, 2.5", w, s)
	}
}

// The scaling group's NATS server runs in a process of its own
// (voucherbench nats → ServeNATS): it answers /healthz, carries a message,
// and stops when its context ends.
func TestServeNATSCarriesAMessageAndStops(t *testing.T) {
	client, stop := startTestNATS(t)
	nc, err := nats.Connect("nats://" + client)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("voucherbench.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("voucherbench.test", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "x" {
		t.Fatalf("message %v %v", m, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
