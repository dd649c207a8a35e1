package graph_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// BenchmarkIdleSubscriptions measures what idle voucherUpdated
// subscriptions cost the server: the GraphQL door runs in this process and
// a child process (this test binary again) opens the websockets, so the
// numbers hold no client memory and can be read after a full GC. Reported
// per subscription: Go heap and goroutine stacks in use, and goroutines.
// N is VOUCHERD_BENCH_SUBS (default 2000; both processes' file descriptor
// limits bound it).
//
//	go test ./graph -run '^$' -bench IdleSubscriptions -benchtime 1x
func BenchmarkIdleSubscriptions(b *testing.B) {
	n := 2000
	if s := os.Getenv("VOUCHERD_BENCH_SUBS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, perConn := range []int{1, 32} {
		b.Run(fmt.Sprintf("%d per connection", perConn), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h := newHarness(b, storage.SQLite, harnessOptions{})
				payer := h.device()
				ses, _ := h.session(payer)
				conns := n / perConn
				subs := conns * perConn
				heap0, stack0, g0 := memNow()
				stop := startClients(b, h.ws, payer.token, ses.ID, conns, perConn)
				waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == int64(subs) })
				time.Sleep(200 * time.Millisecond)
				heap1, stack1, g1 := memNow()
				dh, ds := float64(heap1)-float64(heap0), float64(stack1)-float64(stack0)
				b.ReportMetric(dh/float64(subs), "heap-B/sub")
				b.ReportMetric(ds/float64(subs), "stack-B/sub")
				b.ReportMetric((dh+ds)/float64(subs), "B/sub")
				b.ReportMetric(float64(g1-g0)/float64(subs), "goroutines/sub")
				stop()
				waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == 0 })
			}
		})
	}
}

func memNow() (heap, stack uint64, goroutines int) {
	// Each GC halves stacks using under a quarter of their size: several
	// rounds reach the steady state a long-running server is in.
	for i := 0; i < 6; i++ {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse, runtime.NumGoroutine()
}

// startClients runs the client process and returns once its subscriptions
// are sent; stop ends it (closing every socket).
func startClients(b testing.TB, url, token, sessionID string, conns, perConn int) (stop func()) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdleClients$")
	cmd.Env = append(os.Environ(), "VOUCHERD_HELPER_CLIENTS="+strings.Join([]string{url, token, sessionID, strconv.Itoa(conns), strconv.Itoa(perConn)}, "|"))
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

// TestHelperIdleClients is the benchmark's client process; it does nothing
// in a normal test run.
func TestHelperIdleClients(t *testing.T) {
	spec := os.Getenv("VOUCHERD_HELPER_CLIENTS")
	if spec == "" {
		t.Skip("helper process for BenchmarkIdleSubscriptions")
	}
	f := strings.Split(spec, "|")
	url, token, sessionID := f[0], f[1], f[2]
	conns, _ := strconv.Atoi(f[3])
	perConn, _ := strconv.Atoi(f[4])
	for i := 0; i < conns; i++ {
		c := dialWS(t, url, transportWS)
		c.init(token)
		for k := 0; k < perConn; k++ {
			c.subscribe(strconv.Itoa(k), sessionSub, map[string]any{"s": sessionID})
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// BenchmarkCommitToSubscriber measures how long a committed voucher change
// takes to reach its websocket subscriber: 100 payees each watch their
// voucher while its payer negotiates (a repeatable transition) ten times a
// second, about 1,000 changes a second in all. Reported are the median and
// 99th percentile from the service call's return (the commit) to the
// subscriber's receipt.
//
//	go test ./graph -run '^$' -bench CommitToSubscriber -benchtime 1x
func BenchmarkCommitToSubscriber(b *testing.B) {
	for _, dialect := range testdb.Dialects {
		b.Run(dialect, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h := newHarness(b, dialect, harnessOptions{})
				// The first changes of each watcher warm up (connections in
				// the pools, stacks, caches) and are not counted.
				const watchers, perWatcher, warmup = 100, 40, 10
				in := voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{Network: "ethereum", Currency: "USDT",
					CurrencyAddress: "0xdAC17F958D2ee523a2206206994597C13D831ec7", Amount: "1",
					Wallet: &voucher.WalletInput{Address: payeeWallet}}}
				var mu sync.Mutex
				var lat []time.Duration
				var wg sync.WaitGroup
				ready := make(chan func(), watchers)
				for j := 0; j < watchers; j++ {
					payer := h.device()
					ses, payee := h.session(payer)
					v := h.reserve(payee, ses.Code, nil)
					h.redeem(payee, v.ID, "10")
					c := dialWS(b, h.ws, transportWS)
					c.init(payee.token)
					c.subscribe("v", `subscription($id: ID!) { voucherUpdated(id: $id) { id version } }`, map[string]any{"id": v.ID})
					c.next(5 * time.Second) // the current state
					wg.Add(1)
					ready <- func() {
						defer wg.Done()
						for k := 0; k < perWatcher; k++ {
							time.Sleep(time.Duration(benchPace+rand.IntN(benchPace/2)) * time.Millisecond)
							r, err := h.vouchers.Negotiate(payer.ctx(), v.ID, in)
							if err != nil {
								b.Error(err)
								return
							}
							committed := time.Now()
							for {
								var ev struct{ VoucherUpdated struct{ Version int } }
								c.result("v", 10*time.Second, &ev)
								if ev.VoucherUpdated.Version >= r.Version {
									break
								}
							}
							if k >= warmup {
								mu.Lock()
								lat = append(lat, time.Since(committed))
								mu.Unlock()
							}
						}
					}
				}
				close(ready)
				start := time.Now()
				for f := range ready {
					go f()
				}
				wg.Wait()
				elapsed := time.Since(start)
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				if len(lat) == 0 {
					b.Fatal("no changes measured")
				}
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "changes/s")
			}
		})
	}
}

// benchPace is the milliseconds between one watcher's changes (about 80).
var benchPace = func() int {
	if s := os.Getenv("VOUCHERD_BENCH_PACE_MS"); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	return 80
}()
