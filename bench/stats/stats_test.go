package stats

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", ms(7), 99, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"median of even takes the lower", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(seq(100)...), 99, 99 * time.Millisecond},
		{"p99.9 of 100 is the max", ms(seq(100)...), 99.9, 100 * time.Millisecond},
		{"p100 is the max", ms(1, 9), 100, 9 * time.Millisecond},
		{"tiny p is the min", ms(4, 5, 6), 0.0001, 4 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestRecorderConcurrentSummary(t *testing.T) {
	r := NewRecorder(0)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 1; i <= 1000; i++ {
				r.Add(time.Duration(i) * time.Microsecond)
			}
			r.Error(errors.New("boom"))
		}(w)
	}
	wg.Wait()
	s := r.Summary(2 * time.Second)
	if s.Count != 8000 || s.Errors != 8 {
		t.Fatalf("count %d errors %d, want 8000 and 8", s.Count, s.Errors)
	}
	if len(s.ErrorMsg) != 1 || s.ErrorMsg[0] != "boom" {
		t.Fatalf("error samples %q, want one distinct", s.ErrorMsg)
	}
	if s.PerSec != 4000 {
		t.Fatalf("rate %v, want 4000/s", s.PerSec)
	}
	if s.P50 != 500*time.Microsecond || s.Min != time.Microsecond || s.Max != time.Millisecond {
		t.Fatalf("p50 %v min %v max %v", s.P50, s.Min, s.Max)
	}
	var n int64
	for i, b := range s.Buckets {
		n += b.Count
		if b.Hi <= b.Lo {
			t.Fatalf("bucket %d empty range %v..%v", i, b.Lo, b.Hi)
		}
		if i > 0 && b.Lo != s.Buckets[i-1].Hi {
			t.Fatalf("bucket %d does not start where %d ends", i, i-1)
		}
	}
	if n != s.Count {
		t.Fatalf("buckets hold %d samples, want %d", n, s.Count)
	}
}
