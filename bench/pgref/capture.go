// Package pgref builds the database's own reference for a voucher
// transition: it captures, from PostgreSQL's statement log, the exact
// statements the running service issues for one request, turns them into a
// pgbench script that repeats that transition on pre-created rows, and runs
// pgbench with per-transaction latency logs.
//
// Capturing at run time rather than copying SQL from the source means the
// reference follows the service as it changes: whatever the voucher service
// sends for a redeem (its reads, the conditional UPDATE, the outbox insert,
// the NOTIFY, BEGIN and COMMIT) is what pgbench runs.
package pgref

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Statement is one statement a backend executed, with its bind parameters
// as PostgreSQL rendered them in the log (text form; nil for NULL).
type Statement struct {
	Pid    int       `json:"pid"`
	Vxid   string    `json:"vxid"`
	SQL    string    `json:"sql"`
	Params []*string `json:"params,omitempty"`
	// Prepared says the backend ran a named prepared statement (the log's
	// "execute <name>:"), not an unnamed one ("execute <unnamed>:") or a
	// simple query: how the references run it too.
	Prepared bool `json:"prepared,omitempty"`
	// Seq is the position in the log, which orders statements across
	// backends.
	Seq int `json:"-"`
}

// Mentions reports whether s names id in its text or parameters.
func (s Statement) Mentions(id string) bool {
	if strings.Contains(s.SQL, id) {
		return true
	}
	for _, p := range s.Params {
		if p != nil && strings.Contains(*p, id) {
			return true
		}
	}
	return false
}

// RequiredSettings are the postgresql.conf settings Capture relies on: the
// jsonlog destination (one JSON object per line, so multi-line statements
// parse unambiguously) needs the logging collector, which can only be turned
// on at server start. Neither changes how the server executes statements;
// statement logging itself is switched on only around a capture.
var RequiredSettings = [][2]string{
	{"logging_collector", "on"},
	{"log_destination", "'jsonlog'"},
}

// Capture runs action with statement logging on and returns what every
// other backend executed meanwhile, in log order. conn is the bench's own
// connection (its statements are excluded; it must be a superuser).
func Capture(ctx context.Context, conn *sql.Conn, action func() error) ([]Statement, error) {
	var pid int
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, err
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	tag := "voucherbench-capture-" + hex.EncodeToString(nonce)
	set := func(v string) error {
		q := "ALTER SYSTEM RESET log_statement"
		if v != "" {
			q = "ALTER SYSTEM SET log_statement = '" + v + "'"
		}
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, "SELECT pg_reload_conf()")
		return err
	}
	if err := set("all"); err != nil {
		return nil, fmt.Errorf("pgref: enable statement log: %w", err)
	}
	// Backends re-read the configuration when they next go idle; the
	// service's pooled connections are idle, so a short pause covers it.
	time.Sleep(500 * time.Millisecond)
	_, err := conn.ExecContext(ctx, "SELECT '"+tag+"-begin'")
	if err == nil {
		err = action()
	}
	if err == nil {
		_, err = conn.ExecContext(ctx, "SELECT '"+tag+"-end'")
	}
	if rerr := set(""); rerr != nil && err == nil {
		err = fmt.Errorf("pgref: reset statement log: %w", rerr)
	}
	if err != nil {
		return nil, err
	}
	var file, dataDir string
	if err := conn.QueryRowContext(ctx, "SELECT pg_current_logfile('jsonlog')").Scan(&file); err != nil {
		return nil, fmt.Errorf("pgref: no jsonlog (start the server with %v): %w", RequiredSettings, err)
	}
	if !filepath.IsAbs(file) {
		if err := conn.QueryRowContext(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
			return nil, err
		}
		file = filepath.Join(dataDir, file)
	}
	// The collector writes asynchronously; wait until the end marker is in.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stmts, found, err := readWindow(file, tag, pid)
		if err != nil {
			return nil, err
		}
		if found {
			return stmts, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgref: capture markers not found in %s", file)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type logLine struct {
	Pid      int    `json:"pid"`
	Vxid     string `json:"vxid"`
	Severity string `json:"error_severity"`
	Message  string `json:"message"`
	Detail   string `json:"detail"`
}

var executeRE = regexp.MustCompile(`^execute ([^:]*): `)

// readWindow returns the statements other backends logged between the
// begin and end markers of tag.
func readWindow(file, tag string, self int) ([]Statement, bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []Statement
	inside, done := false, false
	seq := 0
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Severity != "LOG" {
			continue
		}
		seq++
		if l.Pid == self {
			switch {
			case strings.Contains(l.Message, tag+"-begin"):
				inside = true
			case strings.Contains(l.Message, tag+"-end"):
				done = inside
			}
			continue
		}
		if !inside || done {
			continue
		}
		st, ok, err := parseLogStatement(l)
		if err != nil {
			return nil, false, err
		}
		if ok {
			st.Seq = seq
			out = append(out, st)
		}
	}
	return out, done, sc.Err()
}

