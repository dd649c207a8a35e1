package testpg

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

func TestMain(m *testing.M) { Main(m) }

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryString(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

func TestClusterLifecycle(t *testing.T) {
	begin := time.Now()
	c, err := Start()
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(c.Stop)
	t.Logf("cluster up in %v (bin %s, port %d, dir %s)", time.Since(begin).Round(time.Millisecond), c.BinDir(), c.Port(), c.dir)

	ctx := context.Background()
	dsnA, err := c.CreateDatabase(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	dsnB, err := c.CreateDatabase(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/alpha?sslmode=disable&binary_parameters=yes", c.Port())
	if dsnA != want {
		t.Errorf("DSN = %q, want %q", dsnA, want)
	}

	a, b := open(t, dsnA), open(t, dsnB)
	if got := queryString(t, a, "SELECT current_database()"); got != "alpha" {
		t.Errorf("a is connected to %q", got)
	}
	if got := queryString(t, b, "SELECT current_database()"); got != "beta" {
		t.Errorf("b is connected to %q", got)
	}

	// Isolation: what one database holds, the other must not see.
	if _, err := a.Exec(`CREATE TABLE vouchers (code text PRIMARY KEY); INSERT INTO vouchers VALUES ('A-1')`); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, a, "SELECT count(*)::text FROM vouchers"); got != "1" {
		t.Errorf("alpha has %s vouchers, want 1", got)
	}
	if got := queryString(t, b, "SELECT to_regclass('vouchers')::text"); got != "" {
		t.Errorf("table from alpha visible in beta as %q", got)
	}
	if _, err := b.Exec(`CREATE TABLE vouchers (code text PRIMARY KEY)`); err != nil {
		t.Fatalf("same table name in beta: %v", err)
	}
	if got := queryString(t, b, "SELECT count(*)::text FROM vouchers"); got != "0" {
		t.Errorf("beta has %s vouchers, want 0", got)
	}

	for q, want := range map[string]string{
		"SHOW listen_addresses":   "127.0.0.1",
		"SHOW fsync":              "off",
		"SHOW synchronous_commit": "off",
		"SHOW full_page_writes":   "off",
		"SHOW max_connections":    "200",
		"SHOW server_encoding":    "UTF8",
		"SHOW lc_collate":         "C",
		"SHOW TimeZone":           "UTC",
		"SELECT current_user":     "postgres",
	} {
		if got := queryString(t, a, q); got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}

	// A session left open must not make dropping its database fail.
	if err := c.DropDatabase(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, a, "SELECT count(*)::text FROM pg_database WHERE datname = 'beta'"); got != "0" {
		t.Error("beta still exists after DropDatabase")
	}

	a.Close()
	b.Close()
	dir, port := c.dir, c.Port()
	c.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s still there after Stop (stat: %v)", dir, err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		conn.Close()
		t.Errorf("port %d still accepts connections after Stop", port)
	}
	c.Stop() // must stay harmless when cleanup calls it again
}

func TestDatabaseIsFreshPerTest(t *testing.T) {
	var mu sync.Mutex
	names := map[string]bool{}
	for i := range 3 {
		t.Run(fmt.Sprint("parallel", i), func(t *testing.T) {
			t.Parallel()
			db := open(t, Database(t))
			// Every subtest creates the same table: this only works if
			// each got its own empty database.
			if _, err := db.Exec(`CREATE TABLE vouchers (code text PRIMARY KEY); INSERT INTO vouchers VALUES ('x')`); err != nil {
				t.Fatal(err)
			}
			if got := queryString(t, db, "SELECT count(*)::text FROM vouchers"); got != "1" {
				t.Errorf("%s vouchers, want 1", got)
			}
			name := queryString(t, db, "SELECT current_database()")
			mu.Lock()
			defer mu.Unlock()
			if names[name] {
				t.Errorf("database %s handed out twice", name)
			}
			names[name] = true
		})
	}
	t.Cleanup(func() {
		// Subtest cleanups have run by now: their databases must be gone.
		db := open(t, Shared(t).DSN("postgres"))
		for name := range names {
			var n int
			if err := db.QueryRow("SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 0 {
				t.Errorf("database %s not dropped (count %d, err %v)", name, n, err)
			}
		}
	})
}

// A cluster another process owns (testpgd's, under make test), attached
// by its URL: databases are created and dropped on it, the attached
// Cluster's Stop leaves the server running, and a URL nobody answers is a
// failure, never ErrUnavailable (a run told to share a cluster must not
// skip).
func TestAttach(t *testing.T) {
	owner := StartT(t)
	a, err := Attach(owner.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dsn, err := a.CreateDatabase(ctx, dbName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, open(t, dsn), "SELECT current_setting('port')"); got != strconv.Itoa(owner.Port()) {
		t.Fatalf("attached database on port %s, want the owner's %d", got, owner.Port())
	}
	a.Stop()
	if got := queryString(t, open(t, owner.DSN("postgres")), "SELECT 1::text"); got != "1" {
		t.Fatalf("the owner's server after the attached Stop: %q", got)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = Attach(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Attach to a closed port: %v", err)
	}
	if _, err := Attach("postgres://postgres@db.example.com:5432/postgres"); err == nil {
		t.Fatal("Attach to a non-loopback host must fail")
	}
}

func TestWithDurable(t *testing.T) {
	c := StartT(t, WithDurable(), WithMaxConnections(50), WithSetting("work_mem", "'8MB'"))
	db := open(t, c.DSN("postgres"))
	for q, want := range map[string]string{
		"SHOW fsync":              "on",
		"SHOW synchronous_commit": "on",
		"SHOW full_page_writes":   "on",
		"SHOW max_connections":    "50",
		"SHOW work_mem":           "8MB",
	} {
		if got := queryString(t, db, q); got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.BinDir(), "pgbench")); err != nil {
		t.Errorf("benchmarks expect pgbench next to the server: %v", err)
	}
}

// fakeTB records instead of stopping the goroutine, so the skip-or-fail
// decision can be checked without failing this test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Name() string      { return "fake" }
func (f *fakeTB) Cleanup(func())    {}
func (f *fakeTB) Skip(args ...any)  { f.skipped, f.msg = true, fmt.Sprint(args...) }
func (f *fakeTB) Fatal(args ...any) { f.failed, f.msg = true, fmt.Sprint(args...) }
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

func TestMissingBinaries(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		ci       string
		wantSkip bool
	}{
		{ci: "true", wantSkip: false},
		{ci: "1", wantSkip: false},
		{ci: "", wantSkip: true},
		{ci: "false", wantSkip: true},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)

			for _, how := range []struct {
				name  string
				start func() (*Cluster, error)
			}{
				{"option", func() (*Cluster, error) { return Start(WithBinDir(empty)) }},
				{"env", func() (*Cluster, error) {
					t.Setenv(EnvBinDir, empty)
					return Start()
				}},
			} {
				c, err := how.start()
				if !errors.Is(err, ErrUnavailable) {
					if c != nil {
						c.Stop()
					}
					t.Fatalf("%s: Start with empty bin dir: err = %v, want ErrUnavailable", how.name, err)
				}
				ft := &fakeTB{}
				skipOrFail(ft, err)
				if ft.skipped != tc.wantSkip || ft.failed == tc.wantSkip {
					t.Errorf("%s: skipped=%v failed=%v, want skip=%v", how.name, ft.skipped, ft.failed, tc.wantSkip)
				}
				if !strings.Contains(ft.msg, "ensure-postgres.sh") {
					t.Errorf("%s: message lacks install hint: %s", how.name, ft.msg)
				}
				if !tc.wantSkip && !strings.Contains(ft.msg, "CI=true") {
					t.Errorf("%s: CI failure should say why it does not skip: %s", how.name, ft.msg)
				}
			}

			// StartT must follow the same rule.
			ft := &fakeTB{}
			if c := StartT(ft, WithBinDir(empty)); c != nil || ft.skipped != tc.wantSkip {
				t.Errorf("StartT: cluster=%v skipped=%v, want skip=%v", c, ft.skipped, tc.wantSkip)
			}
		})
	}
}

