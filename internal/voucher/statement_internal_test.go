package voucher

import (
	"regexp"
	"testing"
	"time"

	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/storage"
)

// A transition's text is built once per shape and reused; its arguments
// are the request's own, in the text's placeholder order, for every
// operation, mode and dialect.
func TestTransitionStatementTextsAreSharedAndArgsMatch(t *testing.T) {
	placeholder := regexp.MustCompile(`\?|\$[0-9]+`)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	sets := func(amount string) []assignment {
		return []assignment{{col: "status", lit: "'REDEEMED'"}, {col: "exchange_rate", val: amount}, {col: "updated_at", val: now}}
	}
	for _, dialect := range []string{storage.SQLite, storage.Postgres} {
		for _, op := range []Op{OpRedeem, OpNegotiate, OpResolve, OpDiscard, OpInteropInit} {
			for _, m := range []mode{modeFast, modeVersion, modeState} {
				tr := &transition{op: op, from: []entvoucher.Status{entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED}}
				q1, a1 := transitionStatement(dialect, tr, "usr_a", "vch_1", sets("1.5"), now, m, 3)
				q2, a2 := transitionStatement(dialect, tr, "usr_b", "vch_2", sets("2.5"), now, m, 4)
				if q1 != q2 {
					t.Fatalf("%s %s %d: texts differ for one shape:\n%s\n%s", dialect, op, m, q1, q2)
				}
				if want := transitionText(dialect, tr, sets("1.5"), m); q1 != want {
					t.Fatalf("%s %s %d: memoized text\n%s\nwant\n%s", dialect, op, m, q1, want)
				}
				if n := len(placeholder.FindAllString(q1, -1)); n != len(a1) || n != len(a2) {
					t.Fatalf("%s %s %d: %d placeholders, %d and %d args:\n%s", dialect, op, m, n, len(a1), len(a2), q1)
				}
				if a1[0] != "1.5" || a2[0] != "2.5" || a1[2] != "vch_1" || a2[2] != "vch_2" {
					t.Fatalf("%s %s %d: args %v / %v", dialect, op, m, a1, a2)
				}
			}
		}
		// Another set of starting states is another text.
		a := &transition{op: OpDiscard, from: []entvoucher.Status{entvoucher.StatusRESERVED}}
		b := &transition{op: OpDiscard, from: []entvoucher.Status{entvoucher.StatusREDEEMED}}
		qa, _ := transitionStatement(dialect, a, "u", "v", sets("1"), now, modeState, 1)
		qb, _ := transitionStatement(dialect, b, "u", "v", sets("1"), now, modeState, 1)
		if qa == qb {
			t.Fatalf("%s: different starting states share a text: %s", dialect, qa)
		}
	}
}
