package pgref

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/voucherd/voucherd/bench/stats"
)

// Seed clones the voucher row sourceID clients×perClient times, with the ids
// IDExpr will name in run (SeedID(run, c, 1..perClient) for clients
// 0..clients-1). Every column is copied except the id and live_code (unique:
// it gets a value no service-issued 6-digit code can equal). The columns are
// read from the catalog, so new ones are copied too.
func Seed(ctx context.Context, db *sql.DB, sourceID string, run, clients, perClient int) error {
	rows, err := db.QueryContext(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'vouchers' ORDER BY ordinal_position`)
	if err != nil {
		return err
	}
	var cols, exprs []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, `"`+c+`"`)
		switch c {
		case "id":
			exprs = append(exprs, fmt.Sprintf(`'vch_' || lpad('%d', 2, '0') || lpad(c::text, 4, '0') || lpad(n::text, 20, '0')`, run))
		case "live_code":
			exprs = append(exprs, fmt.Sprintf(`CASE WHEN v.live_code IS NULL THEN NULL ELSE 'pgb%d-' || c || '-' || n END`, run))
		default:
			exprs = append(exprs, `v."`+c+`"`)
		}
	}
	rows.Close()
	if len(cols) == 0 {
		return fmt.Errorf("pgref: no vouchers table")
	}
	q := fmt.Sprintf(`INSERT INTO vouchers (%s) SELECT %s FROM vouchers v, generate_series(0, $2::int - 1) c, generate_series(1, $3::int) n WHERE v.id = $1`,
		strings.Join(cols, ", "), strings.Join(exprs, ", "))
	res, err := db.ExecContext(ctx, q, sourceID, clients, perClient)
	if err != nil {
		return fmt.Errorf("pgref: seed: %w", err)
	}
	if n, _ := res.RowsAffected(); n != int64(clients*perClient) {
		return fmt.Errorf("pgref: seeded %d rows, want %d (is %s there?)", n, clients*perClient, sourceID)
	}
	_, err = db.ExecContext(ctx, "ANALYZE vouchers")
	return err
}

// Changed counts run's seeded rows whose status is no longer status: the
// transitions that really happened.
func Changed(ctx context.Context, db *sql.DB, run int, status string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM vouchers WHERE id LIKE $1 AND status <> $2`,
		fmt.Sprintf("vch\\_%02d%%", run), status).Scan(&n)
	return n, err
}

// Options run pgbench.
type Options struct {
	Bin      string // pgbench
	Port     int
	DB       string
	Clients  int
	Duration time.Duration
	Script   string // path
	Vars     []Var  // the variables Script refers to (its bind values)
	LogDir   string // per-transaction logs go here
	Run      int
	// Prepared runs the script's statements prepared (-M prepared), as
	// the service did when they were captured; otherwise unnamed
	// (-M extended).
	Prepared bool
}

// Mode is pgbench's -M for o.
func (o Options) Mode() string {
	if o.Prepared {
		return "prepared"
	}
	return "extended"
}

// Result is what pgbench did.
type Result struct {
	Processed int64
	Failed    int64
	TPS       float64
	Latency   stats.Summary
	// Samples are the per-transaction latencies Latency summarises (to
	// merge runs without interpolating percentiles).
	Samples []time.Duration
	Output  string
}

var (
	tpsRE       = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	processedRE = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	failedRE    = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

// Run runs pgbench with the extended query protocol, one round trip per
// statement as lib/pq with binary_parameters: prepared statements
// (-M prepared) when o.Prepared, as the service runs its hot statements,
// else unnamed ones (-M extended). One thread per client, for the
// duration, logging every transaction's latency.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return nil, err
	}
	prefix := filepath.Join(o.LogDir, fmt.Sprintf("pgbench_run%d", o.Run))
	// Run numbers start again in every bench: logs an earlier bench left
	// under the same prefix would otherwise be read as this run's.
	if err := removeLogs(prefix); err != nil {
		return nil, err
	}
	args := []string{"-n", "-h", "127.0.0.1", "-p", strconv.Itoa(o.Port), "-U", "postgres",
		"-M", o.Mode(), "-c", strconv.Itoa(o.Clients), "-j", strconv.Itoa(o.Clients),
		"-T", strconv.Itoa(int(o.Duration.Round(time.Second) / time.Second)),
		"-D", varRun + "=" + strconv.Itoa(o.Run), "-D", varCounter + "=0",
		"-l", "--log-prefix", prefix, "-f", o.Script}
	for _, v := range o.Vars {
		args = append(args, "-D", v.Arg())
	}
	args = append(args, o.DB)
	cmd := exec.CommandContext(ctx, o.Bin, args...)
	cmd.Env = append(os.Environ(), "PGAPPNAME=voucherbench-pgbench")
	out, err := cmd.CombinedOutput()
	r := &Result{Output: string(out)}
	if err != nil {
		return r, fmt.Errorf("pgref: pgbench: %v\n%s", err, out)
	}
	m := tpsRE.FindStringSubmatch(r.Output)
	p := processedRE.FindStringSubmatch(r.Output)
	if m == nil || p == nil {
		return r, fmt.Errorf("pgref: cannot read pgbench output:\n%s", out)
	}
	r.TPS, _ = strconv.ParseFloat(m[1], 64)
	r.Processed, _ = strconv.ParseInt(p[1], 10, 64)
	if f := failedRE.FindStringSubmatch(r.Output); f != nil {
		r.Failed, _ = strconv.ParseInt(f[1], 10, 64)
	}
	lat, err := readLogs(prefix)
	if err != nil {
		return r, err
	}
	// pgbench's own tps excludes connection time; the rate in the summary
	// is the same quantity.
	r.Samples = lat
	r.Latency = stats.Summarize(lat, r.Failed, o.Duration, nil)
	r.Latency.PerSec = r.TPS
	return r, nil
}

// readLogs reads the per-transaction logs ("client_id transaction_no time
// script_no time_epoch time_us ..."; time is the latency in µs, or
// "failed"/"skipped").
func readLogs(prefix string) ([]time.Duration, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("pgref: no pgbench logs at %s.*", prefix)
	}
	var out []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue // failed or skipped transaction
			}
			out = append(out, time.Duration(us)*time.Microsecond)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func removeLogs(prefix string) error {
	old, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("pgref: remove stale pgbench log: %w", err)
		}
	}
	return nil
}
