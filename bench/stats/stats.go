// Package stats records latencies exactly (every sample is kept: a bench run
// produces at most a few million, a few tens of MiB) and summarises them as
// count, rate and percentiles, plus log-spaced histogram buckets for charts.
package stats

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Recorder collects latency samples and errors from many goroutines.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
	errors  int64
	// errSample keeps the first few distinct error texts for the report.
	errSample []string
}

// NewRecorder returns an empty recorder with room for n samples.
func NewRecorder(n int) *Recorder {
	return &Recorder{samples: make([]time.Duration, 0, n)}
}

// Add records one successful operation.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// AddBatch records many samples at once (a worker's local buffer).
func (r *Recorder) AddBatch(ds []time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, ds...)
	r.mu.Unlock()
}

// Merge adds o's samples and errors to r.
func (r *Recorder) Merge(o *Recorder) {
	o.mu.Lock()
	samples, errs, msgs := slices.Clone(o.samples), o.errors, slices.Clone(o.errSample)
	o.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, samples...)
	r.errors += errs
	for _, m := range msgs {
		if len(r.errSample) < 5 && !slices.Contains(r.errSample, m) {
			r.errSample = append(r.errSample, m)
		}
	}
}

// Error records a failed operation; err's text is kept if it is one of the
// first five distinct ones.
func (r *Recorder) Error(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors++
	if err == nil || len(r.errSample) >= 5 {
		return
	}
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300]
	}
	if !slices.Contains(r.errSample, msg) {
		r.errSample = append(r.errSample, msg)
	}
}

// Summary is what a run of operations amounts to.
type Summary struct {
	Count    int64         `json:"count"`
	Errors   int64         `json:"errors"`
	Elapsed  time.Duration `json:"elapsedNs"`
	PerSec   float64       `json:"perSec"`
	Min      time.Duration `json:"minNs"`
	Mean     time.Duration `json:"meanNs"`
	P50      time.Duration `json:"p50Ns"`
	P90      time.Duration `json:"p90Ns"`
	P95      time.Duration `json:"p95Ns"`
	P99      time.Duration `json:"p99Ns"`
	P999     time.Duration `json:"p999Ns"`
	Max      time.Duration `json:"maxNs"`
	ErrorMsg []string      `json:"errorSamples,omitempty"`
	// Buckets are log-spaced latency buckets for the report's charts.
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Bucket counts the samples with Lo <= latency < Hi.
type Bucket struct {
	Lo    time.Duration `json:"loNs"`
	Hi    time.Duration `json:"hiNs"`
	Count int64         `json:"count"`
}

// Summary summarises what was recorded over elapsed (the run's wall time;
// the rate is successes per second of it).
func (r *Recorder) Summary(elapsed time.Duration) Summary {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	errs, msgs := r.errors, slices.Clone(r.errSample)
	r.mu.Unlock()
	return Summarize(s, errs, elapsed, msgs)
}

// Summarize computes a Summary from raw samples (sorted in place).
func Summarize(s []time.Duration, errs int64, elapsed time.Duration, msgs []string) Summary {
	slices.Sort(s)
	out := Summary{Count: int64(len(s)), Errors: errs, Elapsed: elapsed, ErrorMsg: msgs}
	if elapsed > 0 {
		out.PerSec = float64(len(s)) / elapsed.Seconds()
	}
	if len(s) == 0 {
		return out
	}
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	out.Min, out.Max = s[0], s[len(s)-1]
	out.Mean = time.Duration(sum / float64(len(s)))
	out.P50 = Percentile(s, 50)
	out.P90 = Percentile(s, 90)
	out.P95 = Percentile(s, 95)
	out.P99 = Percentile(s, 99)
	out.P999 = Percentile(s, 99.9)
	out.Buckets = buckets(s)
	return out
}

// Percentile returns the nearest-rank percentile p (0 < p <= 100) of sorted
// samples: the smallest sample with at least p% of the samples at or below
// it. Nearest rank never invents a value that was not measured.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// bucketsPerDecade sets the chart resolution: 10 buckets per factor of ten.
const bucketsPerDecade = 10

// buckets spreads sorted samples over log-spaced buckets from the smallest
// to the largest sample, so a distribution spanning 50µs to 50ms stays
// readable.
func buckets(sorted []time.Duration) []Bucket {
	lo := sorted[0]
	if lo < time.Microsecond {
		lo = time.Microsecond
	}
	start := math.Floor(math.Log10(float64(lo)) * bucketsPerDecade)
	var out []Bucket
	i := 0
	for k := start; i < len(sorted); k++ {
		b := Bucket{
			Lo: time.Duration(math.Pow(10, k/bucketsPerDecade)),
			Hi: time.Duration(math.Pow(10, (k+1)/bucketsPerDecade)),
		}
		if len(out) == 0 {
			b.Lo = 0
		}
		for i < len(sorted) && sorted[i] < b.Hi {
			b.Count++
			i++
		}
		out = append(out, b)
		if len(out) > 200 { // a guard; ten decades of latency is already absurd
			break
		}
	}
	return out
}