func TestStartFailureIsNeverSkipped(t *testing.T) {
	t.Setenv("CI", "")
	ft := &fakeTB{}
	skipOrFail(ft, errors.New("testpg: pg_ctl start failed"))
	if ft.skipped || !ft.failed {
		t.Errorf("broken (but installed) server: skipped=%v failed=%v, want a failure", ft.skipped, ft.failed)
	}
}

func TestStartFailureReportsServerLog(t *testing.T) {
	if _, err := resolveBinDir(""); err != nil {
		skipOrFail(t, err)
	}
	// A private, world-searchable TMPDIR so that other test binaries'
	// clusters cannot confuse the leftover check below.
	base, err := os.MkdirTemp("", "pgfailtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", base)

	c, err := Start(WithSetting("no_such_setting", "1"))
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with an invalid setting")
	}
	if errors.Is(err, ErrUnavailable) {
		t.Errorf("a server that fails to start must not look unavailable (it would be skipped): %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "server log tail") || !strings.Contains(msg, "no_such_setting") {
		t.Errorf("error should carry the server log tail naming the bad setting:\n%s", msg)
	}
	if left, _ := os.ReadDir(base); len(left) != 0 {
		t.Errorf("failed Start left %s behind in %s", left[0].Name(), base)
	}
}

const helperEnv = "TESTPG_HELPER"

