// Package proc reads what a process costs: resident memory and CPU time from
// /proc, and the Go runtime's own view (goroutines, heap) from the service's
// Prometheus /metrics. A Sampler polls them during a scenario so the report
// shows peaks, not just end states.
package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// RSS returns the resident set size of pid in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("proc: odd VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			return kb * 1024, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("proc: no VmRSS for pid %d", pid)
}

// CPU returns the user+system CPU time pid has used so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// CommandCPU is the CPU time (user and system) used so far by every live
// process whose command name (/proc/<pid>/comm, as in field 2 of its stat)
// is comm: PostgreSQL's postmaster and backends are all "postgres". A
// process that ended between two calls takes its time with it, so a
// difference of two calls is exact only while the set of processes holds
// (a database's backends do for a run's phases).
func CommandCPU(comm string) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, e := range ents {
		name := e.Name()
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // it ended
		}
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open || st[open+1:end] != comm {
			continue
		}
		d, err := parseStatCPU(st)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) may contain spaces and
// parentheses, so fields are counted from its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc: odd stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc: short stat %q", stat)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc: bad utime/stime in %q", stat)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// Metrics is the part of a Go service's /metrics the bench reports.
type Metrics struct {
	Goroutines int64
	HeapInuse  int64
}

// ScrapeMetrics reads go_goroutines and go_memstats_heap_inuse_bytes.
func ScrapeMetrics(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Metrics{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("proc: GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (Metrics, error) {
	var m Metrics
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var dst *int64
		switch name {
		case "go_goroutines":
			dst = &m.Goroutines
		case "go_memstats_heap_inuse_bytes":
			dst = &m.HeapInuse
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return m, fmt.Errorf("proc: metric %s: %w", name, err)
		}
		*dst = int64(f)
		found++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found < 2 {
		return m, fmt.Errorf("proc: go_goroutines or go_memstats_heap_inuse_bytes missing from /metrics")
	}
	return m, nil
}

// Sample is one observation of a process.
type Sample struct {
	At         time.Time
	RSS        int64
	CPU        time.Duration
	Goroutines int64
	HeapInuse  int64
}

// Take observes pid now; metricsURL may be empty for a process without
// /metrics.
func Take(ctx context.Context, pid int, client *http.Client, metricsURL string) (Sample, error) {
	s := Sample{At: time.Now()}
	var err error
	if s.RSS, err = RSS(pid); err != nil {
		return s, err
	}
	if s.CPU, err = CPU(pid); err != nil {
		return s, err
	}
	if metricsURL != "" {
		m, err := ScrapeMetrics(ctx, client, metricsURL)
		if err != nil {
			return s, err
		}
		s.Goroutines, s.HeapInuse = m.Goroutines, m.HeapInuse
	}
	return s, nil
}

// Sampler polls a process in the background and keeps the peaks.
type Sampler struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu                  sync.Mutex
	start, last         Sample
	peakRSS, peakGorout int64
	peakHeap            int64
	n                   int
	err                 error
}

// StartSampler takes a first sample at once and then one every interval.
// Scraping /metrics costs the service a little CPU; an interval of a second
// keeps that below a percent.
func StartSampler(pid int, client *http.Client, metricsURL string, interval time.Duration) (*Sampler, error) {
	ctx, cancel := context.WithCancel(context.Background())
	first, err := Take(ctx, pid, client, metricsURL)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Sampler{cancel: cancel, done: make(chan struct{}), start: first}
	s.observe(first)
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				smp, err := Take(ctx, pid, client, metricsURL)
				if err != nil {
					if ctx.Err() == nil {
						s.mu.Lock()
						s.err = err
						s.mu.Unlock()
					}
					continue
				}
				s.observe(smp)
			}
		}
	}()
	return s, nil
}

func (s *Sampler) observe(smp Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = smp
	s.n++
	s.peakRSS = max(s.peakRSS, smp.RSS)
	s.peakGorout = max(s.peakGorout, smp.Goroutines)
	s.peakHeap = max(s.peakHeap, smp.HeapInuse)
}

// Usage is what a process used over a sampled interval.
type Usage struct {
	StartRSS       int64         `json:"startRssBytes"`
	PeakRSS        int64         `json:"peakRssBytes"`
	EndRSS         int64         `json:"endRssBytes"`
	PeakGoroutines int64         `json:"peakGoroutines,omitempty"`
	EndGoroutines  int64         `json:"endGoroutines,omitempty"`
	PeakHeapInuse  int64         `json:"peakHeapInuseBytes,omitempty"`
	CPU            time.Duration `json:"cpuNs"`
	Samples        int           `json:"samples"`
}

// Stop ends sampling, takes a last sample and returns the usage.
func (s *Sampler) Stop(pid int, client *http.Client, metricsURL string) Usage {
	s.cancel()
	<-s.done
	if last, err := Take(context.Background(), pid, client, metricsURL); err == nil {
		s.observe(last)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return Usage{
		StartRSS: s.start.RSS, PeakRSS: s.peakRSS, EndRSS: s.last.RSS,
		PeakGoroutines: s.peakGorout, EndGoroutines: s.last.Goroutines,
		PeakHeapInuse: s.peakHeap,
		CPU:           s.last.CPU - s.start.CPU,
		Samples:       s.n,
	}
}

// RaiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit (children
// started afterwards inherit it) and returns the new limit. Raising the
// hard limit itself needs CAP_SYS_RESOURCE, which sandboxes often lack, so
// callers plan with what they get.
func RaiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// MachineCPU is the whole machine's CPU time so far from /proc/stat: busy
// (everything but idle and iowait) and total, in clock ticks.
func MachineCPU() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineCPU(string(b))
}

func parseMachineCPU(stat string) (busy, total uint64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("proc: unexpected /proc/stat first line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("proc: /proc/stat field %d: %w", i+1, err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}

// MachineBusy starts measuring how busy the machine's CPUs are; the
// returned func gives the share (0 to 1) since then, or -1 if unknown.
func MachineBusy() func() float64 {
	b0, t0, err0 := MachineCPU()
	return func() float64 {
		b1, t1, err := MachineCPU()
		if err0 != nil || err != nil || t1 <= t0 {
			return -1
		}
		return float64(b1-b0) / float64(t1-t0)
	}
}
