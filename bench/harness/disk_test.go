package harness

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFlushWatchSamplesTheDiskAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	stop := flushWatch(dir)
	time.Sleep(300 * time.Millisecond)
	figs := stop()
	if len(figs) != 4 {
		t.Fatalf("figures: %+v", figs)
	}
	if figs[0].Value < 1 {
		t.Errorf("no flush sampled in 300 ms: %+v", figs)
	}
	if figs[3].Value <= 0 {
		t.Errorf("slowest flush not measured: %+v", figs)
	}
	if figs[1].Value > figs[0].Value {
		t.Errorf("more slow flushes than flushes: %+v", figs)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("probe file left behind: %v", left)
	}
}

func TestFlushWatchWithoutADirectoryReportsNothing(t *testing.T) {
	stop := flushWatch(filepath.Join(t.TempDir(), "missing"))
	if figs := stop(); figs != nil {
		t.Errorf("figures from a probe that could not start: %+v", figs)
	}
}
