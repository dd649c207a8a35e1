// Package report holds a bench run's results and renders them three ways:
// the fixed-width table printed at the end of `make bench`, results.json
// for machines and later comparison, and a self-contained HTML page with the
// latency distributions drawn as inline SVG (no network, no dependencies).
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/voucherd/voucherd/bench/proc"
	"github.com/voucherd/voucherd/bench/stats"
)

// Result is one scenario or reference measurement.
type Result struct {
	// ID is stable across runs (for comparing JSON files), Name is for people.
	ID    string `json:"id"`
	Group string `json:"group"`
	Name  string `json:"name"`
	// NotRun says why the scenario could not be measured; nothing else is
	// filled then. A missing feature is reported, never faked.
	NotRun string `json:"notRun,omitempty"`
	// Unit is what Latency.Count counts ("req", "lifecycle", "msg", "tx").
	Unit    string         `json:"unit,omitempty"`
	Latency *stats.Summary `json:"latency,omitempty"`
	Usage   *proc.Usage    `json:"usage,omitempty"`
	// Figures are the scenario's other measurements.
	Figures []Figure `json:"figures,omitempty"`
	// Notes explain what exactly ran (e.g. the pgbench script).
	Notes []string `json:"notes,omitempty"`
}

// Figure is a named measurement.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Check is a target: a figure held against a reference (another
// measurement of the same run, or a fixed bound).
type Check struct {
	Target    string  `json:"target"`
	Figure    string  `json:"figure"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit"`
	Reference string  `json:"reference"`
	RefValue  float64 `json:"referenceValue"`
	// Ratio is Value/RefValue.
	Ratio float64 `json:"ratio"`
	// Bound is the ratio the target allows; AtLeast says which side.
	Bound   float64 `json:"bound"`
	AtLeast bool    `json:"atLeast"`
	Met     bool    `json:"met"`
	// NotRun is set when either side could not be measured.
	NotRun string `json:"notRun,omitempty"`
	// Info marks a figure the issue asks for without a bound: printed with
	// its reference (if any), never met or missed.
	Info bool `json:"info,omitempty"`
	// Note qualifies the result (e.g. a rate the phase did not reach).
	Note string `json:"note,omitempty"`
}

// NewInfo is a figure reported without a target.
func NewInfo(target, figure string, value float64, unit, reference string, ref float64) Check {
	c := Check{Target: target, Figure: figure, Value: value, Unit: unit, Reference: reference, RefValue: ref, Info: true}
	if ref > 0 {
		c.Ratio = value / ref
	}
	return c
}

// NewCheck compares value to bound×ref.
func NewCheck(target, figure string, value float64, unit, reference string, ref, bound float64, atLeast bool) Check {
	c := Check{Target: target, Figure: figure, Value: value, Unit: unit, Reference: reference, RefValue: ref, Bound: bound, AtLeast: atLeast}
	if ref > 0 {
		c.Ratio = value / ref
	}
	if atLeast {
		c.Met = ref > 0 && c.Ratio >= bound
	} else {
		c.Met = ref > 0 && c.Ratio <= bound
	}
	return c
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpuModel"`
	MemoryMiB  int64  `json:"memoryMiB"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"goVersion"`
	PostgreSQL string `json:"postgresql"`
	FDLimit    uint64 `json:"fdLimit"`
}

// Run is the whole report.
type Run struct {
	StartedAt time.Time     `json:"startedAt"`
	Elapsed   time.Duration `json:"elapsedNs"`
	Machine   Machine       `json:"machine"`
	Settings  []Figure      `json:"settings,omitempty"`
	Results   []*Result     `json:"results"`
	Checks    []Check       `json:"checks"`
}

// Find returns the result with id, or nil.
func (r *Run) Find(id string) *Result {
	for _, x := range r.Results {
		if x.ID == id {
			return x
		}
	}
	return nil
}

// WriteJSON writes results.json (with the chart buckets).
func (r *Run) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Ms formats a duration in milliseconds with three decimals (µs precision).
func Ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// MiB formats bytes as MiB.
func MiB(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/(1<<20))
}

