package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
)

// Gate is what the two doors call. It decides which budget a request spends
// (one operation's, for one caller) so REST routes and their GraphQL twins
// key budgets the same way, and it caps concurrent holdings (websocket
// connections, subscriptions) by the same notion of caller.
//
// Budgets are per operation, not per group: the spec says "Limits apply per
// endpoint, not per scope", so the group only sizes the budget (auth is 5
// per 300 s for sign-in and, separately, for sign-up). An operation is named
// by its REST route pattern; a GraphQL field spends the budget of the route
// it mirrors by naming the same pattern.
type Gate struct {
	limiter  *Limiter
	mode     Mode
	clientIP *httpx.ClientIP
}

// NewGate returns a gate over l. mode is the configured VOUCHER_RATE_LIMITS
// (it scales the concurrency caps as the table scales the budgets);
// clientIP finds callers' addresses behind trusted proxies (nil: the
// connection's peer).
func NewGate(l *Limiter, mode Mode, clientIP *httpx.ClientIP) *Gate {
	return &Gate{limiter: l, mode: mode, clientIP: clientIP}
}

// Enabled reports whether the gate can ever refuse.
func (g *Gate) Enabled() bool { return g != nil && g.limiter != nil && g.limiter.Enabled() }

// ClientAddr is r's client address (see httpx.ClientIP).
func (g *Gate) ClientAddr(r *http.Request) string { return g.clientIP.Of(r) }

// keyedByAddress lists the groups whose operations take no token (sign-in,
// sign-up, the finance reads). They are always charged to the client
// address: keyed by token subject, every token a caller could mint (one
// sign-up each) would bring a fresh sign-in budget, which is exactly the
// brute force the auth limit exists to stop.
func keyedByAddress(g Group) bool { return g == Auth || g == Finance }

// AddressKey is the caller key of an unauthenticated client. IPv6 clients
// are keyed by their /64: one subscriber line usually holds a whole /64, and
// keying single addresses would hand it 2^64 budgets.
func AddressKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		// Not an address (a unix socket peer, say): still one caller.
		return "ip:" + addr
	}
	a = a.Unmap()
	if a.Is6() {
		return "ip:" + netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
	return "ip:" + a.String()
}

// Caller is the key of whoever makes a request: the token subject (usr_,
// dev_, or ses_ for a resource token) when the request carries a valid
// token, else the client address.
func Caller(ctx context.Context, addr string) string {
	if p := auth.FromContext(ctx); p != nil && p.ID != "" {
		return p.ID
	}
	return AddressKey(addr)
}

// Operation turns a route pattern into the operation's budget name. Wildcard
// names, a trailing slash and {$} are dropped, so "GET /api/v1/businesses/{$}"
// and "GET /api/v1/businesses" are one operation, and a GraphQL field names
// its twin without depending on how the route spells its wildcards.
func Operation(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		j := strings.IndexByte(pattern[i:], '}')
		if j < 0 {
			b.WriteString(pattern[i:])
			break
		}
		if pattern[i:i+j+1] != "{$}" {
			b.WriteString("{}")
		}
		i += j
	}
	op := b.String()
	if strings.HasSuffix(op, "/") && !strings.HasSuffix(op, " /") {
		op = strings.TrimRight(op, "/")
	}
	return op
}

// Spend charges cost units of operation's budget (sized by group) to the
// caller of ctx, whose client address is addr.
func (g *Gate) Spend(ctx context.Context, group Group, operation, addr string, cost int) (Decision, error) {
	if !g.Enabled() {
		return Decision{Group: group, Allowed: true}, nil
	}
	caller := Caller(ctx, addr)
	if keyedByAddress(group) {
		caller = AddressKey(addr)
	}
	return g.spendAs(ctx, group, operation, caller, cost)
}

// spendAs is Spend for a caller key chosen by the door.
func (g *Gate) spendAs(ctx context.Context, group Group, operation, caller string, cost int) (Decision, error) {
	if operation == "" {
		return Decision{}, errors.New("ratelimit: operation without a name")
	}
	// Callers never contain a space and operations never end with one,
	// so the pair stays unambiguous inside one subject string.
	return g.limiter.Allow(ctx, group, Operation(operation)+" "+caller, cost)
}

