package wstransport_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/graph/wstransport"
)

// fanoutN is the number of subscribers in BenchmarkFanout (each holds a
// client and a server file descriptor).
const fanoutN = 2000

// BenchmarkFanout measures one event reaching fanoutN subscribers, each on
// its own connection: through the transport (a lean subscription on the
// worker pool), and through a bare gorilla server that writes one prepared
// frame to every connection from one goroutine per CPU — the least any
// server could do. ns/op is per event; "ns/subscriber" divides by N.
//
//	go test ./graph/wstransport -run '^$' -bench Fanout
func BenchmarkFanout(b *testing.B) {
	b.Run("transport", func(b *testing.B) {
		s := newServer(b, wstransport.Options{})
		conns := make([]*websocket.Conn, fanoutN)
		for i := range conns {
			conn, _, err := (&websocket.Dialer{Subprotocols: []string{transportWS}}).Dial(s.url, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			_ = conn.WriteJSON(msg{Type: "connection_init"})
			if _, _, err := conn.ReadMessage(); err != nil {
				b.Fatal(err)
			}
			_ = conn.WriteJSON(msg{Type: "subscribe", ID: "1", Payload: payload(map[string]any{"query": events("f")})})
			conns[i] = conn
		}
		waitFor(b, 10*time.Second, "subscribed", func() bool { return s.broker.count("f") == fanoutN })
		value := strings.Repeat("v", 100)
		runFanout(b, conns, func() { s.broker.publish("f", value) })
	})
	b.Run("bare websocket", func(b *testing.B) {
		var mu sync.Mutex
		var server []*websocket.Conn
		up := websocket.Upgrader{ReadBufferSize: 256, WriteBufferSize: 1024, WriteBufferPool: &sync.Pool{}}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ws, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			mu.Lock()
			server = append(server, ws)
			mu.Unlock()
			go func() {
				for {
					if _, _, err := ws.NextReader(); err != nil {
						return
					}
				}
			}()
		}))
		defer srv.Close()
		conns := make([]*websocket.Conn, fanoutN)
		for i := range conns {
			conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			conns[i] = conn
		}
		waitFor(b, 10*time.Second, "connected", func() bool { mu.Lock(); defer mu.Unlock(); return len(server) == fanoutN })
		frame := []byte(`{"type":"next","id":"1","payload":{"data":{"e":"` + strings.Repeat("v", 100) + `"}}}`)
		runFanout(b, conns, func() {
			pm, _ := websocket.NewPreparedMessage(websocket.TextMessage, frame)
			per := (len(server) + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
			var wg sync.WaitGroup
			for lo := 0; lo < len(server); lo += per {
				wg.Add(1)
				go func(part []*websocket.Conn) {
					defer wg.Done()
					for _, ws := range part {
						_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
						_ = ws.WritePreparedMessage(pm)
					}
				}(server[lo:min(lo+per, len(server))])
			}
			wg.Wait()
		})
	})
}

// runFanout sends b.N events and waits, for each, until every client has
// read it (one reader goroutine per client, as a real client has).
func runFanout(b *testing.B, conns []*websocket.Conn, send func()) {
	var wg sync.WaitGroup
	next := make([]chan struct{}, len(conns))
	for i, conn := range conns {
		next[i] = make(chan struct{}, 1)
		go func() {
			for range next[i] {
				if _, _, err := conn.ReadMessage(); err != nil {
					b.Error(err)
				}
				wg.Done()
			}
		}()
	}
	defer func() {
		for _, ch := range next {
			close(ch)
		}
	}()
	b.ResetTimer()
	for range b.N {
		wg.Add(len(conns))
		for _, ch := range next {
			ch <- struct{}{}
		}
		send()
		wg.Wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(conns)), "ns/subscriber")
}