// TestHelperProcess is not a test: the tests below re-run this binary to
// get a process with its own shared cluster that they can break or kill.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "database":
		Database(t)
		fmt.Println("TESTPG_REACHED_AFTER_DATABASE")
	case "leak":
		c, err := Start()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("TESTPG_DIR=%s\n", c.dir)
		time.Sleep(time.Minute) // killed long before this
	default:
		t.Skip("helper process for TestDatabaseEndToEndWithoutBinaries and TestReapsKilledRun")
	}
}

func helper(ctx context.Context, mode string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.v", "-test.count=1")
	// The helper starts its own cluster, even when make test shares one.
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+mode, EnvURL+"=")...)
	return cmd
}

// The whole path a real test takes (Database -> shared cluster -> decision),
// in a fresh process, with the binaries hidden.
func TestDatabaseEndToEndWithoutBinaries(t *testing.T) {
	empty := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, err := helper(ctx, "database", "CI=true", EnvBinDir+"="+empty).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestHelperProcess") || strings.Contains(string(out), "--- SKIP") {
		t.Errorf("CI=true without binaries must fail, got err=%v:\n%s", err, out)
	}
	if strings.Contains(string(out), "TESTPG_REACHED_AFTER_DATABASE") {
		t.Errorf("test kept running after Database failed:\n%s", out)
	}

	out, err = helper(ctx, "database", "CI=", EnvBinDir+"="+empty).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- SKIP: TestHelperProcess") {
		t.Errorf("without CI, missing binaries must skip, got err=%v:\n%s", err, out)
	}
}

// A test binary killed mid-run leaves its server running; the next Start must
// still work and must clean that leftover up.
func TestReapsKilledRun(t *testing.T) {
	if _, err := resolveBinDir(""); err != nil {
		skipOrFail(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := helper(ctx, "leak")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "TESTPG_DIR="); ok {
			dir = d
			break
		}
	}
	if dir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper did not report its cluster dir")
	}
	cmd.Process.Kill()
	cmd.Wait()

	dataDir := filepath.Join(dir, "data")
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if !runsIn(pid, dataDir) {
		t.Fatalf("expected the killed run's postmaster %d to be left running", pid)
	}

	StartT(t) // a new run, which must not trip over the leftover
	if runsIn(pid, dataDir) {
		t.Errorf("leftover postmaster %d still running", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover dir %s not removed (stat: %v)", dir, err)
	}
}

func TestDBName(t *testing.T) {
	n := dbName("TestVoucher/Redeem twice (expired)-" + strings.Repeat("x", 80))
	if len(n) > 63 || !strings.HasPrefix(n, "t_testvoucher_redeem_twice_expired_") {
		t.Errorf("dbName = %q", n)
	}
	if first, second := dbName("A"), dbName("A"); first == second {
		t.Error("dbName must be unique per call")
	}
}

func TestVersionLess(t *testing.T) {
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/15/bin"}
	if !versionLess(dirs[0], dirs[1]) || !versionLess(dirs[1], dirs[2]) || versionLess(dirs[2], dirs[0]) {
		t.Error("versions must compare numerically")
	}
}