// Limit is the REST door's check (rest.Limiter): one unit of the matched
// route's budget. It writes RateLimit-Policy and RateLimit on every limited
// response, allowed or not, and returns the rate_limit error (a 429 with
// Retry-After) when the budget is spent. A budget that cannot be checked
// fails the request: an unlimited payment API is worse than a 500.
func (g *Gate) Limit(ctx context.Context, group string, r *http.Request, h http.Header) error {
	if !g.Enabled() {
		return nil
	}
	if r.Pattern == "" {
		return apperr.InternalError(errors.New("ratelimit: request reached a route without a pattern"))
	}
	var d Decision
	var err error
	if key := publicKey(Group(group), r); key != "" {
		d, err = g.spendAs(ctx, Group(group), r.Pattern, key, 1)
	} else {
		d, err = g.Spend(ctx, Group(group), r.Pattern, g.ClientAddr(r), 1)
	}
	if err != nil {
		return apperr.InternalError(err)
	}
	SetHeaders(h, d)
	return Err(d)
}

// Cap scales a concurrency cap the way the mode scales budgets (never
// below 1), and returns 0, meaning no cap, when limiting is off.
func (g *Gate) Cap(base int) int {
	if !g.Enabled() || base <= 0 {
		return 0
	}
	return scaleLimit(base, g.mode.Multiplier())
}

// Slots caps how many of something (websocket connections, subscriptions)
// one caller holds at once. Holdings live in one process: a connection and
// its subscriptions live on one replica, so that is where they cost.
type Slots struct {
	limit int
	mu    sync.Mutex
	held  map[string]int
}

// NewSlots returns a cap of limit per key; 0 means no cap.
func NewSlots(limit int) *Slots { return &Slots{limit: limit, held: map[string]int{}} }

// Limit is the cap (0: none).
func (s *Slots) Limit() int { return s.limit }

// Acquire takes one of key's slots. It returns false when key holds them
// all; otherwise release gives the slot back (calling it again is harmless).
func (s *Slots) Acquire(key string) (release func(), ok bool) {
	if s.limit <= 0 {
		return func() {}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key] >= s.limit {
		return nil, false
	}
	s.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[key]--; s.held[key] <= 0 {
				delete(s.held, key)
			}
		})
	}, true
}

// Held is how many slots key holds.
func (s *Slots) Held(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key]
}

// ConcurrencyRetryAfter is the Retry-After sent when a concurrency cap
// refuses. No window ends; a slot frees when one of the caller's
// connections closes, so this is a polite hint, not a promise.
const ConcurrencyRetryAfter = 10

// SetConcurrencyHeaders describes a full concurrency cap with the IETF
// fields, whose "concurrent-requests" quota unit exists for exactly this.
func SetConcurrencyHeaders(h http.Header, name string, limit int) {
	n := sfString(name)
	h.Set(HeaderPolicy, n+";q="+strconv.Itoa(limit)+`;qu="concurrent-requests"`)
	h.Set(HeaderRateLimit, n+";r=0")
	h.Set(HeaderRetryAfter, strconv.Itoa(ConcurrencyRetryAfter))
}

// ConcurrencyErr is the rate_limit error of a full concurrency cap.
func ConcurrencyErr(what string, limit int) error {
	return &apperr.Error{
		Code:              apperr.RateLimit,
		Message:           "too many " + what + " at once (at most " + strconv.Itoa(limit) + "); close one and retry",
		RetryAfterSeconds: ConcurrencyRetryAfter,
	}
}

// publicKey is the caller key of a widgets-public route: the widget in its
// path (a widget's budget is shared by every customer of the merchant,
// whichever server or browser asks), or for the checkout capability the
// checkout token's hash (one customer's page). "" for every other group.
func publicKey(g Group, r *http.Request) string {
	if g != WidgetsPublic {
		return ""
	}
	if id := r.PathValue("widgetId"); id != "" {
		return "widget:" + id
	}
	if tok := r.PathValue("token"); tok != "" {
		sum := sha256.Sum256([]byte(tok))
		return "checkout:" + hex.EncodeToString(sum[:12])
	}
	return ""
}
