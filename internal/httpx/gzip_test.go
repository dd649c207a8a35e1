package httpx

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// A compressed answer after a collection reuses a kept compressor: it
// costs kilobytes, not the megabyte a new one (gzhttp's sync.Pool, emptied
// by every collection) did each time a route was hit now and then, as
// /metrics is. Every answer decodes to what the handler wrote.
func TestGzipKeepsCompressorsAcrossCollections(t *testing.T) {
	body := strings.Repeat(`{"metric":"voucherd_requests_total","value":12345},`, 200)
	h := Gzip(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
	}))
	serve := func() {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("not compressed: %v", rec.Header())
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || string(got) != body {
			t.Fatalf("decoded %d bytes, %v; want the %d written", len(got), err, len(body))
		}
	}
	serve() // a compressor exists and is kept
	var worst uint64
	for i := 0; i < 5; i++ {
		runtime.GC()
		runtime.GC() // past sync.Pool's victim cache too
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		serve()
		runtime.ReadMemStats(&after)
		worst = max(worst, after.TotalAlloc-before.TotalAlloc)
	}
	if worst > 256<<10 {
		t.Fatalf("a compressed answer after a collection allocated %d KiB: its compressor was not kept", worst>>10)
	}
}
