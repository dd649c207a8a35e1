// Package testnats runs a real NATS server (github.com/nats-io/nats-server,
// in the test process, on a loopback port) for tests of the NATS transport
// (VOUCHER_PUBSUB_URL), and names the cross-replica transports the replicas
// suite runs on.
package testnats

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cross-replica transports: LISTEN/NOTIFY (the default, no setting) and
// NATS (VOUCHER_PUBSUB_URL).
const (
	ListenNotify = "listen-notify"
	NATS         = "nats"
)

// Transports are the transports every test of replicas on one PostgreSQL
// runs on.
var Transports = []string{ListenNotify, NATS}

// Env is the replicas' configuration for transport: nothing for
// LISTEN/NOTIFY; for NATS, VOUCHER_PUBSUB_URL naming a server started for
// t (stopped when t ends). Every replica of a test shares the map's server.
func Env(t testing.TB, transport string) map[string]string {
	t.Helper()
	switch transport {
	case ListenNotify:
		return map[string]string{}
	case NATS:
		return map[string]string{"VOUCHER_PUBSUB_URL": Start(t).URL}
	}
	t.Fatalf("testnats: unknown transport %q", transport)
	return nil
}

// Server is a NATS server that can be stopped and started again on the
// same address, as a restarted NATS would be.
type Server struct {
	// URL is nats://127.0.0.1:port, the same across restarts.
	URL string

	t    testing.TB
	opts server.Options
	mu   sync.Mutex
	srv  *server.Server
}

// Start starts a server on a free loopback port; it is stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{
		URL:  fmt.Sprintf("nats://127.0.0.1:%d", port),
		t:    t,
		opts: server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true, ServerName: fmt.Sprintf("test-%d", port)},
	}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down (its clients see the connection drop).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// Restart starts the server again on its address (after Stop; a no-op
// while it runs). Nothing survives: NATS core keeps no messages.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	var err error
	// The port was just closed by Stop (or by Start's probe); binding it
	// again can race the kernel for a moment.
	for range 50 {
		opts := s.opts
		var srv *server.Server
		if srv, err = server.NewServer(&opts); err != nil {
			break
		}
		srv.Start()
		if srv.ReadyForConnections(5 * time.Second) {
			s.srv = srv
			return
		}
		srv.Shutdown()
		err = fmt.Errorf("not ready for connections on %s", s.URL)
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("testnats: %v", err)
}
