package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// hostileBodies are GraphQL requests the service must refuse
// (validation_failed) without holding a CPU (issue 18): the two shapes
// that once held a core for seconds to minutes (fragments spreading the
// next one twice per level; one field repeated, at 30 and 59 KiB), and
// bodies breaking the JSON text rules (a NUL, a repeated key). Sent
// without a token, as an attacker would.
func hostileBodies() [][]byte {
	var bomb strings.Builder
	bomb.WriteString("query { ...F0 }\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&bomb, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
	}
	bomb.WriteString("fragment F40 on Query { viewer { id } }\n")
	docs := []string{
		bomb.String(),
		"{" + strings.Repeat(" viewer { __typename }", 1400) + " }",
		"{" + strings.Repeat(" viewer { __typename }", 2700) + " }",
	}
	var out [][]byte
	for _, d := range docs {
		out = append(out, mustJSON(map[string]any{"query": d}))
	}
	return append(out,
		[]byte(`{"query":"query($id: ID!) { voucher(id: $id) { id } }","variables":{"id":"vch_\u0000"}}`),
		[]byte(`{"query":"{ viewer { id } }","query":"{ viewer { __typename } }"}`))
}

// hostile measures what hostile documents cost everyone else (issue 18,
// "Performance"): the service's answer time for a refused hostile
// document, sent back to back by 2 clients (p99 <= 100 ms), and the REST
// GET's p99 from 1 client while they do, against the same GET alone
// (<= 2x). The quiet and the loaded GET take turns slice by slice, so a
// change in the machine's speed falls on both alike. Rate limits are off
// in the bench, so no refusal is cut short by a 429: every document is
// read and refused. Refusal pacing (graph/pacing.go) is on, as in
// production: it is not a rate limit, and it is what keeps the two
// clients, which share the harness's address, to a tenth of a core.
func (s *pgScenarios) hostile(ctx context.Context) {
	h := s.h
	const attackers = 2
	ids := []struct{ id, name string }{
		{"hostile-refusal", fmt.Sprintf("refused hostile GraphQL documents, %d clients back to back", attackers)},
		{"hostile-get-quiet", "GET voucher REST, 1 client (taking turns with the loaded GET)"},
		{"hostile-get-loaded", fmt.Sprintf("GET voucher REST, 1 client, while %d clients send hostile documents", attackers)},
	}
	reason := s.setupReason("reserve-voucher", "redeem-voucher", "GET voucher")
	if reason != "" {
		for _, x := range ids {
			h.notRun(x.id, "hostile", x.name, reason)
		}
		return
	}
	bodies := hostileBodies()
	attackConns := newLeanConns(s.svc.Addr, attackers)
	defer attackConns.Close()
	getConns := newLeanConns(s.svc.Addr, 1)
	defer getConns.Close()
	want := []byte(s.readID)
	getOp := func(ctx context.Context, w int) error {
		b, err := getConns.ok(ctx, w, http.MethodGet, "/api/v1/vouchers/"+s.readID, s.payee, nil)
		if err == nil && !bytes.Contains(b, want) {
			err = fmt.Errorf("answer does not name the voucher: %.200s", b)
		}
		return err
	}
	var turn [attackers]int
	attackOp := func(ctx context.Context, w int) error {
		body := bodies[turn[w]%len(bodies)]
		turn[w]++
		status, b, err := attackConns[w].Do(ctx, http.MethodPost, "/graphql", "", body)
		if err != nil {
			return err
		}
		if (status != http.StatusOK && status != http.StatusBadRequest) || !bytes.Contains(b, []byte(`"validation_failed"`)) {
			return fmt.Errorf("hostile document answered %d %.200s", status, b)
		}
		return nil
	}
	// Every body is refused as it should be before anything is timed.
	for range bodies {
		if err := attackOp(ctx, 0); err != nil {
			h.notRun(ids[0].id, "hostile", ids[0].name, err.Error())
			return
		}
	}
	if err := getOp(ctx, 0); err != nil {
		h.notRun(ids[1].id, "hostile", ids[1].name, err.Error())
		return
	}
	warm(ctx, 1, h.cfg.Warmup, getOp)
	warm(ctx, attackers, h.cfg.Warmup, attackOp)

	refusals, quiet, loaded := stats.NewRecorder(0), stats.NewRecorder(0), stats.NewRecorder(0)
	var tRefusals, tQuiet, tLoaded time.Duration
	// The service's CPU time and the machine's busy share, per side.
	var cpuQuiet, cpuLoaded time.Duration
	var busyQuiet, ticksQuiet, busyLoaded, ticksLoaded uint64
	pid := s.svc.Pid()
	measure := func(cpu *time.Duration, busy, ticks *uint64, run func()) {
		c0, _ := proc.CPU(pid)
		b0, t0, _ := proc.MachineCPU()
		run()
		c1, _ := proc.CPU(pid)
		b1, t1, _ := proc.MachineCPU()
		*cpu += c1 - c0
		*busy += b1 - b0
		*ticks += t1 - t0
	}
	slice := h.cfg.Duration / readSlices
	prof := s.profile("hostile")
	for n := 0; n < readSlices && ctx.Err() == nil; n++ {
		measure(&cpuQuiet, &busyQuiet, &ticksQuiet, func() { tQuiet += runLoop(ctx, 1, slice, getOp, quiet) })
		measure(&cpuLoaded, &busyLoaded, &ticksLoaded, func() {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tRefusals += runLoop(ctx, attackers, slice, attackOp, refusals)
			}()
			tLoaded += runLoop(ctx, 1, slice, getOp, loaded)
			wg.Wait()
		})
	}
	prof()
	share := func(busy, ticks uint64) float64 {
		if ticks == 0 {
			return -1
		}
		return float64(busy) / float64(ticks)
	}
	serviceCPU := func(cpu, elapsed time.Duration) report.Figure {
		return report.Figure{Name: "service CPU (cores)", Value: float64(cpu) / float64(max(elapsed, 1)), Unit: "cores"}
	}
	load := report.Figure{Name: "machine load average (1 min) at the end", Value: loadAverage(), Unit: ""}
	note := fmt.Sprintf("%d slices of %s; the quiet and the loaded GET take turns", readSlices, slice)
	rs := refusals.Summary(tRefusals)
	h.add(&report.Result{ID: ids[0].id, Group: "hostile", Name: ids[0].name, Unit: "req", Latency: &rs,
		Figures: []report.Figure{{Name: "process CPU per refusal (with the loaded GET's share)", Value: float64(cpuLoaded) / float64(max(rs.Count, 1)) / float64(time.Microsecond), Unit: "µs"}},
		Notes:   []string{note, fmt.Sprintf("%d bodies in turn: fragments spreading twice per level (40 levels), 1,400 and 2,700 repeated fields, a NUL in a variable, a repeated key; no token; rate limits off, refusal pacing on", len(bodies))}})
	qs := quiet.Summary(tQuiet)
	h.add(&report.Result{ID: ids[1].id, Group: "hostile", Name: ids[1].name, Unit: "req", Latency: &qs, Notes: []string{note},
		Figures: []report.Figure{serviceCPU(cpuQuiet, tQuiet), busyFigure(share(busyQuiet, ticksQuiet))}})
	ls := loaded.Summary(tLoaded)
	h.add(&report.Result{ID: ids[2].id, Group: "hostile", Name: ids[2].name, Unit: "req", Latency: &ls, Notes: []string{note},
		Figures: []report.Figure{serviceCPU(cpuLoaded, tLoaded), busyFigure(share(busyLoaded, ticksLoaded)), load}})
}

// loadAverage is the machine's 1-minute load average (-1 if unknown): on
// a machine shared with other work, the GET's p99 measures that work too.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var v float64
	if _, err := fmt.Sscanf(string(b), "%g", &v); err != nil {
		return -1
	}
	return v
}
