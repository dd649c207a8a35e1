// Package testpg runs a throwaway PostgreSQL cluster for Go tests and
// benchmarks, so that code talking to PostgreSQL is tested against the real
// server rather than a mock or a different SQL engine.
//
// A test binary normally shares one cluster between all of its tests and gives
// every test its own fresh database:
//
//	func TestMain(m *testing.M) { testpg.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		db, err := sql.Open("postgres", testpg.Database(t))
//		...
//	}
//
// The cluster lives in a fresh temporary directory, listens only on 127.0.0.1
// on a free port and trusts every loopback connection as the superuser
// "postgres". By default it trades durability for speed (fsync,
// synchronous_commit and full_page_writes off); benchmarks that must measure
// realistic commit costs start their own cluster with WithDurable.
//
// PostgreSQL refuses to run as root, so when the test process is root the
// server binaries run as the OS user "postgres" (via runuser), as they do in CI.
//
// When the binaries are missing, tests are skipped with a hint on how to
// install them, except when CI=true: there a missing database must never turn a
// red build into a green one, so the tests fail instead.
package testpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lib/pq"
)

// ErrUnavailable reports that PostgreSQL cannot be run on this machine at all
// (binaries or the postgres OS user missing), as opposed to a cluster that
// failed to start. Only this kind of error may turn into a skipped test.
var ErrUnavailable = errors.New("testpg: PostgreSQL is not available")

// installHint tells a developer how to get the binaries; it is part of every
// skip and failure message caused by ErrUnavailable.
const installHint = "install PostgreSQL with scripts/ensure-postgres.sh " +
	"(or: apt-get install -y postgresql), or set " + EnvBinDir +
	" to a directory containing initdb, pg_ctl and postgres"

// EnvBinDir overrides where the server binaries are looked for.
const EnvBinDir = "TESTPG_BINDIR"

// superuser is both the role initdb creates and, when running as root, the OS
// user the server runs as.
const superuser = "postgres"

// Option configures Start.
type Option func(*config)

type config struct {
	binDir       string
	durable      bool
	maxConns     int
	settings     [][2]string
	startTimeout time.Duration
}

// WithDurable keeps PostgreSQL's durable defaults (fsync, synchronous_commit,
// full_page_writes on), for benchmarks whose numbers must include the cost of
// a real commit.
func WithDurable() Option { return func(c *config) { c.durable = true } }

// WithMaxConnections sets max_connections (default 200).
func WithMaxConnections(n int) Option { return func(c *config) { c.maxConns = n } }

// WithSetting adds a postgresql.conf setting; value is written verbatim, so
// strings must carry their own single quotes.
func WithSetting(name, value string) Option {
	return func(c *config) { c.settings = append(c.settings, [2]string{name, value}) }
}

// WithBinDir uses the server binaries in dir instead of searching for them
// (takes precedence over TESTPG_BINDIR).
func WithBinDir(dir string) Option { return func(c *config) { c.binDir = dir } }

// WithStartTimeout bounds how long Start waits for the server to accept
// connections (default 30s).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// Cluster is a running throwaway PostgreSQL cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	binDir  string
	dir     string // temp dir: data/, server.log, the unix socket, .lock
	dataDir string
	logFile string
	port    int
	osUser  string // run binaries via runuser as this user; "" = as ourselves
	version int    // server_version_num

	admin    *sql.DB
	lockFD   int
	stopOnce sync.Once
	// attached: another process owns the server (Attach); Stop only
	// closes this process's connections to it.
	attached bool
}

// Attach uses a cluster another process started (testpgd, for a whole make
// test run), given the superuser's URL of its "postgres" database, as
// Cluster.DSN("postgres") printed it. It is never ErrUnavailable: a URL
// that does not answer is a failure, not a reason to skip.
func Attach(adminURL string) (*Cluster, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Scheme != "postgres" || u.Hostname() != "127.0.0.1" {
		return nil, fmt.Errorf("testpg: %s=%q: want postgres://postgres@127.0.0.1:PORT/postgres", EnvURL, adminURL)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("testpg: %s=%q: no port", EnvURL, adminURL)
	}
	c := &Cluster{port: port, lockFD: -1, attached: true}
	if err := c.connect(time.Now().Add(10 * time.Second)); err != nil {
		return nil, fmt.Errorf("testpg: the cluster %s names: %w", EnvURL, err)
	}
	return c, nil
}

