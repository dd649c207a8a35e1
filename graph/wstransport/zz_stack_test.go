package wstransport_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/graph/wstransport"
)

func TestZZStack(t *testing.T) {
	for _, stage := range []int{0, 1, 2} {
		t.Run(fmt.Sprint(stage), func(t *testing.T) { zzStack(t, stage) })
	}
}

func zzStack(t *testing.T, stage int) {
	const n = 1000
	s := newServer(t, wstransport.Options{})
	mem := func() (uint64, uint64) {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.StackInuse, m.HeapInuse
	}
	time.Sleep(100 * time.Millisecond)
	s0, h0 := mem()
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conn, _, err := (&websocket.Dialer{Subprotocols: []string{transportWS}, ReadBufferSize: 256, WriteBufferSize: 256}).Dial(s.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
		if stage == 0 {
			continue
		}
		_ = conn.WriteJSON(msg{Type: "connection_init", Payload: payload(map[string]string{"Authorization": validToken})})
		conn.ReadMessage()
		if stage == 1 {
			continue
		}
		q := fmt.Sprintf(`subscription { e: events(topic: "g") }`)
		_ = conn.WriteJSON(msg{Type: "subscribe", ID: "1", Payload: payload(map[string]any{"query": q})})
		conns[i] = conn
	}
	if stage == 2 {
		waitFor(t, 5*time.Second, "subscribed", func() bool { return s.broker.count("g") == n })
	}
	time.Sleep(100 * time.Millisecond)
	s1, h1 := mem()
	buf := make([]byte, 1<<20)
	k := runtime.Stack(buf, true)
	if stage == 0 {
		os.WriteFile("/tmp/zz-goroutines.txt", buf[:k], 0o644)
	}
	t.Logf("goroutines %d", runtime.NumGoroutine())
	t.Logf("stack/conn %d heap/conn %d (incl. client side heap)", (s1-s0)/n, (h1-h0)/n)
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, 5*time.Second, "gone", func() bool { return s.tr.Stats().Connections == 0 })
	time.Sleep(100 * time.Millisecond)
	s2, _ := mem()
	t.Logf("stack freed per conn %d", (int64(s1)-int64(s2))/n)
}

func TestZZPlain(t *testing.T) {
	newServer(t, wstransport.Options{}) // same process state
	const n = 1000
	up := websocket.Upgrader{ReadBufferSize: 512, WriteBufferSize: 1024}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		go func() {
			for {
				_, _, err := ws.NextReader()
				if err != nil {
					return
				}
			}
		}()
	}))
	defer srv.Close()
	mem := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.StackInuse
	}
	time.Sleep(50 * time.Millisecond)
	s0 := mem()
	for i := 0; i < n; i++ {
		c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("plain: %d B/conn stack", (mem()-s0)/n)
}
