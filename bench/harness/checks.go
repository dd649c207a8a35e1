package harness

import (
	"fmt"
	"strings"
	"time"

	"github.com/voucherd/voucherd/bench/report"
)

// checks holds every figure the issue sets a target for against its
// reference. A side that did not run makes the check "not run", never met.
func checks(r *report.Run) []report.Check {
	var out []report.Check
	get := func(id string) (*report.Result, string) {
		x := r.Find(id)
		switch {
		case x == nil:
			return nil, id + " was not part of this run"
		case x.NotRun != "":
			return nil, id + ": " + x.NotRun
		case x.Latency == nil:
			return nil, id + " has no measurement"
		}
		return x, ""
	}
	figure := func(x *report.Result, name string) (float64, bool) {
		for _, f := range x.Figures {
			if f.Name == name {
				return f.Value, true
			}
		}
		return 0, false
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	notRun := func(target, fig, ref string, bound float64, atLeast bool, why string) report.Check {
		return report.Check{Target: target, Figure: fig, Reference: ref, Bound: bound, AtLeast: atLeast, NotRun: why}
	}

	// Transitions: the target is the bare HTTP redeem measured beside them
	// (floor.Serve's POST /vouchers/{id}/redeem: the HTTP exchange and the
	// one statement, nothing of the service), as the reads' is the bare
	// GET; pgbench (the statement alone, no HTTP hop) is reported beside
	// it, with the floor's own ratio to pgbench: what the machine allows
	// a REST redeem at all (docs/performance.md, "Transitions: the floor").
	for _, c := range transitionClients(r) {
		target := fmt.Sprintf("transitions >= 0.8 x bare HTTP redeem (%d)", c)
		svc, why1 := get(fmt.Sprintf("redeem-rest-c%d", c))
		fl, why2 := get(fmt.Sprintf("ref-redeem-floor-c%d", c))
		ref, why3 := get(fmt.Sprintf("ref-pgbench-c%d", c))
		if svc == nil || fl == nil {
			out = append(out, notRun(target, "redeem REST tx/s", "bare HTTP redeem tx/s", 0.8, true, first(why1, why2)))
		} else {
			out = append(out, report.NewCheck(target, "redeem REST", svc.Latency.PerSec, "/s", fmt.Sprintf("bare HTTP redeem c%d", c), fl.Latency.PerSec, 0.8, true))
		}
		if svc == nil || ref == nil {
			out = append(out, report.Check{Target: fmt.Sprintf("transitions x pgbench (%d)", c), Figure: "redeem REST tx/s", Info: true, NotRun: first(why1, why3)})
		} else {
			out = append(out, report.NewInfo(fmt.Sprintf("transitions x pgbench (%d)", c), "redeem REST", svc.Latency.PerSec, "/s", fmt.Sprintf("pgbench -c %d", c), ref.Latency.PerSec))
		}
		if fl != nil && ref != nil {
			out = append(out, report.NewInfo(fmt.Sprintf("bare HTTP redeem x pgbench (%d): the machine's limit", c), "bare HTTP redeem", fl.Latency.PerSec, "/s", fmt.Sprintf("pgbench -c %d", c), ref.Latency.PerSec))
		}
	}

	{
		target := "REST GET by API key <= 1.1 x by JWT"
		var key, jwt *report.Result
		var why1, why2 string
		for _, x := range r.Results {
			if x.Group == "apikeys" && strings.HasPrefix(x.ID, "apikey-get-key-") {
				key, why1 = get(x.ID)
				jwt, why2 = get("apikey-get-jwt-" + strings.TrimPrefix(x.ID, "apikey-get-key-"))
			}
		}
		if key == nil || jwt == nil {
			out = append(out, notRun(target, "GET by key p50", "GET by JWT p50", 1.1, false, first(first(why1, why2), "the API key reads were not part of this run")))
		} else {
			out = append(out, report.NewCheck(target, "GET by key p50", ms(key.Latency.P50), "ms", "GET by JWT p50", ms(jwt.Latency.P50), 1.1, false))
		}
		if x, why := get("apikey-replay-10000"); x == nil {
			out = append(out, notRun("replay of 10,000 events queued < 2 s", "replay call", "2 s", 1, false, why))
		} else {
			out = append(out, report.NewCheck("replay of 10,000 events queued < 2 s", "replay call", ms(x.Latency.P50), "ms", "target 2 s", 2000, 1, false))
		}
	}

	// The unloaded GET's bound is the bare handler's p50, measured in the
	// same phase in turns with it (ref-read-floor-unloaded: net/http and
	// the same primary-key read). It was an absolute 0.3 ms, set when that
	// floor's p50 was 0.254 ms (1.18 x); on 2026-11-27 the floor itself
	// took 0.281 and 0.322 ms in two runs, so the machine, not the service,
	// decided the absolute line (docs/performance.md, "Issue 25, sixth
	// pass"). The absolute 0.3 ms is reported beside it.
	{
		const target = "REST GET p50 unloaded <= 1.2 x bare handler"
		x, why1 := get("read-rest-unloaded")
		fl, why2 := get("ref-read-floor-unloaded")
		if x == nil || fl == nil {
			out = append(out, notRun(target, "GET p50", "bare handler p50", 1.2, false, first(why1, why2)))
		} else {
			out = append(out, report.NewCheck(target, "GET p50", ms(x.Latency.P50), "ms", "bare handler p50", ms(fl.Latency.P50), 1.2, false))
		}
		if x == nil {
			out = append(out, report.Check{Target: "REST GET p50 unloaded, 0.3 ms", Figure: "GET p50", Info: true, NotRun: why1})
		} else {
			out = append(out, report.NewInfo("REST GET p50 unloaded, 0.3 ms", "GET p50", ms(x.Latency.P50), "ms", "0.3 ms", 0.3))
		}
	}

	var readLoaded []string
	for _, x := range r.Results {
		if x.Group == "read" && x.ID != "read-rest-unloaded" && x.ID != "read-graphql-unloaded" && len(x.ID) > 10 && x.ID[:10] == "read-rest-" {
			readLoaded = append(readLoaded, x.ID[len("read-rest-"):])
		}
	}
	if len(readLoaded) == 0 {
		readLoaded = []string{"c16"}
	}
	for _, suffix := range readLoaded {
		target := "REST GET throughput >= 0.8 x minimal handler"
		svc, why1 := get("read-rest-" + suffix)
		ref, why2 := get("ref-read-floor-" + suffix)
		if svc == nil || ref == nil {
			out = append(out, notRun(target, "GET req/s", "floor req/s", 0.8, true, first(why1, why2)))
			continue
		}
		out = append(out, report.NewCheck(target, "GET REST "+suffix, svc.Latency.PerSec, "/s", "floor "+suffix, ref.Latency.PerSec, 0.8, true))
	}

	{
		target := "GraphQL read <= 1.3 x REST read latency"
		g, why1 := get("read-graphql-unloaded")
		rr, why2 := get("read-rest-unloaded")
		if g == nil || rr == nil {
			out = append(out, notRun(target, "GraphQL p50", "REST p50", 1.3, false, first(why1, why2)))
		} else {
			out = append(out, report.NewCheck(target, "GraphQL p50 unloaded", ms(g.Latency.P50), "ms", "REST p50 unloaded", ms(rr.Latency.P50), 1.3, false))
		}
	}

	if x, why := get("hostile-refusal"); x == nil {
		out = append(out, notRun("refused hostile document p99 <= 100 ms", "refusal p99", "100 ms", 1, false, why))
	} else {
		out = append(out, report.NewCheck("refused hostile document p99 <= 100 ms", "refusal p99, 2 clients back to back", ms(x.Latency.P99), "ms", "target 100 ms", 100, 1, false))
	}
	{
		target := "REST GET p99 under hostile documents <= 2 x unloaded"
		loaded, why1 := get("hostile-get-loaded")
		quiet, why2 := get("hostile-get-quiet")
		if loaded == nil || quiet == nil {
			out = append(out, notRun(target, "GET p99 loaded", "GET p99 quiet", 2, false, first(why1, why2)))
		} else {
			out = append(out, report.NewCheck(target, "GET p99, 2 clients sending hostile documents", ms(loaded.Latency.P99), "ms", "GET p99 alone", ms(quiet.Latency.P99), 2, false))
		}
	}

	if x, why := get("subs-idle"); x == nil {
		out = append(out, notRun("<= 16 KiB per idle subscription", "RSS per subscription", "16 KiB", 1, false, why))
	} else if v, ok := figure(x, "memory per subscription (RSS)"); ok {
		out = append(out, report.NewCheck("<= 16 KiB per idle subscription", "RSS per subscription", v, "KiB", "target 16 KiB", 16, 1, false))
	}

	// On PostgreSQL the bound is the floor with the HTTP hop measured in
	// the same phase, its negotiations interleaved with the service's on
	// one schedule (interleave; whole turns with -c2c-turns) (floor.C2C: the same
	// negotiate request, one UPDATE committed, the frame written to a
	// websocket subscriber on the committing process, or NOTIFYed by its
	// notifier and written by a second process that LISTENs; docs/performance.md, "Issue 25, third
	// pass"), path for path; the bare NOTIFY→LISTEN floor's ratio and the
	// absolute 5 ms are reported beside it. SQLite (one process, no
	// database hop) keeps the absolute bound.
	notifyFloor, _ := get(c2cFloorID)
	for _, side := range []struct {
		id, label, floorID string
		bound              float64
		info               bool
	}{{"subs-c2c", "PG, same replica", c2cHTTPFloorID, 1.2, false}, {"subs-c2c-replica", "PG, other replica", c2cHTTPFloorReplicaID, 1.5, false}, {"subs-c2c-sqlite", "SQLite", "", 0, false},
		// The scaling group's pairs (fresh replicas, side by side): on
		// NATS the ratio to the HTTP floor over NATS, interleaved with it
		// (the absolute 5 ms reported beside it, as issue 28 first set
		// it), and LISTEN/NOTIFY's figure reported beside it
		// (docs/scaling.md; its target is the subscriptions group's).
		{"scale-c2c-nats", "PG over NATS, other replica", c2cNATSFloorReplicaID, 1.5, false}, {"scale-c2c-notify", "PG over LISTEN/NOTIFY, other replica", "", 0, true}} {
		target := fmt.Sprintf("commit->subscriber p99 <= %.1f x HTTP floor at 1000/s (%s)", side.bound, side.label)
		if side.bound == 0 {
			target = "commit->subscriber p99 <= 5 ms at 1000/s (" + side.label + ")"
		}
		if side.info {
			target = "commit->subscriber p99 at 1000/s, beside NATS's (" + side.label + ")"
		}
		x, why := get(side.id)
		var fl *report.Result
		floorWhy := ""
		if side.floorID != "" {
			fl, floorWhy = get(side.floorID)
		}
		if x == nil || (side.bound > 0 && fl == nil) {
			if side.info {
				out = append(out, report.Check{Target: target, Figure: "p99", Info: true, NotRun: why})
			} else if side.bound > 0 {
				out = append(out, notRun(target, "p99", "HTTP floor p99", side.bound, false, first(why, floorWhy)))
				if side.id != "scale-c2c-nats" {
					out = append(out, report.Check{Target: "commit->subscriber p99 x NOTIFY floor (" + side.label + ")", Figure: "p99", Info: true, NotRun: first(why, floorWhy)})
				}
				out = append(out, report.Check{Target: "commit->subscriber p99, 5 ms (" + side.label + ")", Figure: "p99", Info: true, NotRun: first(why, floorWhy)})
			} else {
				out = append(out, notRun(target, "p99", "5 ms", 1, false, why))
			}
			continue
		}
		var c report.Check
		if side.info {
			c = report.NewInfo(target, "commit->subscriber p99", ms(x.Latency.P99), "ms", "5 ms", 5)
		} else if side.bound > 0 {
			c = report.NewCheck(target, "commit->subscriber p99", ms(x.Latency.P99), "ms", "HTTP floor p99", ms(fl.Latency.P99), side.bound, false)
		} else {
			c = report.NewCheck(target, "commit->subscriber p99", ms(x.Latency.P99), "ms", "target 5 ms", 5, 1, false)
		}
		// The latency only counts at the rate the target names: a phase
		// that fell short of it measured an easier load. Short by no more
		// than the disk's stalls during the phase account for (measured
		// beside it: while a flush stalls nothing commits, on either side
		// of the interleaved schedule), it ran the load the machine could
		// carry, and the ratio to the floor beside it decides.
		want := 0.0
		if _, err := fmt.Sscanf(x.Name[strings.LastIndex(x.Name, ", ")+2:], "%g transitions/s", &want); err == nil && want > 0 {
			carried := want * (1 - stalledShare(x))
			if got, ok := figure(x, "achieved transition rate"); ok && got < 0.95*want {
				if got < 0.95*carried {
					c.Met = false
					c.Note = fmt.Sprintf("only %.0f of %.0f transitions/s achieved", got, want)
				} else {
					c.Note = fmt.Sprintf("%.0f of %.0f transitions/s achieved, the disk stalled for %.0f%% of the phase", got, want, 100*stalledShare(x))
				}
			}
			// Nor does a floor that fell short of it.
			if fl != nil {
				if got, ok := figure(fl, "achieved transition rate"); ok && got < 0.95*carried && (c.Note == "" || c.Met) {
					c.Met = false
					c.Note = fmt.Sprintf("the HTTP floor reached only %.0f of %.0f transitions/s", got, want)
				}
			}
		}
		// A miss while the disk stalled says so: the stalled flush held
		// the commits back, and they completed as one burst.
		if !c.Met && c.Note == "" {
			if n, ok := figure(x, stallFigure); ok && n > 0 {
				worst, _ := figure(x, slowestFlushFigure)
				c.Note = fmt.Sprintf("disk: %.0f flushes over %d ms during the phase, slowest %.0f ms", n, stallThreshold/time.Millisecond, worst)
			}
			// Or the transport lost something and a resync delivered it.
			if n, ok := figure(x, PubsubTroubleFigure); ok && n > 0 {
				c.Note = strings.TrimPrefix(c.Note+fmt.Sprintf("; the replicas logged %.0f transport warnings (a resync delivers late)", n), "; ")
			}
		}
		out = append(out, c)
		if side.bound > 0 {
			// The bare NOTIFY floor is the PostgreSQL transport's.
			switch {
			case side.id == "scale-c2c-nats":
			case notifyFloor != nil:
				out = append(out, report.NewInfo("commit->subscriber p99 x NOTIFY floor ("+side.label+")", "commit->subscriber p99", ms(x.Latency.P99), "ms", "NOTIFY→LISTEN floor p99", ms(notifyFloor.Latency.P99)))
			default:
				out = append(out, report.Check{Target: "commit->subscriber p99 x NOTIFY floor (" + side.label + ")", Figure: "p99", Info: true, NotRun: "the NOTIFY floor did not run"})
			}
			out = append(out, report.NewInfo("commit->subscriber p99, 5 ms ("+side.label+")", "commit->subscriber p99", ms(x.Latency.P99), "ms", "5 ms", 5))
		}
	}

	{
		target := "fan-out per subscriber <= 1.5 x bare websocket"
		svc, why1 := get("subs-fanout")
		ref, why2 := get("ref-ws-floor-fanout")
		if svc == nil || ref == nil {
			out = append(out, notRun(target, "cost per subscriber", "floor", 1.5, false, first(why1, why2)))
		} else {
			a, _ := figure(svc, "cost per subscriber")
			b, _ := figure(ref, "cost per subscriber")
			out = append(out, report.NewCheck(target, "service cost per subscriber", a, "µs", "bare websocket floor", b, 1.5, false))
		}
	}

	if x, why := get("webhook-latency"); x == nil {
		out = append(out, notRun("webhook commit->first attempt p99 <= 50 ms", "p99", "50 ms", 1, false, why))
	} else {
		out = append(out, report.NewCheck("webhook commit->first attempt p99 <= 50 ms", "commit->first attempt p99", ms(x.Latency.P99), "ms", "target 50 ms", 50, 1, false))
	}

	// Figures the issue asks for without a bound.
	if x, why := get("webhook-throughput"); x == nil {
		out = append(out, report.Check{Target: "webhook deliveries per second", Figure: "deliveries/s", Info: true, NotRun: why})
	} else {
		v, _ := figure(x, "deliveries per second (dispatcher draining a full outbox)")
		ref, _ := figure(x, "redeems per second filling it")
		out = append(out, report.NewInfo("webhook deliveries per second", "drain of a full outbox", v, "/s", "redeems/s filling it", ref))
	}
	out = append(out, scalingChecks(r)...)
	out = append(out, settlementChecks(r)...)
	pgLife, _ := get("lifecycle-postgres")
	for _, l := range []struct{ id, label string }{{"lifecycle-postgres", "PostgreSQL"}, {"lifecycle-sqlite", "SQLite"}} {
		target := "full lifecycles per second (" + l.label + ")"
		x, why := get(l.id)
		switch {
		case x == nil:
			out = append(out, report.Check{Target: target, Figure: "lifecycles/s", Info: true, NotRun: why})
		case l.id == "lifecycle-sqlite" && pgLife != nil:
			out = append(out, report.NewInfo(target, "lifecycles/s", x.Latency.PerSec, "/s", "on PostgreSQL", pgLife.Latency.PerSec))
		default:
			out = append(out, report.NewInfo(target, "lifecycles/s", x.Latency.PerSec, "/s", "-", 0))
		}
	}
	return out
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// transitionClients lists the client counts the run measured transitions at.
func transitionClients(r *report.Run) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range r.Results {
		var c int
		if _, err := fmt.Sscanf(x.ID, "redeem-rest-c%d", &c); err == nil && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// Failures lists the checks that make a run fail: every MISSED target, and
// every target that could not be measured although its group ran (a NOT
// RUN of a group left out with -only is not a failure).
func Failures(r *report.Run) []string {
	var out []string
	for _, c := range r.Checks {
		switch {
		case c.Info:
		case c.NotRun != "":
			if !strings.Contains(c.NotRun, "not part of this run") {
				out = append(out, c.Target+": NOT RUN: "+c.NotRun)
			}
		case !c.Met:
			out = append(out, c.Target+": MISSED")
		}
	}
	return out
}