// Start creates and starts a new cluster. The caller must call Stop.
// Errors wrapping ErrUnavailable mean PostgreSQL is not installed.
func Start(opts ...Option) (*Cluster, error) {
	cfg := config{maxConns: 200, startTimeout: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}

	binDir, err := resolveBinDir(cfg.binDir)
	if err != nil {
		return nil, err
	}
	osUser, pgUID, pgGID, err := serverUser()
	if err != nil {
		return nil, err
	}

	base := tempBase(pgUID, pgGID)
	// A test binary killed by a timeout or SIGKILL never reaches Stop; its
	// server would otherwise keep running and holding memory forever.
	reapStale(base)

	dir, lockFD, err := makeClusterDir(base, pgUID, pgGID)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:  binDir,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logFile: filepath.Join(dir, "server.log"),
		osUser:  osUser,
		lockFD:  lockFD,
	}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()

	if err := c.initdb(); err != nil {
		return nil, err
	}
	if err := c.writeConfig(&cfg); err != nil {
		return nil, err
	}
	if err := c.start(cfg.startTimeout); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

func (c *Cluster) initdb() error {
	// Generous because initdb on a loaded CI disk is the slow part; readiness
	// has its own, tighter timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.command(ctx, "initdb",
		"-D", c.dataDir,
		"-U", superuser,
		"-A", "trust",
		"-E", "UTF8",
		"--locale=C",
		"--no-sync", // nothing here needs to survive a power cut
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testpg: initdb in %s failed: %v\n%s", c.dataDir, err, out)
	}
	return nil
}

func (c *Cluster) writeConfig(cfg *config) error {
	settings := [][2]string{
		{"listen_addresses", "'127.0.0.1'"},
		{"unix_socket_directories", quoteConf(c.dir)},
		{"max_connections", strconv.Itoa(cfg.maxConns)},
		// Tests must not depend on the machine's zone.
		{"timezone", "'UTC'"},
		{"log_timezone", "'UTC'"},
	}
	if !cfg.durable {
		settings = append(settings,
			[2]string{"fsync", "off"},
			[2]string{"synchronous_commit", "off"},
			[2]string{"full_page_writes", "off"},
		)
	}
	settings = append(settings, cfg.settings...)

	var b strings.Builder
	b.WriteString("\n# added by testpg\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "%s = %s\n", s[0], s[1])
	}
	// Appending keeps the file's owner (postgres) even though we may be root.
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("testpg: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("testpg: writing postgresql.conf: %w", err)
	}
	return f.Close()
}

func (c *Cluster) start(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	// The free port is released before postgres binds it, so another process
	// can steal it in between; a few retries with a new port cover that.
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.port = port
		lastErr = c.pgCtlStart(deadline)
		if lastErr == nil {
			break
		}
		if !strings.Contains(c.logTail(), "already in use") {
			return lastErr
		}
	}
	if lastErr != nil {
		return lastErr
	}
	return c.connect(deadline)
}

func (c *Cluster) pgCtlStart(deadline time.Time) error {
	secs := int(time.Until(deadline).Seconds() + 1)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(5*time.Second))
	defer cancel()
	// -w makes pg_ctl notice a postmaster that dies during startup right
	// away instead of us polling until the deadline.
	out, err := c.command(ctx, "pg_ctl", "start",
		"-D", c.dataDir,
		"-l", c.logFile,
		"-w", "-t", strconv.Itoa(secs),
		"-o", "-p "+strconv.Itoa(c.port),
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testpg: pg_ctl start on 127.0.0.1:%d failed: %v\n%s%s",
			c.port, err, out, c.logTailSection())
	}
	return nil
}

