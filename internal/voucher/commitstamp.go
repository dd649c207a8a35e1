package voucher

import (
	"context"
	"strconv"
	"time"
)

// CommitStamp records when a request's change committed: the instant the
// database returned the commit to this process, taken just before the
// change is handed to the subscribers (published). A door that wants to
// tell its caller (REST's Server-Timing header on transition answers, which
// the bench's commit→subscriber phase reads) puts one in the request's
// context with WithCommitStamp; without one nothing is recorded.
type CommitStamp struct{ at time.Time }

type commitStampKey struct{}

// WithCommitStamp returns ctx carrying a fresh stamp, and the stamp.
func WithCommitStamp(ctx context.Context) (context.Context, *CommitStamp) {
	c := &CommitStamp{}
	return context.WithValue(ctx, commitStampKey{}, c), c
}

// At is the commit's wall-clock time (zero when nothing committed).
func (c *CommitStamp) At() time.Time { return c.at }

// ServerTiming is the stamp as a Server-Timing header value,
// `commit;desc="<Unix nanoseconds>"`, or "" when nothing committed. The
// wall clock is the machine's: a client on the same machine can measure
// from the commit itself rather than from the answer.
func (c *CommitStamp) ServerTiming() string {
	if c.at.IsZero() {
		return ""
	}
	return `commit;desc="` + strconv.FormatInt(c.at.UnixNano(), 10) + `"`
}

// stampCommit records now in ctx's stamp, if it has one (the first commit
// of the request counts).
func stampCommit(ctx context.Context) {
	if c, ok := ctx.Value(commitStampKey{}).(*CommitStamp); ok && c.at.IsZero() {
		c.at = time.Now()
	}
}
