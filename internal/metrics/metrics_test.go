package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/webhook"
)

type fakeChain struct{ fail bool }

func (f fakeChain) ChainID(context.Context) (string, error) { return "1", nil }
func (f fakeChain) Head(context.Context) (uint64, error) {
	if f.fail {
		return 0, errors.New("node down")
	}
	return 1234, nil
}
func (f fakeChain) Transactions(_ context.Context, h []string) ([]settlement.Tx, error) {
	return make([]settlement.Tx, len(h)), nil
}
func (f fakeChain) BlockHashes(context.Context, []uint64) (map[uint64]string, error) {
	return nil, errors.New("timeout")
}

func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// The settlement series move with what the watcher and the chain wrapper
// see: calls and errors per method, the head, checks, and a lag that grows
// until a check succeeds.
func TestSettlement(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSettlement(reg, []string{"ethereum", "solana"})
	clock := time.Now()
	s.now = func() time.Time { return clock }
	s.lastOK["ethereum"], s.lastOK["solana"] = clock, clock

	eth := s.Chain("ethereum", fakeChain{})
	sol := s.Chain("solana", fakeChain{fail: true})
	ctx := context.Background()
	_, _ = eth.Head(ctx)
	_, _ = eth.Transactions(ctx, []string{"a", "b"})
	_, _ = eth.BlockHashes(ctx, []uint64{1})
	_, _ = sol.Head(ctx)
	clock = clock.Add(90 * time.Second)
	s.Polled("ethereum", nil)
	s.Polled("solana", errors.New("head: node down"))
	clock = clock.Add(10 * time.Second)

	want := `
# HELP voucherd_settlement_head_block The newest block (EVM) or slot (Solana) the settlement watcher has seen, by network.
# TYPE voucherd_settlement_head_block gauge
voucherd_settlement_head_block{network="ethereum"} 1234
# HELP voucherd_settlement_head_lag_seconds Seconds since the settlement watcher last completed a check of the network's chain (rises while its node is unreachable or checks fail).
# TYPE voucherd_settlement_head_lag_seconds gauge
voucherd_settlement_head_lag_seconds{network="ethereum"} 10
voucherd_settlement_head_lag_seconds{network="solana"} 100
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "voucherd_settlement_head_block", "voucherd_settlement_head_lag_seconds"); err != nil {
		t.Error(err)
	}
	for series, v := range map[[3]string]float64{
		{"calls", "ethereum", "head"}:          1,
		{"calls", "ethereum", "transactions"}:  1,
		{"calls", "ethereum", "block_hashes"}:  1,
		{"errors", "ethereum", "block_hashes"}: 1,
		{"errors", "ethereum", "head"}:         0,
		{"errors", "solana", "head"}:           1,
	} {
		vec := s.rpcCalls
		if series[0] == "errors" {
			vec = s.rpcErrors
		}
		if got := testutil.ToFloat64(vec.WithLabelValues(series[1], series[2])); got != v {
			t.Errorf("%v = %v, want %v", series, got, v)
		}
	}
	if got := testutil.ToFloat64(s.checks.WithLabelValues("solana", "error")); got != 1 {
		t.Errorf("solana error checks %v", got)
	}
	lint(t, reg)
}

func TestWebhookAttemptsAndGraphQL(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := &Webhooks{attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "voucherd_webhook_delivery_attempts_total", Help: "x"}, []string{"outcome", "trigger"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "voucherd_webhook_commit_to_attempt_seconds", Help: "x"})}
	reg.MustRegister(w.attempts, w.latency)
	w.OnAttempt(webhook.AttemptInfo{Status: 204, First: true, SinceCommit: 30 * time.Millisecond})
	w.OnAttempt(webhook.AttemptInfo{Status: 500, SinceCommit: -1})
	w.OnAttempt(webhook.AttemptInfo{Status: 0, Manual: true, SinceCommit: -1})
	for k, v := range map[[2]string]float64{{"succeeded", "automatic"}: 1, {"failed", "automatic"}: 1, {"error", "manual"}: 1, {"succeeded", "manual"}: 0} {
		if got := testutil.ToFloat64(w.attempts.WithLabelValues(k[0], k[1])); got != v {
			t.Errorf("%v = %v, want %v", k, got, v)
		}
	}
	if n := testutil.CollectAndCount(w.latency); n != 1 {
		t.Errorf("latency series %d", n)
	}

	g := NewGraphQL(reg)
	g.Field("Mutation.redeemVoucher", nil)
	g.Field("Mutation.redeemVoucher", apperr.New(apperr.AlreadyRedeemed, "x"))
	g.Field("Query.voucher", errors.New("a bug"))
	g.Rejected()
	for k, v := range map[[2]string]float64{
		{"Mutation.redeemVoucher", "ok"}: 1, {"Mutation.redeemVoucher", string(apperr.AlreadyRedeemed)}: 1,
		{"Query.voucher", "internal"}: 1, {"(rejected)", "validation_failed"}: 1,
	} {
		if got := testutil.ToFloat64(g.ops.WithLabelValues(k[0], k[1])); got != v {
			t.Errorf("%v = %v, want %v", k, got, v)
		}
	}
	reg.MustRegister(BuildInfo())
	lint(t, reg)
}

// MIN(next_attempt_at) comes back as time.Time from PostgreSQL and as text
// in SQLite's format (_time_format=sqlite) from SQLite.
func TestAsTime(t *testing.T) {
	want := time.Date(2026, 11, 25, 19, 6, 0, 123456789, time.UTC)
	for _, v := range []any{want, "2026-11-25 19:06:00.123456789+00:00", []byte("2026-11-25T19:06:00.123456789Z")} {
		if got, ok := asTime(v); !ok || !got.Equal(want) {
			t.Errorf("asTime(%v) = %v %v", v, got, ok)
		}
	}
	if _, ok := asTime(nil); ok {
		t.Error("asTime(nil) ok")
	}
}