// Num formats a figure compactly.
func Num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15: // counts
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// WriteTable prints the results and the targets as fixed-width tables.
func (r *Run) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nvoucherd bench — %s, %d CPUs (%s), %d MiB, kernel %s, %s, %s, fd limit %d\n",
		r.StartedAt.UTC().Format(time.RFC3339), m.CPUs, m.CPUModel, m.MemoryMiB, m.Kernel, m.GoVersion, m.PostgreSQL, m.FDLimit)
	for _, s := range r.Settings {
		fmt.Fprintf(w, "  %s: %s %s\n", s.Name, Num(s.Value), s.Unit)
	}
	t := &table{}
	t.row("scenario", "unit", "count", "rate/s", "p50 ms", "p95 ms", "p99 ms", "errors", "RSS peak MiB", "goroutines peak")
	for _, x := range r.Results {
		if x.NotRun != "" {
			t.row(x.Name, "not run: "+x.NotRun)
			continue
		}
		cells := []string{x.Name, x.Unit}
		if l := x.Latency; l != nil {
			cells = append(cells, fmt.Sprint(l.Count), Num(l.PerSec), Ms(l.P50), Ms(l.P95), Ms(l.P99), fmt.Sprint(l.Errors))
		} else {
			cells = append(cells, "-", "-", "-", "-", "-", "-")
		}
		if u := x.Usage; u != nil {
			g := "-"
			if u.PeakGoroutines > 0 {
				g = fmt.Sprint(u.PeakGoroutines)
			}
			cells = append(cells, MiB(u.PeakRSS), g)
		} else {
			cells = append(cells, "-", "-")
		}
		t.row(cells...)
	}
	fmt.Fprintln(w)
	t.write(w)

	var figs []string
	for _, x := range r.Results {
		if x.NotRun != "" {
			continue
		}
		for _, f := range x.Figures {
			figs = append(figs, fmt.Sprintf("  %s — %s: %s %s", x.Name, f.Name, Num(f.Value), f.Unit))
		}
		if x.Latency != nil && len(x.Latency.ErrorMsg) > 0 {
			for _, e := range x.Latency.ErrorMsg {
				figs = append(figs, fmt.Sprintf("  %s — error sample: %s", x.Name, e))
			}
		}
	}
	if len(figs) > 0 {
		fmt.Fprintln(w, "\nfigures:")
		for _, f := range figs {
			fmt.Fprintln(w, f)
		}
	}

	tt := &table{}
	tt.row("target", "figure", "value", "reference", "ref value", "ratio", "bound", "result")
	for _, c := range r.Checks {
		if c.NotRun != "" {
			b := bound(c)
			if c.Info {
				b = "-"
			}
			tt.row(c.Target, c.Figure, "-", c.Reference, "-", "-", b, "NOT RUN: "+c.NotRun)
			continue
		}
		res := "MET"
		if !c.Met {
			res = "MISSED"
		}
		ref, ratio, bnd := Num(c.RefValue)+" "+c.Unit, fmt.Sprintf("%.2f", c.Ratio), bound(c)
		if c.Info {
			res, bnd = "reported", "-"
			if c.RefValue == 0 {
				ref, ratio = "-", "-"
			}
		}
		if c.Note != "" {
			res += " (" + c.Note + ")"
		}
		tt.row(c.Target, c.Figure, Num(c.Value)+" "+c.Unit, c.Reference, ref, ratio, bnd, res)
	}
	fmt.Fprintln(w, "\ntargets:")
	tt.write(w)
}

func bound(c Check) string {
	if c.AtLeast {
		return fmt.Sprintf(">= %.2f", c.Bound)
	}
	return fmt.Sprintf("<= %.2f", c.Bound)
}

type table struct{ rows [][]string }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	var widths []int
	for _, r := range t.rows {
		if len(r) == 2 && strings.HasPrefix(r[1], "not run") {
			continue // spans the row; does not widen columns
		}
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for i, r := range t.rows {
		var b strings.Builder
		for j, c := range r {
			if j > 0 {
				b.WriteString("  ")
			}
			if j == len(r)-1 {
				b.WriteString(c)
				break
			}
			pad := 0
			if j < len(widths) {
				pad = widths[j] - len([]rune(c))
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", max(pad, 0)))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if i == 0 {
			total := 0
			for k, wd := range widths {
				if k == len(widths)-1 {
					wd = min(wd, 12)
				}
				total += wd + 2
			}
			fmt.Fprintln(w, strings.Repeat("-", max(total-2, 0)))
		}
	}
}
