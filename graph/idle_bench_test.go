package graph_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/storage"
)

// BenchmarkIdleVoucherUpdated measures the server's memory per idle
// voucherUpdated subscription, one per connection as in make bench's
// subs-idle scenario and with its selection, for each way of following: a
// session (what subs-idle uses), a voucher (id: its current state is
// rendered and sent first), a business. As in BenchmarkIdleSubscriptions
// the clients run in a child process. Reported per subscription, after
// full collections:
//
//   - heap-B/sub: HeapInuse, the spans holding live objects (what RSS
//     follows right after the subscriptions were opened);
//   - live-B/sub: HeapAlloc, the live objects themselves;
//   - stack-B/sub: goroutine stacks.
//
// The first case run in a process also pays for the reader goroutines'
// descriptors (about 0.45 KiB each, never freed); later cases reuse them,
// so compare a case with itself, or run one alone (-bench
// 'IdleVoucherUpdated/id$').
//
// N is VOUCHERD_BENCH_SUBS (default 2000). VOUCHERD_BENCH_HEAPPROFILE=dir
// writes dir/idle-<kind>.pprof, a heap profile of the open subscriptions
// recording every allocation (go tool pprof -sample_index=inuse_space).
//
//	go test ./graph -run '^$' -bench IdleVoucherUpdated -benchtime 1x
func BenchmarkIdleVoucherUpdated(b *testing.B) {
	n := 2000
	if s := os.Getenv("VOUCHERD_BENCH_SUBS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	profileDir := os.Getenv("VOUCHERD_BENCH_HEAPPROFILE")
	if profileDir != "" {
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = 512 * 1024 }()
	}
	const selection = `{ id version status updatedAt }`
	for _, kind := range []string{"sessionId", "id", "businessId"} {
		b.Run(kind, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h := newHarness(b, storage.SQLite, harnessOptions{})
				owner := h.user()
				biz, err := h.businesses.Create(owner.ctx(), business.CreateInput{Name: ptr("Idle")})
				if err != nil {
					b.Fatal(err)
				}
				payer := h.device()
				ses, payee := h.session(payer)
				v := h.reserve(payee, ses.Code, nil)
				token, arg := payer.token, ses.ID
				switch kind {
				case "id":
					token, arg = payee.token, v.ID
				case "businessId":
					token, arg = owner.token, biz.ID
				}
				query := `subscription($a: ID!) { voucherUpdated(` + kind + `: $a) ` + selection + ` }`
				heap0, live0, stack0 := liveMem()
				stop := startVoucherClients(b, h.ws, token, query, arg, n)
				waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == int64(n) })
				time.Sleep(200 * time.Millisecond)
				heap1, live1, stack1 := liveMem()
				per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
				b.ReportMetric(per(heap1, heap0), "heap-B/sub")
				b.ReportMetric(per(live1, live0), "live-B/sub")
				b.ReportMetric(per(stack1, stack0), "stack-B/sub")
				if profileDir != "" {
					f, err := os.Create(fmt.Sprintf("%s/idle-%s.pprof", profileDir, kind))
					if err != nil {
						b.Fatal(err)
					}
					if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
				stop()
				waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == 0 })
			}
		})
	}
}

// liveMem collects until stacks have shrunk to their steady state (see
// memNow) and returns HeapInuse, HeapAlloc and StackInuse.
func liveMem() (inuse, live, stack uint64) {
	for i := 0; i < 6; i++ {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc, m.StackInuse
}

// startVoucherClients runs n connections in a child process, each with
// one subscription to query with $a = arg, and returns once every
// subscribe is sent (and, for id, the current state received); stop ends
// the process.
func startVoucherClients(b testing.TB, url, token, query, arg string, n int) (stop func()) {
	b.Helper()
	spec, _ := json.Marshal(idleClientSpec{URL: url, Token: token, Query: query, Arg: arg, N: n})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdleVoucherClients$")
	cmd.Env = append(os.Environ(), "VOUCHERD_HELPER_VOUCHER_CLIENTS="+string(spec))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		b.Fatalf("client process: %q %v", line, err)
	}
	return func() {
		stdin.Close()
		_ = cmd.Wait()
	}
}

type idleClientSpec struct {
	URL, Token, Query, Arg string
	N                      int
}

// TestHelperIdleVoucherClients is BenchmarkIdleVoucherUpdated's client
// process; it does nothing in a normal test run.
func TestHelperIdleVoucherClients(t *testing.T) {
	raw := os.Getenv("VOUCHERD_HELPER_VOUCHER_CLIENTS")
	if raw == "" {
		t.Skip("helper process for BenchmarkIdleVoucherUpdated")
	}
	var spec idleClientSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	id := strings.Contains(spec.Query, "(id:")
	for i := 0; i < spec.N; i++ {
		c := dialWS(t, spec.URL, transportWS)
		c.init(spec.Token)
		c.subscribe("1", spec.Query, map[string]any{"a": spec.Arg})
		if id {
			if m := c.next(10 * time.Second); m.Type != "next" {
				t.Fatalf("want the current state, got %s %s", m.Type, m.Payload)
			}
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
