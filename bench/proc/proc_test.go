package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name, stat string
		want       time.Duration
		wantErr    bool
	}{
		{"plain", "123 (voucherd) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 0 0", 3 * time.Second, false},
		{"name with spaces and parens", "9 (a (b) c) R 1 9 9 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 0 0", 100 * time.Millisecond, false},
		{"truncated", "9 (x) R 1 2", 0, true},
		{"no name", "garbage", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU(tt.stat)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseStatCPU = %v, %v; want %v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseMetrics(t *testing.T) {
	body := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_memstats_heap_inuse_bytes 1.2345e+07
go_threads 9
`
	m, err := parseMetrics(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if m.Goroutines != 42 || m.HeapInuse != 12345000 {
		t.Fatalf("got %+v", m)
	}
	if _, err := parseMetrics(strings.NewReader("go_threads 9\n")); err == nil {
		t.Fatal("missing series must be an error, not zeros")
	}
}

func TestOwnProcess(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS = %d, %v; a Go test binary has more than 1 MiB resident", rss, err)
	}
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the counter moves (its tick is 10 ms). On a loaded
	// machine 60 ms of wall time can hold less than a tick of this
	// process's CPU, so the burn goes on until the counter moves; a
	// counter that never does in 20 s of burning is the failure.
	deadline := time.Now().Add(20 * time.Second)
	x := 0
	for {
		for i := 0; i < 1_000_000; i++ {
			x++
		}
		after, err := CPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU did not advance: %v -> %v (x=%d)", before, after, x)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	busy, total, err := parseMachineCPU("cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7\n")
	if err != nil || busy != 160 || total != 980 {
		t.Fatalf("busy %d total %d err %v", busy, total, err)
	}
	if _, _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Fatal("accepted a line that is not the cpu summary")
	}
}

// CommandCPU adds up the processes of one command name: this test
// binary's own time is in its sum, and a name no process has sums to zero.
func TestCommandCPU(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(comm))
	x := 0
	for {
		own, err := CPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if own > 0 {
			all, err := CommandCPU(name)
			if err != nil {
				t.Fatal(err)
			}
			if all < own {
				t.Fatalf("CommandCPU(%q) = %v, less than this process's own %v", name, all, own)
			}
			break
		}
		for i := 0; i < 1_000_000; i++ {
			x++
		}
	}
	if d, err := CommandCPU("no-such-command-" + strconv.Itoa(x)); err != nil || d != 0 {
		t.Fatalf("CommandCPU of a name nobody has = %v, %v", d, err)
	}
}
