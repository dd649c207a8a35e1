package main_test

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A replica whose pprof port is taken fails before it announces itself:
// the other replicas never hear an "alive" they would then see fall
// silent (and resync for).
func TestTakenPortFailsBeforeTheReplicaAnnouncesItself(t *testing.T) {
	dbURL := testdb.URL(t, "postgres")
	// A first replica migrates the database (and is a peer to announce to).
	testserver.Start(t, testserver.Options{DatabaseURL: dbURL})

	l := pq.NewListener(dbURL, 100*time.Millisecond, time.Second, nil)
	defer l.Close()
	if err := l.Listen(pubsub.ReplicaChannel); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()

	cmd := exec.Command(testserver.Binary(t))
	cmd.Env = append(os.Environ(), "VOUCHER_ADDR="+addr, "VOUCHER_DATABASE_URL="+dbURL,
		"VOUCHER_PPROF_ADDR="+taken.Addr().String(), "VOUCHER_LOG_LEVEL=info")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("voucherd started with its pprof port taken:\n%s", out)
	}
	if !strings.Contains(string(out), "VOUCHER_PPROF_ADDR") || !strings.Contains(string(out), "address already in use") {
		t.Fatalf("the error does not name the setting and the cause:\n%s", out)
	}
	// The first replica's own heartbeats arrive every second; none may
	// come from another replica.
	first := ""
	deadline := time.After(2500 * time.Millisecond)
	for {
		select {
		case n := <-l.Notify:
			if n == nil {
				continue
			}
			replica, _, _ := strings.Cut(strings.TrimPrefix(n.Extra, `{"replica":"`), `"`)
			if first == "" {
				first = replica
			} else if replica != first {
				t.Fatalf("the failed replica announced itself: %s (first replica %s)", n.Extra, first)
			}
		case <-deadline:
			if first == "" {
				t.Fatal("heard no replica at all: the test would not see an announcement either")
			}
			return
		}
	}
}
