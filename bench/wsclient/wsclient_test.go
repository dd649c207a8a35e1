package wsclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestFields(t *testing.T) {
	frame := []byte(`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_0001","version":42,"status":"NEGOTIATED","updatedAt":"2026-11-27T10:00:00Z"}}}}`)
	if got := string(MessageType(frame)); got != "next" {
		t.Fatalf("type %q", got)
	}
	if got := string(StringField(frame, "status")); got != "NEGOTIATED" {
		t.Fatalf("status %q", got)
	}
	if v, ok := IntField(frame, "version"); !ok || v != 42 {
		t.Fatalf("version %d %v", v, ok)
	}
	// What a decoder reads, the scan reads (spaces around the colon too).
	spaced := []byte(`{ "type" : "ping", "payload" : { "n" : 7 } }`)
	var m struct {
		Type    string          `json:"type"`
		Payload struct{ N int } `json:"payload"`
	}
	if err := json.Unmarshal(spaced, &m); err != nil {
		t.Fatal(err)
	}
	if got := string(MessageType(spaced)); got != m.Type {
		t.Fatalf("type %q, decoder %q", got, m.Type)
	}
	if v, ok := IntField(spaced, "n"); !ok || v != m.Payload.N {
		t.Fatalf("n %d %v, decoder %d", v, ok, m.Payload.N)
	}
	// A key that appears only as a value is not a key; an escaped value,
	// a missing key, a non-number are not read.
	for _, c := range []struct {
		frame, key string
	}{
		{`{"a":"type","b":1}`, "type"},
		{`{"type":"ne\"xt"}`, "type"},
		{`{"id":1}`, "type"},
		{`{"type":`, "type"},
		{`{"type":null}`, "type"},
	} {
		if got := StringField([]byte(c.frame), c.key); got != nil {
			t.Errorf("%s: %s = %q, want nothing", c.frame, c.key, got)
		}
	}
	for _, f := range []string{`{"version":"3"}`, `{"version":}`, `{"version":-1}`, `{"v":1}`, `{"version":99999999999999999999}`} {
		if v, ok := IntField([]byte(f), "version"); ok {
			t.Errorf("%s: version %d, want nothing", f, v)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = MessageType(frame)
		_, _ = IntField(frame, "version")
		_ = StringField(frame, "status")
	}); n != 0 {
		t.Fatalf("the scans allocate %.1f times", n)
	}
}

// frameServer writes n copies of frame (text frames, unmasked, as a server
// sends them) in one write straight to the socket, then a ping message,
// so nothing on its side allocates per frame; it reports the pong it gets.
func frameServer(t *testing.T, frame []byte, n int, pong chan<- string) *httptest.Server {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	raw := func(b []byte) []byte {
		h := []byte{0x81}
		switch {
		case len(b) < 126:
			h = append(h, byte(len(b)))
		default:
			h = append(h, 126, byte(len(b)>>8), byte(len(b)))
		}
		return append(h, b...)
	}
	one := raw(frame)
	all := make([]byte, 0, len(one)*n+64)
	for range n {
		all = append(all, one...)
	}
	all = append(all, raw([]byte(`{"type":"ping"}`))...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := c.UnderlyingConn().Write(all); err != nil {
			return
		}
		_, m, err := c.ReadMessage()
		if err == nil {
			pong <- string(m)
		}
		_, _, _ = c.ReadMessage() // until the client leaves
	}))
	t.Cleanup(srv.Close)
	return srv
}

// allocsPerFrame reads n frames with run and returns the process's heap
// allocations per frame over the reading.
func allocsPerFrame(t *testing.T, n int, run func(c *Conn, got func()) error) float64 {
	frame := []byte(`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_0001","version":42,"status":"NEGOTIATED","updatedAt":"2026-11-27T10:00:00Z"}}}}`)
	pong := make(chan string, 1)
	srv := frameServer(t, frame, n, pong)
	c, err := Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	count := 0
	done := make(chan error, 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() {
		done <- run(c, func() {
			count++
			if count == n {
				runtime.ReadMemStats(&after)
			}
		})
	}()
	select {
	case p := <-pong:
		if strings.TrimSpace(p) != `{"type":"pong"}` {
			t.Fatalf("pong %q", p)
		}
	case err := <-done:
		t.Fatalf("reader ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no pong")
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("read %d of %d frames", count, n)
	}
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

// The lean reader allocates (almost) nothing per frame; the decoding one
// is measured beside it for the record (docs/performance.md, "Issue 25,
// third pass").
func TestRunFramesAllocations(t *testing.T) {
	const n = 20000
	lean := allocsPerFrame(t, n, func(c *Conn, got func()) error {
		return c.RunFrames(func(frame []byte, _ time.Time) {
			if v, ok := IntField(frame, "version"); !ok || v != 42 {
				t.Errorf("frame %q", frame)
			}
			got()
		})
	})
	decoding := allocsPerFrame(t, n, func(c *Conn, got func()) error {
		return c.Run(func(m Message, _ time.Time) {
			var u struct {
				Data struct {
					VoucherUpdated struct {
						ID      string `json:"id"`
						Version int    `json:"version"`
					} `json:"voucherUpdated"`
				} `json:"data"`
			}
			if err := json.Unmarshal(m.Payload, &u); err != nil || u.Data.VoucherUpdated.Version != 42 {
				t.Errorf("frame %q: %v", m.Raw, err)
			}
			got()
		})
	})
	t.Logf("heap allocations per frame read: RunFrames %.2f, Run + decode %.2f (%d frames)", lean, decoding, n)
	if lean > 1.5 {
		t.Fatalf("RunFrames allocates %.2f times per frame, want at most gorilla's one reader object", lean)
	}
	if decoding <= lean {
		t.Fatalf("the decoding reader allocates %.2f per frame, the lean one %.2f", decoding, lean)
	}
}
