package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// flusher times what a durable commit waits for: an 8 KiB write and
// fdatasync (what a WAL flush is), on a file of its own in the database
// cluster's filesystem.
type flusher struct {
	f   *os.File
	buf []byte
}

func newFlusher(dir string) (*flusher, error) {
	f, err := os.CreateTemp(dir, "flush-probe-*")
	if err != nil {
		return nil, err
	}
	return &flusher{f: f, buf: make([]byte, 8<<10)}, nil
}

// flush writes and syncs once and returns how long that took.
func (fl *flusher) flush() (time.Duration, error) {
	t := time.Now()
	if _, err := fl.f.WriteAt(fl.buf, 0); err != nil {
		return 0, err
	}
	if err := fl.f.Sync(); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

func (fl *flusher) close() {
	fl.f.Close()
	os.Remove(fl.f.Name())
}

// diskProbe measures the disk every durable commit waits for, flushing
// back to back for d before anything else runs. The transition and
// commit→subscriber figures depend on it: a commit takes at least one
// flush, and a flush that stalls holds every commit behind it, so the
// writes that pile up meanwhile land as one burst. Its maximum is printed
// beside the percentiles for that reason.
func (h *Harness) diskProbe(ctx context.Context, dir string, d time.Duration) {
	const id, name = "ref-disk-flush", "disk: 8 KiB write + fdatasync back to back, database filesystem, before the scenarios"
	err := guard(func() error {
		fl, err := newFlusher(dir)
		if err != nil {
			return err
		}
		defer fl.close()
		rec := stats.NewRecorder(0)
		start := time.Now()
		for time.Since(start) < d && ctx.Err() == nil {
			took, err := fl.flush()
			if err != nil {
				return err
			}
			rec.Add(took)
		}
		sum := rec.Summary(time.Since(start))
		h.add(&report.Result{ID: id, Group: "references", Name: name, Unit: "flush", Latency: &sum,
			Figures: []report.Figure{{Name: "slowest flush", Value: ms(sum.Max), Unit: "ms"}},
			Notes:   []string{fmt.Sprintf("file in %s; each flush waits for the previous one", filepath.Base(dir))}})
		return nil
	})
	if err != nil {
		h.notRun(id, "references", name, "failed: "+err.Error())
	}
}

// stallThreshold is a flush slow enough to break the 5 ms
// commit→subscriber target by itself: the commits it holds back complete
// together and their updates queue behind each other.
const stallThreshold = 20 * time.Millisecond

// The figures of flushWatch that checks reads: the count of sampled
// flushes over stallThreshold, and the slowest.
var stallFigure = fmt.Sprintf("of them over %d ms", stallThreshold/time.Millisecond)

const slowestFlushFigure = "slowest flush during the phase"

// The figures stalledShare reads.
const (
	flushesSampledFigure = "disk flushes sampled during the phase (1 per 50 ms)"
	stalledTimeFigure    = "time spent in those slow flushes"
)

// stalledShare is the share of r's phase the disk spent in flushes over
// stallThreshold, from flushWatch's figures: the slow flushes' time over
// the phase's (a sample every 50 ms, plus the slow flushes, which delay
// the next sample). Zero without them.
func stalledShare(r *report.Result) float64 {
	var n, stalled float64 // samples, ms
	for _, f := range r.Figures {
		switch f.Name {
		case flushesSampledFigure:
			n = f.Value
		case stalledTimeFigure:
			stalled = f.Value
		}
	}
	if stalled <= 0 {
		return 0
	}
	return stalled / (n*50 + stalled)
}

// flushWatch samples the disk while a phase runs: one flush every 50 ms
// (20 a second beside the phase's own commits, which it does not slow),
// so a phase's result can be read against what the disk did meanwhile.
// stop ends it and returns the figures to print beside the phase.
func flushWatch(dir string) (stop func() []report.Figure) {
	fl, err := newFlusher(dir)
	if err != nil {
		return func() []report.Figure { return nil }
	}
	done := make(chan struct{})
	out := make(chan []report.Figure, 1)
	go func() {
		var worst time.Duration
		n, stalls := 0, 0
		var stalled time.Duration
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fl.close()
				out <- []report.Figure{
					{Name: flushesSampledFigure, Value: float64(n), Unit: ""},
					{Name: stallFigure, Value: float64(stalls), Unit: ""},
					{Name: stalledTimeFigure, Value: ms(stalled), Unit: "ms"},
					{Name: slowestFlushFigure, Value: ms(worst), Unit: "ms"},
				}
				return
			case <-tick.C:
			}
			took, err := fl.flush()
			if err != nil {
				continue
			}
			n++
			worst = max(worst, took)
			if took > stallThreshold {
				stalls++
				stalled += took
			}
		}
	}()
	return func() []report.Figure {
		close(done)
		return <-out
	}
}
