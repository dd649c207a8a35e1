package testpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shared is this process's cluster. Starting it lazily means test binaries
// whose selected tests never touch the database pay nothing for it.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

var dbSeq atomic.Uint64

// EnvURL names a cluster already running for the whole run, as the
// superuser's URL of its "postgres" database: make test (scripts/test.sh)
// starts one with testpgd and sets it, so the packages share one cluster
// instead of each running initdb and a server of its own. Each test still
// gets a fresh database of its own (named with the process id, so two test
// binaries never pick the same name). Unset or empty, a test binary starts
// its own cluster, as when a package is tested alone.
const EnvURL = "TESTPG_URL"

func sharedCluster() (*Cluster, error) {
	shared.once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			shared.c, shared.err = Attach(u)
			return
		}
		shared.c, shared.err = Start()
	})
	return shared.c, shared.err
}

// Main runs the tests and then stops the shared cluster (only this
// process's own: one attached through EnvURL is left to its owner), exiting
// with the tests' code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testpg.Main(m) }
//
// Without it the shared server outlives the test binary until the next Start
// in any test binary reaps it. m is a *testing.M, or what wraps one
// (testsupport/testdb's Main, which drops its template afterwards).
func Main(m interface{ Run() int }) {
	code := m.Run()
	// Deliberately no signal handling: tests of graceful shutdown send
	// SIGTERM/SIGINT to their own process, and a handler here would tear
	// the database down under them. An interrupted run is reaped later.
	// Going through once orders this read after the Start it guards and
	// keeps a straggling goroutine from starting a cluster nobody stops.
	shared.once.Do(func() {})
	if shared.c != nil {
		shared.c.Stop()
	}
	os.Exit(code)
}

// Shared returns this process's shared cluster, starting it on first use.
// If PostgreSQL is not installed it skips t, or fails it when CI=true.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	c, err := sharedCluster()
	if err != nil {
		skipOrFail(t, err)
		return nil // only reached with a testing.TB whose Skip/Fatal return
	}
	return c
}

// Database creates a fresh, empty database for t on the shared cluster, drops
// it when t finishes, and returns its DSN for lib/pq. Each call gives a new
// database, so parallel tests never see each other's data.
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseFrom(t, "template0")
}

// DatabaseFrom is Database, the new database a copy of template (a database
// on the shared cluster nobody is connected to).
func DatabaseFrom(t testing.TB, template string) string {
	t.Helper()
	c := Shared(t)
	if c == nil {
		return ""
	}
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := c.CreateDatabaseFrom(ctx, name, template)
	if err != nil {
		t.Fatal(err)
		return ""
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return dsn
}

// StartT starts a cluster of t's own (e.g. WithDurable for a benchmark) and
// stops it when t finishes; unavailability is handled as in Database.
func StartT(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		skipOrFail(t, err)
		return nil
	}
	t.Cleanup(c.Stop)
	return c
}

// skipOrFail is the one place that decides between skip and failure, so the
// rule "CI never skips" cannot drift between helpers. Only ErrUnavailable is
// ever skipped: a server that is installed but fails to start is a bug.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	switch {
	case !errors.Is(err, ErrUnavailable):
		t.Fatal(err)
	case isCI():
		t.Fatalf("CI=true: PostgreSQL is required here, refusing to skip: %v", err)
	default:
		t.Skipf("skipping, PostgreSQL not available: %v", err)
	}
}

func isCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

// dbName derives a readable, unique name from the test name, so a database
// left behind (or seen in the server log) points at the test that made it.
func dbName(testName string) string {
	base := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return fmt.Sprintf("t_%s_%d_%d", base, os.Getpid(), dbSeq.Add(1))
}
