package pgref

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/voucherd/voucherd/testsupport/testpg"
)

// TestCaptureScriptAndPgbench runs the whole reference on a real server: a
// stand-in "service" redeems a voucher in a transaction the way the voucher
// service does (conditional UPDATE, NOTIFY, through lib/pq with binary
// parameters), the capture picks exactly that transaction out of the log
// (not the unrelated background statement running beside it), and pgbench
// repeats it on seeded rows, every transaction a real transition.
func TestCaptureScriptAndPgbench(t *testing.T) {
	var opts []testpg.Option
	for _, s := range RequiredSettings {
		opts = append(opts, testpg.WithSetting(s[0], s[1]))
	}
	c := testpg.StartT(t, opts...)
	if c == nil {
		return
	}
	ctx := context.Background()
	db, err := sql.Open("postgres", c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mustExec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec(`CREATE TABLE vouchers (id varchar PRIMARY KEY, code varchar NOT NULL, live_code varchar UNIQUE,
		status varchar NOT NULL, version bigint NOT NULL, expected_payment jsonb, updated_at timestamptz NOT NULL)`)
	const tmpl, src = "vch_01aaaaaaaaaaaaaaaaaaaaaaaa", "vch_01bbbbbbbbbbbbbbbbbbbbbbbb"
	for i, id := range []string{tmpl, src} {
		mustExec(`INSERT INTO vouchers VALUES ($1, $2, $2, 'RESERVED', 1, NULL, now())`, id, []string{"111111", "222222"}[i])
	}
	redeem := func(id string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT id FROM vouchers WHERE id = $1 FOR UPDATE`, id); err != nil {
			return err
		}
		// Prepared, as the service runs its hot statements: the capture
		// says so, and pgbench runs it the same way.
		st, err := tx.PrepareContext(ctx, `UPDATE "vouchers" SET "status" = $1, "version" = "version" + 1, "expected_payment" = $2, "updated_at" = $3 WHERE "id" = $4 AND "status" = 'RESERVED'`)
		if err != nil {
			return err
		}
		defer st.Close()
		res, err := st.ExecContext(ctx, "REDEEMED", `{"amount": "12.50", "note": "it's"}`, time.Now(), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Errorf("redeem of %s changed %d rows", id, n)
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, "voucher_changes", `{"id":"`+id+`","version":2}`); err != nil {
			return err
		}
		return tx.Commit()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stmts, err := Capture(ctx, conn, func() error {
		// Unrelated work beside the request, as a sweeper would do.
		if _, err := db.ExecContext(ctx, `SELECT count(*) FROM vouchers WHERE status = $1`, "DISCARDED"); err != nil {
			return err
		}
		return redeem(tmpl)
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Transition(stmts, tmpl)
	if err != nil {
		t.Fatalf("%v\ncaptured: %+v", err, stmts)
	}
	var sqls []string
	for _, s := range tr {
		sqls = append(sqls, strings.Fields(s.SQL)[0])
	}
	if got := strings.Join(sqls, " "); got != "BEGIN SELECT UPDATE SELECT COMMIT" {
		t.Fatalf("transition statements %q, want BEGIN SELECT UPDATE SELECT COMMIT", got)
	}
	for _, st := range tr {
		if want := strings.HasPrefix(st.SQL, "UPDATE"); st.Prepared != want {
			t.Fatalf("%q captured as prepared=%v, want %v", st.SQL, st.Prepared, want)
		}
	}
	script, vars, err := Script(tr, tmpl, func(q string) ([]string, error) { return ParamTypes(ctx, conn, q) })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "redeem.sql")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	const clients, per = 2, 20000
	if err := Seed(ctx, db, src, 1, clients, per); err != nil {
		t.Fatal(err)
	}
	// A log an earlier bench left under the same run number must not
	// count as this run's.
	if err := os.WriteFile(filepath.Join(dir, "pgbench_run1.99999"), []byte("0 1 5000000 0 1700000000 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Bin: filepath.Join(c.BinDir(), "pgbench"), Port: c.Port(), DB: "postgres",
		Clients: clients, Duration: time.Second, Script: path, Vars: vars, LogDir: dir, Run: 1, Prepared: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed == 0 || res.Failed != 0 || res.TPS <= 0 {
		t.Fatalf("pgbench processed %d, failed %d, tps %v:\n%s\nscript:\n%s", res.Processed, res.Failed, res.TPS, res.Output, script)
	}
	if res.Latency.Count != res.Processed {
		t.Fatalf("per-transaction log has %d entries, pgbench says %d", res.Latency.Count, res.Processed)
	}
	changed, err := Changed(ctx, db, 1, "RESERVED")
	if err != nil {
		t.Fatal(err)
	}
	// A transaction in flight when -T runs out may commit without being
	// counted, so up to one per client more rows can have changed.
	if changed < res.Processed || changed > res.Processed+clients {
		t.Fatalf("%d transactions but %d vouchers changed (each transaction must be a real transition)", res.Processed, changed)
	}
	var payload string
	if err := db.QueryRowContext(ctx, `SELECT expected_payment::text FROM vouchers WHERE id = $1`, SeedID(1, 0, 1)).Scan(&payload); err != nil || payload != `{"note": "it's", "amount": "12.50"}` {
		t.Fatalf("seeded voucher's payment after pgbench = %q, %v; want the captured value", payload, err)
	}
}
