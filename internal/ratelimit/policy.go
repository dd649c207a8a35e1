package ratelimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Group names a row of the spec's rate-limit table: the size of a budget.
// Limiter charges whatever subject it is given against the group's policy;
// Gate makes that subject one operation and one caller, so each endpoint
// has its own budget of its group's size (the spec: "Limits apply per
// endpoint, not per scope"). The string is public: it appears in the
// RateLimit headers.
type Group string

// The spec's endpoint groups.
const (
	Auth          Group = "auth"
	Businesses    Group = "businesses"
	Finance       Group = "finance"
	VouchersRead  Group = "vouchers-read"
	VouchersWrite Group = "vouchers-write"
	Negotiate     Group = "negotiate"
	Widgets       Group = "widgets"
	WidgetsPublic Group = "widgets-public"
	Webhooks      Group = "webhooks"
)

// Groups lists every group, in the spec's order.
func Groups() []Group {
	return []Group{Auth, Businesses, Finance, VouchersRead, VouchersWrite, Negotiate, Widgets, WidgetsPublic, Webhooks}
}

// Policy is a budget of Limit units per fixed Window.
type Policy struct {
	Limit  int
	Window time.Duration
}

// Table maps every group to its policy. A nil or empty Table means rate
// limiting is off.
type Table map[Group]Policy

// SpecTable returns the spec's limits (a fresh map, safe to modify).
func SpecTable() Table {
	p300 := Policy{Limit: 5, Window: 300 * time.Second}
	return Table{
		Auth:          p300,
		Businesses:    p300,
		Finance:       p300,
		VouchersRead:  {Limit: 10, Window: 600 * time.Second},
		VouchersWrite: p300,
		Negotiate:     {Limit: 1, Window: 60 * time.Second},
		Widgets:       p300,
		WidgetsPublic: p300,
		Webhooks:      p300,
	}
}

// maxLimit keeps a large multiplier from overflowing and from producing
// counts no client could ever reach anyway.
const maxLimit = math.MaxInt32

// Scale returns a copy of t with every limit multiplied by m, rounded down
// but never below 1: a scaled-down limit must still let a caller in.
// Windows are kept, so the ratio of bursts to windows stays the spec's.
func (t Table) Scale(m float64) Table {
	out := make(Table, len(t))
	for g, p := range t {
		out[g] = Policy{Limit: scaleLimit(p.Limit, m), Window: p.Window}
	}
	return out
}

// scaleLimit multiplies one limit as Scale does (the gate's concurrency
// caps scale the same way).
func scaleLimit(limit int, m float64) int {
	// The epsilon absorbs binary float error (0.29*100 = 28.999...).
	n := math.Floor(float64(limit)*m + 1e-9)
	switch {
	case n < 1:
		n = 1
	case n > maxLimit:
		n = maxLimit
	}
	return int(n)
}

// Mode is the VOUCHER_RATE_LIMITS setting. The zero Mode is "spec".
type Mode struct {
	off  bool
	mult float64 // 0 means 1
}

// ParseMode parses VOUCHER_RATE_LIMITS: "spec" (or empty) for the spec's
// limits, "off" for none, or a positive multiplier such as "10" or "0.5".
func ParseMode(s string) (Mode, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "", "spec":
		return Mode{}, nil
	case "off":
		return Mode{off: true}, nil
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(m) || math.IsInf(m, 0) || m <= 0 {
		return Mode{}, fmt.Errorf("ratelimit: rate limit mode must be \"spec\", \"off\" or a positive multiplier such as 10 or 0.5, got %q", s)
	}
	return Mode{mult: m}, nil
}

// Off reports whether rate limiting is disabled.
func (m Mode) Off() bool { return m.off }

// Multiplier is the factor applied to the spec's limits (1 for "spec", 0 when off).
func (m Mode) Multiplier() float64 {
	switch {
	case m.off:
		return 0
	case m.mult == 0:
		return 1
	}
	return m.mult
}

// Table returns the policies for this mode; nil when off.
func (m Mode) Table() Table {
	switch {
	case m.off:
		return nil
	case m.mult == 0 || m.mult == 1:
		return SpecTable()
	}
	return SpecTable().Scale(m.mult)
}

// String returns the mode in the form ParseMode accepts.
func (m Mode) String() string {
	switch {
	case m.off:
		return "off"
	case m.mult == 0 || m.mult == 1:
		return "spec"
	}
	return strconv.FormatFloat(m.mult, 'g', -1, 64)
}

// MarshalText and UnmarshalText let the mode be a flag (flag.TextVar) or a
// config field without a wrapper.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses text with ParseMode.
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