func parseLogStatement(l logLine) (Statement, bool, error) {
	st := Statement{Pid: l.Pid, Vxid: l.Vxid}
	switch {
	case strings.HasPrefix(l.Message, "statement: "):
		st.SQL = strings.TrimPrefix(l.Message, "statement: ")
	case executeRE.MatchString(l.Message):
		st.SQL = executeRE.ReplaceAllString(l.Message, "")
		st.Prepared = executeRE.FindStringSubmatch(l.Message)[1] != "<unnamed>"
	default:
		return st, false, nil
	}
	if strings.HasPrefix(l.Detail, "parameters: ") {
		ps, err := ParseParams(strings.TrimPrefix(l.Detail, "parameters: "))
		if err != nil {
			return st, false, fmt.Errorf("pgref: parameters of %q: %w", st.SQL, err)
		}
		st.Params = ps
	}
	return st, true, nil
}

// ParseParams parses the log's "$1 = 'a', $2 = NULL, ..." (values quoted
// with doubled single quotes) into values by position.
func ParseParams(s string) ([]*string, error) {
	var out []*string
	for i := 0; i < len(s); {
		if s[i] != '$' {
			return nil, fmt.Errorf("want $ at %d in %q", i, s)
		}
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		var n int
		if _, err := fmt.Sscan(s[i+1:j], &n); err != nil || n != len(out)+1 {
			return nil, fmt.Errorf("parameter %q out of order", s[i:j])
		}
		if !strings.HasPrefix(s[j:], " = ") {
			return nil, fmt.Errorf("want ' = ' after %s", s[i:j])
		}
		j += 3
		switch {
		case strings.HasPrefix(s[j:], "NULL"):
			out = append(out, nil)
			j += 4
		case j < len(s) && s[j] == '\'':
			var b strings.Builder
			k := j + 1
			for {
				if k >= len(s) {
					return nil, errors.New("unterminated quoted value")
				}
				if s[k] == '\'' {
					if k+1 < len(s) && s[k+1] == '\'' {
						b.WriteByte('\'')
						k += 2
						continue
					}
					k++
					break
				}
				b.WriteByte(s[k])
				k++
			}
			v := b.String()
			out = append(out, &v)
			j = k
		default:
			return nil, fmt.Errorf("odd value at %d in %q", j, s)
		}
		if j == len(s) {
			break
		}
		if !strings.HasPrefix(s[j:], ", ") {
			return nil, fmt.Errorf("want ', ' at %d in %q", j, s)
		}
		i = j + 2
	}
	return out, nil
}

var updateVouchersRE = regexp.MustCompile(`(?i)\bupdate\s+"?vouchers"?\s`)

// Transition picks, from a capture around one transition request of voucher
// id, the statements of the transition itself: the transaction (statements
// sharing a backend and virtual transaction id; a single statement in
// autocommit, such as an UPDATE inside a WITH that also notifies) that
// UPDATEs the voucher's row, preceded by the reads of that voucher the
// request made before it.
// Statements after the transaction's end (post-commit reads, the
// LISTEN side's fan-out loads) and statements of unrelated background work
// (sweeper, webhook dispatcher: they do not name the voucher) are left out.
func Transition(stmts []Statement, id string) ([]Statement, error) {
	type group struct {
		key   string
		stmts []Statement
	}
	var order []*group
	groups := map[string]*group{}
	for _, s := range stmts {
		k := fmt.Sprintf("%d/%s", s.Pid, s.Vxid)
		g := groups[k]
		if g == nil {
			g = &group{key: k}
			groups[k] = g
			order = append(order, g)
		}
		g.stmts = append(g.stmts, s)
	}
	mentions := func(g *group) bool {
		for _, s := range g.stmts {
			if s.Mentions(id) {
				return true
			}
		}
		return false
	}
	tx := -1
	for i, g := range order {
		for _, s := range g.stmts {
			if updateVouchersRE.MatchString(s.SQL) && s.Mentions(id) {
				tx = i
				break
			}
		}
		if tx >= 0 {
			break
		}
	}
	if tx < 0 {
		return nil, fmt.Errorf("pgref: no UPDATE of voucher %s among %d captured statements", id, len(stmts))
	}
	var out []Statement
	for _, g := range order[:tx] {
		if mentions(g) {
			out = append(out, g.stmts...)
		}
	}
	out = append(out, order[tx].stmts...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

var selectVoucherRE = regexp.MustCompile(`(?is)^\s*select\s.*\sfrom\s+"?vouchers"?(\s|$)`)

// PrimaryKeyRead picks the read of voucher id's row from a capture around
// one GET: the first SELECT from vouchers with the id as a parameter.
func PrimaryKeyRead(stmts []Statement, id string) (Statement, error) {
	for _, s := range stmts {
		if !selectVoucherRE.MatchString(s.SQL) {
			continue
		}
		for _, p := range s.Params {
			if p != nil && *p == id {
				return s, nil
			}
		}
	}
	return Statement{}, fmt.Errorf("pgref: no SELECT of voucher %s among %d captured statements", id, len(stmts))
}
