package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/bench/stats"
)

// Op is one operation of a closed loop; worker numbers run from 0.
type Op func(ctx context.Context, worker int) error

// ClosedLoop runs workers that each repeat op back to back for d (after an
// unrecorded warm-up), and summarises latencies and the success rate.
// Closed loops measure capacity: each client waits for its answer before
// sending again, as the spec's clients do.
func ClosedLoop(ctx context.Context, workers int, warmup, d time.Duration, op Op) stats.Summary {
	if warmup > 0 {
		runLoop(ctx, workers, warmup, op, nil)
	}
	rec := stats.NewRecorder(0)
	elapsed := runLoop(ctx, workers, d, op, rec)
	return rec.Summary(elapsed)
}

func runLoop(ctx context.Context, workers int, d time.Duration, op Op, rec *stats.Recorder) time.Duration {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	var last atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t := time.Now()
				if t.After(deadline) {
					break
				}
				err := op(ctx, w)
				lat := time.Since(t)
				if rec == nil {
					continue
				}
				if err != nil {
					rec.Error(err)
				} else {
					local = append(local, lat)
				}
			}
			if rec != nil {
				rec.AddBatch(local)
			}
			end := time.Now().UnixNano()
			for {
				cur := last.Load()
				if end <= cur || last.CompareAndSwap(cur, end) {
					break
				}
			}
		}(w)
	}
	wg.Wait()
	return time.Duration(last.Load() - start.UnixNano())
}

// OpenLoop starts op at a fixed rate for d, whatever the answers take
// (up to maxInFlight at once), and returns when every started op has
// finished. op gets the op's sequence number; lag records how late each op
// started against its schedule, so a service that cannot keep up shows as
// lag rather than as a quietly lower rate.
func OpenLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, op func(ctx context.Context, i int) error) (sent int, errs *stats.Recorder, lag stats.Summary, elapsed time.Duration) {
	errs = stats.NewRecorder(0)
	lags := stats.NewRecorder(0)
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		lags.Add(max(time.Since(due), 0))
		wg.Add(1)
		sent++
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := op(ctx, i); err != nil {
				errs.Error(err)
			}
		}(i)
	}
	wg.Wait()
	elapsed = time.Since(start)
	return sent, errs, lags.Summary(elapsed), elapsed
}
