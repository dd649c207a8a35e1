// Command testpgd runs one throwaway PostgreSQL cluster (testpg.Start) for a
// whole test run: make test (scripts/test.sh) starts it beside the build,
// reads the URL it prints and passes it to every package as TESTPG_URL, so
// the packages share one server (each test still gets a database of its
// own) instead of each running initdb and a server of its own.
//
//	testpgd [-max-connections 400]
//
// It prints the superuser's URL of the "postgres" database as its one line
// on stdout once the server accepts connections, and stops and removes the
// cluster on SIGTERM or SIGINT, or when its parent exits (a killed make
// test leaves no server behind; testpg.Start reaps any that a SIGKILL did).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/voucherd/voucherd/testsupport/testpg"
)

func main() {
	maxConns := flag.Int("max-connections", 400, "the server's max_connections (the packages tested at once share it)")
	flag.Parse()
	parent := os.Getppid()
	c, err := testpg.Start(testpg.WithMaxConnections(*maxConns))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testpgd:", err)
		if errors.Is(err, testpg.ErrUnavailable) {
			os.Exit(3)
		}
		os.Exit(1)
	}
	defer c.Stop()
	fmt.Println(c.DSN("postgres"))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			return
		case <-tick.C:
			if os.Getppid() != parent {
				return
			}
		}
	}
}
