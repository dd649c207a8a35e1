package pgref

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestParseParams(t *testing.T) {
	tests := []struct {
		in   string
		want []*string
		err  bool
	}{
		{in: "$1 = '5'", want: []*string{ptr("5")}},
		{in: "$1 = 'it''s', $2 = NULL, $3 = ''", want: []*string{ptr("it's"), nil, ptr("")}},
		{in: `$1 = '{"a": "x, $2 = y"}', $2 = 'b'`, want: []*string{ptr(`{"a": "x, $2 = y"}`), ptr("b")}},
		{in: "$2 = 'a'", err: true},
		{in: "$1 = 'open", err: true},
		{in: "$1 = 5", err: true},
	}
	for _, tt := range tests {
		got, err := ParseParams(tt.in)
		if (err != nil) != tt.err {
			t.Fatalf("ParseParams(%q) error %v, want error %v", tt.in, err, tt.err)
		}
		if tt.err {
			continue
		}
		if len(got) != len(tt.want) {
			t.Fatalf("ParseParams(%q) = %d values, want %d", tt.in, len(got), len(tt.want))
		}
		for i := range got {
			if (got[i] == nil) != (tt.want[i] == nil) || got[i] != nil && *got[i] != *tt.want[i] {
				t.Fatalf("ParseParams(%q)[%d] = %v, want %v", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

func TestTransitionPicksTheVoucherTransaction(t *testing.T) {
	const id = "vch_01hzzzzzzzzzzzzzzzzzzzzzzz"
	stmts := []Statement{
		{Pid: 1, Vxid: "3/1", SQL: "SELECT pg_try_advisory_lock($1)", Params: []*string{ptr("42")}}, // sweeper
		{Pid: 2, Vxid: "4/7", SQL: `SELECT * FROM "vouchers" WHERE "id" = $1`, Params: []*string{ptr(id)}},
		{Pid: 2, Vxid: "4/8", SQL: "BEGIN READ WRITE"},
		{Pid: 3, Vxid: "5/2", SQL: "SELECT id FROM events FOR UPDATE SKIP LOCKED"}, // dispatcher
		{Pid: 2, Vxid: "4/8", SQL: `UPDATE "vouchers" SET "status" = $1 WHERE "id" = $2`, Params: []*string{ptr("REDEEMED"), ptr(id)}},
		{Pid: 2, Vxid: "4/8", SQL: "SELECT pg_notify($1, $2)", Params: []*string{ptr("voucher_changes"), ptr(`{"id":"` + id + `"}`)}},
		{Pid: 2, Vxid: "4/8", SQL: "COMMIT"},
		{Pid: 4, Vxid: "6/1", SQL: `SELECT * FROM "vouchers" WHERE "id" = $1`, Params: []*string{ptr(id)}}, // fan-out load after commit
	}
	for i := range stmts {
		stmts[i].Seq = i
	}
	got, err := Transition(stmts, id)
	if err != nil {
		t.Fatal(err)
	}
	var sqls []string
	for _, s := range got {
		sqls = append(sqls, s.SQL)
	}
	want := []string{`SELECT * FROM "vouchers" WHERE "id" = $1`, "BEGIN READ WRITE", `UPDATE "vouchers" SET "status" = $1 WHERE "id" = $2`, "SELECT pg_notify($1, $2)", "COMMIT"}
	if strings.Join(sqls, "|") != strings.Join(want, "|") {
		t.Fatalf("Transition =\n%s\nwant\n%s", strings.Join(sqls, "\n"), strings.Join(want, "\n"))
	}
	if _, err := Transition(stmts[:4], id); err == nil {
		t.Fatal("a capture without the UPDATE must be an error")
	}
	// One autocommit statement: an UPDATE inside a CTE that also notifies.
	cte := Statement{Pid: 7, Vxid: "9/1", SQL: `WITH u AS (UPDATE vouchers SET status = $1 WHERE id = $2 RETURNING id) SELECT u.id, pg_notify('voucher_changes', u.id) FROM u`,
		Params: []*string{ptr("REDEEMED"), ptr(id)}, Seq: 1}
	got, err = Transition([]Statement{stmts[0], cte}, id)
	if err != nil || len(got) != 1 || got[0].SQL != cte.SQL {
		t.Fatalf("Transition of a CTE update = %+v, %v", got, err)
	}
}

func TestScript(t *testing.T) {
	const id = "vch_01hzzzzzzzzzzzzzzzzzzzzzzz"
	stmts := []Statement{
		{SQL: "BEGIN READ WRITE"},
		{SQL: `UPDATE "vouchers" SET "status" = $1, "expected_payment" = $2 WHERE "id" = $3 AND "note" = '$1'`,
			Params: []*string{ptr("REDEEMED"), ptr(`{"a": "it's"}`), ptr(id)}},
		{SQL: "SELECT pg_notify($1, $2)", Params: []*string{ptr("voucher_changes"), ptr(`{"id":"` + id + `","v":2}`)}},
		{SQL: "COMMIT"},
	}
	types := map[string][]string{
		stmts[1].SQL: {"character varying", "jsonb", "text"},
		stmts[2].SQL: {"text", "text"},
	}
	got, vars, err := Script(stmts, id, func(q string) ([]string, error) {
		if ts, ok := types[q]; ok {
			return ts, nil
		}
		return nil, errors.New("unexpected")
	})
	if err != nil {
		t.Fatal(err)
	}
	// The statement text stays the service's: values are bound on every
	// execution (variables), except those naming the voucher, spliced
	// into IDExpr as typed literals.
	want := `\set vb_n :vb_n + 1
BEGIN READ WRITE;
UPDATE "vouchers" SET "status" = :vb_p1, "expected_payment" = :vb_p2 WHERE "id" = (` + IDExpr + `)::text AND "note" = '$1';
SELECT pg_notify(:vb_p3, ('{"id":"' || ` + IDExpr + ` || '","v":2}')::text);
COMMIT;
`
	if got != want {
		t.Fatalf("Script =\n%s\nwant\n%s", got, want)
	}
	wantVars := []Var{{"vb_p1", "REDEEMED"}, {"vb_p2", `{"a": "it's"}`}, {"vb_p3", "voucher_changes"}}
	if !reflect.DeepEqual(vars, wantVars) {
		t.Fatalf("vars = %q, want %q", vars, wantVars)
	}
	if vars[1].Arg() != `vb_p2={"a": "it's"}` {
		t.Fatalf("Arg = %q", vars[1].Arg())
	}
	// NULL is a typed literal (a -D variable is always a string).
	got, vars, err = Script([]Statement{{SQL: "SELECT $1, $2", Params: []*string{nil, ptr("x")}}}, id,
		func(string) ([]string, error) { return []string{"jsonb", "text"}, nil })
	if err != nil || !strings.Contains(got, "SELECT NULL::jsonb, :vb_p1;") || len(vars) != 1 {
		t.Fatalf("Script with NULL = %q, %q, %v", got, vars, err)
	}
	if _, _, err := Script([]Statement{{SQL: "SELECT $1", Params: []*string{ptr("x :client_id " + id)}}}, id,
		func(string) ([]string, error) { return []string{"text"}, nil }); err == nil {
		t.Fatal("a literal pgbench would substitute into must be refused")
	}
}

func TestSeedID(t *testing.T) {
	got := SeedID(3, 12, 7)
	if got != "vch_030012"+"00000000000000000007" || len(got) != len("vch_")+26 {
		t.Fatalf("SeedID = %q", got)
	}
}