// connect waits until the server accepts TCP connections like the tests'
// will, which is the readiness that matters, and keeps the admin pool.
func (c *Cluster) connect(deadline time.Time) error {
	db, err := sql.Open("postgres", c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("testpg: %w", err)
	}
	// CREATE/DROP DATABASE are all this pool runs; they do not need many.
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.QueryRowContext(ctx, "SHOW server_version_num").Scan(&c.version)
		cancel()
		if err == nil {
			c.admin = db
			return nil
		}
		if time.Now().After(deadline) {
			db.Close()
			return fmt.Errorf("testpg: server on 127.0.0.1:%d not ready in time: %v%s",
				c.port, err, c.logTailSection())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down immediately and removes its directory. It is
// idempotent; problems are reported on stderr because there is nothing a
// caller could do about them.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.admin != nil {
			c.admin.Close()
		}
		if c.attached {
			return
		}
		if err := c.stopServer(); err != nil {
			fmt.Fprintf(os.Stderr, "testpg: stopping cluster in %s: %v\n", c.dir, err)
		}
		if err := removeAll(c.dir); err != nil {
			fmt.Fprintf(os.Stderr, "testpg: %v\n", err)
		}
		unlock(c.lockFD)
	})
}

func (c *Cluster) stopServer() error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err != nil {
		return nil // never started, or already gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-t", "20").CombinedOutput()
	if err == nil {
		return nil
	}
	// pg_ctl can fail on a half-started server; signal it ourselves so the
	// directory can still be removed.
	if kerr := killPostmaster(c.dataDir); kerr != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s; %v", err, out, kerr)
	}
	return nil
}

// DSN returns a lib/pq URL for database dbname on this cluster.
func (c *Cluster) DSN(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&binary_parameters=yes",
		superuser, c.port, url.PathEscape(dbname))
}

// Port is the TCP port on 127.0.0.1, for libpq tools such as pgbench and psql,
// which reject DSN's lib/pq-only binary_parameters.
func (c *Cluster) Port() int { return c.port }

// BinDir is the directory holding the server binaries, so that benchmarks can
// find pgbench and psql of the same version.
func (c *Cluster) BinDir() string { return c.binDir }

// Dir is the cluster's temporary directory (the data directory is inside).
func (c *Cluster) Dir() string { return c.dir }

// LogFile is the server log, useful when a test wants to show why the server
// rejected something.
func (c *Cluster) LogFile() string { return c.logFile }

// CreateDatabase creates an empty database. It copies template0 so that
// nothing a test left in template1 or "postgres" can leak into it.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	return c.CreateDatabaseFrom(ctx, name, "template0")
}

// CreateDatabaseFrom creates a database as a copy of template, a database
// nobody is connected to (testsupport/testdb keeps a migrated one per test
// process, so that each test's database does not run the migrations again).
func (c *Cluster) CreateDatabaseFrom(ctx context.Context, name, template string) (string, error) {
	if err := checkDBName(name); err != nil {
		return "", err
	}
	if _, err := c.admin.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)+" TEMPLATE "+pq.QuoteIdentifier(template)); err != nil {
		return "", fmt.Errorf("testpg: create database %q: %w", name, err)
	}
	return c.DSN(name), nil
}

// DropDatabase drops a database if it exists, disconnecting any sessions a
// test forgot to close so that a leaked connection cannot fail the cleanup.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if err := checkDBName(name); err != nil {
		return err
	}
	q := "DROP DATABASE IF EXISTS " + pq.QuoteIdentifier(name)
	if c.version >= 130000 { // WITH (FORCE) is new in 13
		q += " WITH (FORCE)"
	}
	if _, err := c.admin.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("testpg: drop database %q: %w", name, err)
	}
	return nil
}

func checkDBName(name string) error {
	// PostgreSQL would silently truncate a longer name, and two tests could
	// then end up sharing one database.
	if name == "" || len(name) > 63 {
		return fmt.Errorf("testpg: database name %q must be 1 to 63 bytes", name)
	}
	return nil
}

// command runs a server binary, as the postgres OS user when we are root.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.binDir, name)
	var cmd *exec.Cmd
	if c.osUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.osUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// The test's working directory may not be readable by the postgres user.
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	// runuser passes SIGTERM on to its child; SIGKILL would orphan it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// serverEnv drops PG* variables so that a developer's PGDATA, PGPORT, etc.
// cannot redirect pg_ctl to some other cluster, and forces the C locale so
// that server messages we look for (e.g. "already in use") are in English.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) logTailSection() string {
	if c.attached {
		return "" // the owner (testpgd) has the log
	}
	tail := c.logTail()
	if tail == "" {
		return "\n(server log " + c.logFile + " is empty)"
	}
	return "\n--- server log tail (" + c.logFile + ") ---\n" + tail
}

func quoteConf(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testpg: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
