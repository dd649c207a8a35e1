package pgref

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// Variables the generated script uses. pgbench substitutes :name anywhere
// in a command, literals included, so they carry a prefix no captured value
// plausibly contains (Script refuses values that do).
const (
	varCounter = "vb_n"
	varRun     = "vb_run"
	varParam   = "vb_p" // vb_p1, vb_p2, ...: the bind values
)

// IDExpr is the SQL expression (in pgbench syntax) naming the voucher a
// pgbench transaction works on: unique per run, client and transaction, and
// shaped like a service id (vch_ + 26 characters) so nothing that checks the
// shape treats it differently.
const IDExpr = "('vch_' || lpad(:" + varRun + "::text, 2, '0') || lpad(:client_id::text, 4, '0') || lpad(:" + varCounter + "::text, 20, '0'))"

// SeedID is IDExpr for given values, as Seed and Verify compute it in SQL.
func SeedID(run, client, n int) string {
	return fmt.Sprintf("vch_%02d%04d%020d", run, client, n)
}

// ParamTypes asks the server for the parameter types of query by preparing
// it (and deallocating it at once).
func ParamTypes(ctx context.Context, conn *sql.Conn, query string) ([]string, error) {
	if _, err := conn.ExecContext(ctx, "PREPARE voucherbench_probe AS "+query); err != nil {
		return nil, fmt.Errorf("pgref: prepare %q: %w", query, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DEALLOCATE voucherbench_probe")
	rows, err := conn.QueryContext(ctx, `SELECT t::text FROM pg_prepared_statements, unnest(parameter_types) WITH ORDINALITY AS u(t, i)
		WHERE name = 'voucherbench_probe' ORDER BY i`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Var is a pgbench variable the script refers to, defined on pgbench's
// command line (-D name=value).
type Var struct{ Name, Value string }

// Arg is v as pgbench's -D argument.
func (v Var) Arg() string { return v.Name + "=" + v.Value }

// Script renders captured statements as a pgbench script that repeats them
// on the voucher named by IDExpr instead of templateID. The statement text
// is the service's; each bind parameter stays a parameter, bound on every
// execution as the service binds it: pgbench sends a variable (one of
// vars, each holding its value exactly as captured) where the statement
// had $n, so PostgreSQL parses the JSON body, the timestamps and the ids
// on every transaction as it does for the service (literals in a prepared
// statement would be parsed once, at PREPARE). Two kinds of value cannot
// be a -D variable and become typed literals instead (types from the
// server, via types): NULL, and a value naming templateID, which is
// spliced out for IDExpr.
func Script(stmts []Statement, templateID string, types func(sql string) ([]string, error)) (script string, vars []Var, err error) {
	var b strings.Builder
	fmt.Fprintf(&b, "\\set %s :%s + 1\n", varCounter, varCounter)
	for _, st := range stmts {
		q := st.SQL
		if len(st.Params) > 0 {
			var ts []string
			exprs := make([]string, len(st.Params))
			for i, p := range st.Params {
				if p != nil && !strings.Contains(*p, templateID) {
					v := Var{Name: fmt.Sprintf("%s%d", varParam, len(vars)+1), Value: *p}
					vars = append(vars, v)
					exprs[i] = ":" + v.Name
					continue
				}
				if ts == nil {
					if ts, err = types(st.SQL); err != nil {
						return "", nil, err
					}
					if len(ts) != len(st.Params) {
						return "", nil, fmt.Errorf("pgref: %q has %d parameters but the server reports %d types", st.SQL, len(st.Params), len(ts))
					}
				}
				if p == nil {
					exprs[i] = "NULL::" + ts[i]
					continue
				}
				e, err := literal(*p, templateID)
				if err != nil {
					return "", nil, err
				}
				exprs[i] = "(" + e + ")::" + ts[i]
			}
			if q, err = bindPlaceholders(st.SQL, exprs); err != nil {
				return "", nil, err
			}
		} else if strings.Contains(q, templateID) {
			q = strings.ReplaceAll(q, "'"+templateID+"'", IDExpr)
		}
		if pgbenchVarRE.MatchString(st.SQL) {
			return "", nil, fmt.Errorf("pgref: captured statement %q contains a pgbench variable reference", st.SQL)
		}
		b.WriteString(strings.TrimRight(strings.TrimSpace(q), ";"))
		b.WriteString(";\n")
	}
	return b.String(), vars, nil
}

var pgbenchVarRE = regexp.MustCompile(`:(client_id|scale|random_seed|` + varCounter + `|` + varRun + `|` + varParam + `\d+)\b`)

// literal quotes v as SQL, splicing IDExpr in for templateID.
func literal(v, templateID string) (string, error) {
	if pgbenchVarRE.MatchString(v) {
		return "", fmt.Errorf("pgref: captured value %q contains a pgbench variable reference", v)
	}
	if strings.Contains(v, "\n\\") {
		return "", fmt.Errorf("pgref: captured value %q would start a pgbench meta-command line", v)
	}
	parts := strings.Split(v, templateID)
	quoted := make([]string, 0, 2*len(parts))
	for i, p := range parts {
		if i > 0 {
			quoted = append(quoted, IDExpr)
		}
		if p != "" || len(parts) == 1 {
			quoted = append(quoted, "'"+strings.ReplaceAll(p, "'", "''")+"'")
		}
	}
	return strings.Join(quoted, " || "), nil
}

// bindPlaceholders replaces $1..$n outside quoted literals and identifiers
// with exprs.
func bindPlaceholders(q string, exprs []string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(q) {
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= len(q) {
				return "", fmt.Errorf("pgref: unterminated quote in %q", q)
			}
			b.WriteString(q[i : j+1])
			i = j
		case c == '$' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			var n int
			fmt.Sscan(q[i+1:j], &n)
			if n < 1 || n > len(exprs) {
				return "", fmt.Errorf("pgref: placeholder $%d in %q has no parameter", n, q)
			}
			b.WriteString(exprs[n-1])
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
