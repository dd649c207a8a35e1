package graph_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
)

// BenchmarkDelivery measures what one voucher change costs the service
// from the hub to its subscribers' sockets: a change handed to the hub
// (no commit) and delivered to 1 and to 1,000 voucherUpdated(sessionId:)
// subscribers, each on its own websocket, with one selection. "same" is a
// change this replica committed (it carries the voucher in process),
// "notified" one that came from another replica (a notification's payload
// as the listener hears it: keys and row, which the hub parses and
// decodes). An op is one change, until every subscriber has
// read it. The clients only count frames (no decoding, no allocation per
// frame), so allocs/op and B/op are nearly all the server's: compare
// builds by them, which machine load does not move.
//
//	go test ./graph -run '^$' -bench Delivery -benchmem
func BenchmarkDelivery(b *testing.B) {
	for _, subs := range []int{1, 1000} {
		for _, path := range []string{"same", "notified"} {
			b.Run(fmt.Sprintf("%s/%d", path, subs), func(b *testing.B) {
				benchDelivery(b, path, subs)
			})
		}
	}
}

func benchDelivery(b *testing.B, path string, subs int) {
	h := newHarness(b, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	v := h.reserve(payee, ses.Code, nil)
	v = h.redeem(payee, v.ID, "10")
	var wg sync.WaitGroup
	d := websocket.Dialer{Subprotocols: []string{transportWS}, HandshakeTimeout: 10 * time.Second}
	sub, _ := json.Marshal(wsMsg{Type: "subscribe", ID: "s", Payload: payload(map[string]any{
		"query": `subscription($s: ID) { voucherUpdated(sessionId: $s) { id status version updatedAt } }`, "variables": map[string]any{"s": ses.ID}})})
	for range subs {
		conn, _, err := d.Dial(h.ws, http.Header{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		init, _ := json.Marshal(wsMsg{Type: "connection_init", Payload: payload(map[string]any{"Authorization": "Bearer " + payer.token})})
		if err := conn.WriteMessage(websocket.TextMessage, init); err != nil {
			b.Fatal(err)
		}
		if _, m, err := conn.ReadMessage(); err != nil || !bytes.Contains(m, []byte("connection_ack")) {
			b.Fatalf("connection_init: %v %s", err, m)
		}
		if err := conn.WriteMessage(websocket.TextMessage, sub); err != nil {
			b.Fatal(err)
		}
		go func() {
			head := make([]byte, 16)
			next := []byte(`{"type":"next"`)
			for {
				_, r, err := conn.NextReader()
				if err != nil {
					return
				}
				// Only the changes count: past the keep-alive interval
				// (a long -benchtime) the server's pings arrive too.
				n, _ := io.ReadFull(r, head)
				_, _ = io.Copy(io.Discard, r)
				if bytes.HasPrefix(head[:n], next) {
					wg.Done()
				}
			}
		}()
	}
	waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == int64(subs) })
	// A change is what the hub is handed: in process, or a notification's
	// payload as the listener hears it.
	change := func(i int) any {
		next := *v
		next.Version = v.Version + 1 + i
		c := pubsub.VoucherChange{ID: v.ID, Version: next.Version, SessionID: v.SessionID, PayerID: v.PayerID, PayeeID: v.PayeeID}
		if path == "same" {
			return c.WithState(&next)
		}
		row, err := json.Marshal(&next)
		if err != nil {
			b.Fatal(err)
		}
		p, err := pubsub.EncodeNotification(c, row)
		if err != nil {
			b.Fatal(err)
		}
		return string(p)
	}
	// One change to warm up (renderer pools, worker goroutines).
	publish := func(c any) {
		switch c := c.(type) {
		case pubsub.VoucherChange:
			h.hub.Publish(c)
		case string:
			if err := h.hub.PublishNotification(c); err != nil {
				b.Fatal(err)
			}
		}
	}
	wg.Add(subs)
	publish(change(0))
	wg.Wait()
	changes := make([]any, b.N)
	for i := range changes {
		changes[i] = change(i + 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range b.N {
		wg.Add(subs)
		publish(changes[i])
		wg.Wait()
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(subs), "ns/delivery")
	// The process's CPU (server and clients) per delivery: on a shared
	// machine it moves less than the elapsed time does.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(subs), "cpu-ns/delivery")
}
