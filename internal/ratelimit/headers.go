package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Header names from draft-ietf-httpapi-ratelimit-headers (-08 and later)
// and RFC 9110.
const (
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
	HeaderRetryAfter = "Retry-After"
)

// SetHeaders writes the RateLimit-Policy and RateLimit fields for ds (one
// list member per group, since one GraphQL document may touch several) and,
// if any was denied, Retry-After with the longest wait. Decisions made while
// limiting is off add nothing.
//
//	RateLimit-Policy: "auth";q=5;w=300
//	RateLimit: "auth";r=0;t=42
//	Retry-After: 42
//
// Several decisions of one group (a GraphQL document spending two
// operations' budgets of that group) make one member that reports the
// tightest of them: the least remaining, the latest reset.
func SetHeaders(h http.Header, ds ...Decision) {
	var policy, state []string
	var retry time.Duration
	for _, d := range mergeGroups(ds) {
		name := sfString(string(d.Group))
		policy = append(policy, name+";q="+strconv.Itoa(d.Policy.Limit)+";w="+strconv.FormatInt(ceilSeconds(d.Policy.Window), 10))
		state = append(state, name+";r="+strconv.Itoa(d.Remaining)+";t="+strconv.FormatInt(ceilSeconds(d.Reset), 10))
		if !d.Allowed {
			retry = max(retry, d.RetryAfter)
		}
	}
	if len(policy) == 0 {
		return
	}
	h.Set(HeaderPolicy, strings.Join(policy, ", "))
	h.Set(HeaderRateLimit, strings.Join(state, ", "))
	if retry > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(retryAfterSeconds(retry), 10))
	}
}

// mergeGroups keeps the order of first appearance and drops decisions made
// while limiting is off.
func mergeGroups(ds []Decision) []Decision {
	out := make([]Decision, 0, len(ds))
	at := make(map[Group]int, len(ds))
	for _, d := range ds {
		if d.Limit == 0 {
			continue
		}
		i, seen := at[d.Group]
		if !seen {
			at[d.Group] = len(out)
			out = append(out, d)
			continue
		}
		m := &out[i]
		m.Allowed = m.Allowed && d.Allowed
		m.Remaining = min(m.Remaining, d.Remaining)
		m.Reset = max(m.Reset, d.Reset)
		m.RetryAfter = max(m.RetryAfter, d.RetryAfter)
	}
	return out
}

// Headers returns the fields SetHeaders would write.
func Headers(ds ...Decision) http.Header {
	h := make(http.Header)
	SetHeaders(h, ds...)
	return h
}

// Err returns nil for an allowed decision and otherwise the rate_limit
// error that renders as a 429 with the retry delay.
func Err(d Decision) error {
	if d.Allowed {
		return nil
	}
	secs := retryAfterSeconds(d.RetryAfter)
	return &apperr.Error{
		Code:              apperr.RateLimit,
		Message:           "rate limit exceeded, retry in " + strconv.FormatInt(secs, 10) + " seconds",
		RetryAfterSeconds: int(secs),
	}
}

// ceilSeconds rounds up so a client that waits the advertised time is
// never a fraction of a second early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is at least 1: "Retry-After: 0" invites an immediate
// retry that would be denied again.
func retryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// sfString encodes s as a Structured Field String (RFC 9651): quoted, with
// '"' and '\' escaped and anything outside printable ASCII dropped, which
// the format cannot carry.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
