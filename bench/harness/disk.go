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

// diskProbe measures the disk every durable commit waits for: an 8 KiB
// write and fdatasync (what a WAL flush is) on the database cluster's own
// filesystem, back to back for d, before anything else runs. The
// transition and commit→subscriber figures depend on it: a commit takes
// at least one flush, and a flush that stalls holds every commit behind
// it, so the writes that pile up meanwhile land as one burst. Its maximum
// is printed beside the percentiles for that reason.
func (h *Harness) diskProbe(ctx context.Context, dir string, d time.Duration) {
	const id, name = "ref-disk-flush", "disk: 8 KiB write + fdatasync back to back, database filesystem, before the scenarios"
	err := guard(func() error {
		f, err := os.CreateTemp(dir, "flush-probe-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		buf := make([]byte, 8<<10)
		rec := stats.NewRecorder(0)
		start := time.Now()
		for time.Since(start) < d && ctx.Err() == nil {
			t := time.Now()
			if _, err := f.WriteAt(buf, 0); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			rec.Add(time.Since(t))
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
