package graph_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
)

// BenchmarkGraphQLRead runs the bench's voucher(id:) read through the
// whole /graphql handler (auth included) in process, without a network:
// what the GraphQL door itself costs per read.
//
//	go test ./graph -run '^$' -bench GraphQLRead -benchmem
func BenchmarkGraphQLRead(b *testing.B) {
	h := newHarness(b, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	v := h.reserve(payee, ses.Code, nil)
	h.redeem(payee, v.ID, "12.5")
	body, _ := json.Marshal(map[string]any{
		"query":     `query($id: ID!) { voucher(id: $id) { id code status type expectedPayment { id network currency currencyAddress amount wallet { address } } expiresAt createdAt updatedAt } }`,
		"variables": map[string]any{"id": v.ID},
	})
	handler := h.srv.Config.Handler
	want := []byte(v.ID)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		// The process's CPU time per read (this goroutine, the garbage
		// collector and SQLite alike): a loaded machine stretches ns/op
		// but moves this much less.
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	}()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+payee.token)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if w.Code != 200 || !bytes.Contains(w.Body.Bytes(), want) || bytes.Contains(w.Body.Bytes(), []byte(`"errors"`)) {
			b.Fatalf("%d %s", w.Code, w.Body.Bytes())
		}
	}
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
