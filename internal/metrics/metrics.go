// Package metrics defines the service's Prometheus series in one place
// (docs/operations.md lists them, with alerts and a dashboard): the
// composition root registers them on /metrics' registry and hands each
// piece to the part of the service it observes. Services never import
// Prometheus for this: they take a small hook (webhook.DispatcherOptions
// OnAttempt, settlement.Options.Polled, a settlement.Chain wrapper), and
// this package fills it.
//
// Names follow Prometheus conventions (voucherd_ prefix, base units,
// _total for counters, _seconds for durations); `promtool check metrics`
// runs on the real /metrics in cmd/voucherd's tests.
package metrics

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/webhook"
)

// BuildInfo is voucherd_build_info: always 1, labelled with the binary's
// version (its module version, "(devel)" for a local build), VCS revision and
// Go version.
func BuildInfo() prometheus.Collector {
	version, revision := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "voucherd_build_info",
		Help:        "The running binary: always 1, labelled with its version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// DBStats are the connection pool's statistics (go_sql_* series of
// client_golang's DBStatsCollector, db_name="voucherd").
func DBStats(db *sql.DB) prometheus.Collector {
	return collectors.NewDBStatsCollector(db, "voucherd")
}

// Webhooks are the webhook delivery series.
type Webhooks struct {
	attempts *prometheus.CounterVec
	latency  prometheus.Histogram
	depth    *outboxDepth
}

// NewWebhooks registers the webhook series; the outbox's depth (pending
// deliveries) is counted in db at each scrape.
func NewWebhooks(reg prometheus.Registerer, db *sql.DB) *Webhooks {
	w := &Webhooks{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "voucherd_webhook_delivery_attempts_total",
			Help: "Webhook delivery attempts made by this replica, by outcome (succeeded: a 2xx; failed: another status; error: no answer, a refused URL or no signing secret) and trigger (automatic or manual).",
		}, []string{"outcome", "trigger"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "voucherd_webhook_commit_to_attempt_seconds",
			Help:    "Time from the commit that queued a delivery (its event) to the start of its first attempt.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		depth: &outboxDepth{
			db: db,
			query: `SELECT COUNT(*), MIN(next_attempt_at) FROM webhook_deliveries
				WHERE status = 'PENDING' AND next_attempt_at IS NOT NULL`,
			desc: prometheus.NewDesc("voucherd_webhook_outbox_depth",
				"Webhook deliveries waiting for an attempt (PENDING with an attempt scheduled), across every replica.", nil, nil),
			oldest: prometheus.NewDesc("voucherd_webhook_outbox_oldest_due_seconds",
				"How long the most overdue pending webhook delivery has been due (0 when none is).", nil, nil),
		},
	}
	reg.MustRegister(w.attempts, w.latency, w.depth)
	// Every outcome exists from the start, so rates and alerts see zeros.
	for _, o := range []string{"succeeded", "failed", "error"} {
		for _, t := range []string{"automatic", "manual"} {
			w.attempts.WithLabelValues(o, t)
		}
	}
	return w
}

// OnAttempt is webhook.DispatcherOptions.OnAttempt.
func (w *Webhooks) OnAttempt(a webhook.AttemptInfo) {
	outcome := "error"
	switch {
	case a.Status >= 200 && a.Status < 300:
		outcome = "succeeded"
	case a.Status != 0:
		outcome = "failed"
	}
	trigger := "automatic"
	if a.Manual {
		trigger = "manual"
	}
	w.attempts.WithLabelValues(outcome, trigger).Inc()
	if a.First && a.SinceCommit >= 0 {
		w.latency.Observe(a.SinceCommit.Seconds())
	}
}

// outboxDepth counts pending deliveries at scrape time (one indexed-enough
// COUNT, bounded by a timeout so a slow database cannot hang /metrics).
type outboxDepth struct {
	db           *sql.DB
	query        string
	desc, oldest *prometheus.Desc
}

func (o *outboxDepth) Describe(ch chan<- *prometheus.Desc) { ch <- o.desc; ch <- o.oldest }

func (o *outboxDepth) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := time.Now().UTC()
	var n int64
	var due any
	if err := o.db.QueryRowContext(ctx, o.query).Scan(&n, &due); err != nil {
		ch <- prometheus.NewInvalidMetric(o.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(o.desc, prometheus.GaugeValue, float64(n))
	overdue := 0.0
	if t, ok := asTime(due); ok && now.After(t) {
		overdue = now.Sub(t).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(o.oldest, prometheus.GaugeValue, overdue)
}

// asTime reads a timestamp column as either database returns it (SQLite
// may hand back text).
func asTime(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, true
	case string:
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
			if p, err := time.Parse(layout, t); err == nil {
				return p, true
			}
		}
	case []byte:
		return asTime(string(t))
	}
	return time.Time{}, false
}

// Websockets exposes the GraphQL websocket transport's open connections.
func Websockets(open func() int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "voucherd_graphql_websockets",
		Help: "GraphQL websocket connections open on this replica.",
	}, func() float64 { return float64(open()) })
}

// GraphQL are the GraphQL door's operation series.
type GraphQL struct {
	ops *prometheus.CounterVec
}

// NewGraphQL registers the GraphQL series.
func NewGraphQL(reg prometheus.Registerer) *GraphQL {
	g := &GraphQL{ops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "voucherd_graphql_operations_total",
		Help: "GraphQL operations by root field (the schema's operation name: Query.voucher, Mutation.redeemVoucher, ...; (rejected) for a document refused before execution) and outcome (ok, or the error code).",
	}, []string{"operation", "outcome"})}
	reg.MustRegister(g.ops)
	return g
}

// Field counts one root field's resolution: operation is "Type.field".
// outcome is "ok" for no error, else the error's code (apperr codes are a
// closed set; anything else counts as internal).
func (g *GraphQL) Field(operation string, err error) {
	if g == nil {
		return
	}
	g.ops.WithLabelValues(operation, outcomeOf(err)).Inc()
}

// Rejected counts a document refused before execution (parse, validation,
// limits, wrong transport).
func (g *GraphQL) Rejected() {
	if g == nil {
		return
	}
	g.ops.WithLabelValues("(rejected)", string(apperr.ValidationFailed)).Inc()
}

func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var ae *apperr.Error
	if errors.As(err, &ae) {
		return string(ae.Code)
	}
	return string(apperr.Internal)
}

// Settlement are the settlement watcher's series, per network: checks
// (polls) by outcome, chain RPC calls and errors by method, the head seen
// and the head lag (how long since the watcher last completed a check:
// rising while the node is unreachable or checks fail).
type Settlement struct {
	checks    *prometheus.CounterVec
	rpcCalls  *prometheus.CounterVec
	rpcErrors *prometheus.CounterVec
	head      *prometheus.GaugeVec
	sweepFail *prometheus.CounterVec
	lag       *prometheus.Desc
	now       func() time.Time

	mu     sync.Mutex
	lastOK map[string]time.Time
}

// NewSettlement registers the settlement series for networks (their lag
// counts from now until their first check).
func NewSettlement(reg prometheus.Registerer, networks []string) *Settlement {
	s := &Settlement{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "voucherd_settlement_checks_total",
			Help: "Settlement watcher checks of a network (one poll of its pending settlements), by outcome (ok or error).",
		}, []string{"network", "outcome"}),
		rpcCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "voucherd_settlement_rpc_calls_total",
			Help: "Chain RPC round trips made by the settlement watcher, by network and method (chain_id, head, transactions, block_hashes, detect).",
		}, []string{"network", "method"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "voucherd_settlement_rpc_errors_total",
			Help: "Chain RPC round trips that failed, by network and method.",
		}, []string{"network", "method"}),
		head: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "voucherd_settlement_head_block",
			Help: "The newest block (EVM) or slot (Solana) the settlement watcher has seen, by network.",
		}, []string{"network"}),
		sweepFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "voucherd_settlement_sweep_failures_total",
			Help: "Deposit addresses whose sweep failed (not sent, reverted, dropped, or moved nothing), by network; each is tried again and its funds stay at the deposit address.",
		}, []string{"network"}),
		lag: prometheus.NewDesc("voucherd_settlement_head_lag_seconds",
			"Seconds since the settlement watcher last completed a check of the network's chain (rises while its node is unreachable or checks fail).",
			[]string{"network"}, nil),
		now:    time.Now,
		lastOK: map[string]time.Time{},
	}
	start := s.now()
	for _, n := range networks {
		s.lastOK[n] = start
		s.sweepFail.WithLabelValues(n)
		for _, o := range []string{"ok", "error"} {
			s.checks.WithLabelValues(n, o)
		}
		for _, m := range []string{"chain_id", "head", "transactions", "block_hashes", "detect"} {
			s.rpcCalls.WithLabelValues(n, m)
			s.rpcErrors.WithLabelValues(n, m)
		}
	}
	reg.MustRegister(s.checks, s.rpcCalls, s.rpcErrors, s.head, s.sweepFail, s)
	return s
}

// Describe and Collect expose the lag, computed at scrape time.
func (s *Settlement) Describe(ch chan<- *prometheus.Desc) { ch <- s.lag }

func (s *Settlement) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, t := range s.lastOK {
		ch <- prometheus.MustNewConstMetric(s.lag, prometheus.GaugeValue, now.Sub(t).Seconds(), n)
	}
}

// Polled is settlement.Options.Polled: one check of network ended with err.
func (s *Settlement) Polled(network string, err error) {
	if err != nil {
		s.checks.WithLabelValues(network, "error").Inc()
		return
	}
	s.checks.WithLabelValues(network, "ok").Inc()
	s.mu.Lock()
	s.lastOK[network] = s.now()
	s.mu.Unlock()
}

// SweepFailed is settlement.Options.SweepFailed: addresses deposit
// addresses of network whose sweep failed.
func (s *Settlement) SweepFailed(network string, addresses int) {
	s.sweepFail.WithLabelValues(network).Add(float64(addresses))
}

// Chain wraps a network's chain adapter so that every round trip is
// counted. What the adapter adds (settlement.Detector, settlement.Scanner)
// the wrapper keeps, counted as "detect".
func (s *Settlement) Chain(network string, c settlement.Chain) settlement.Chain {
	cc := &countedChain{s: s, network: network, c: c}
	switch d := c.(type) {
	case settlement.Scanner:
		return &countedScanner{countedChain: cc, d: d}
	case settlement.Detector:
		return &countedDetector{countedChain: cc, d: d}
	}
	return cc
}

type countedDetector struct {
	*countedChain
	d settlement.Detector
}

func (c *countedDetector) Detect(ctx context.Context, after, upTo uint64, ws []settlement.Watch) ([]settlement.Found, error) {
	f, err := c.d.Detect(ctx, after, upTo, ws)
	c.count("detect", err)
	return f, err
}

type countedScanner struct {
	*countedChain
	d settlement.Scanner
}

func (c *countedScanner) Detect(ctx context.Context, after, upTo uint64, ws []settlement.Watch) ([]settlement.Found, error) {
	f, err := c.d.Detect(ctx, after, upTo, ws)
	c.count("detect", err)
	return f, err
}

func (c *countedScanner) Scan(ctx context.Context, after, upTo uint64, ws []settlement.Watch, heights []uint64) ([]settlement.Found, map[uint64]string, error) {
	f, h, err := c.d.Scan(ctx, after, upTo, ws, heights)
	c.count("detect", err)
	return f, h, err
}

type countedChain struct {
	s       *Settlement
	network string
	c       settlement.Chain
}

func (c *countedChain) count(method string, err error) {
	c.s.rpcCalls.WithLabelValues(c.network, method).Inc()
	if err != nil && !errors.Is(err, context.Canceled) {
		c.s.rpcErrors.WithLabelValues(c.network, method).Inc()
	}
}

func (c *countedChain) ChainID(ctx context.Context) (string, error) {
	id, err := c.c.ChainID(ctx)
	c.count("chain_id", err)
	return id, err
}

func (c *countedChain) Head(ctx context.Context) (uint64, error) {
	h, err := c.c.Head(ctx)
	c.count("head", err)
	if err == nil {
		c.s.head.WithLabelValues(c.network).Set(float64(h))
	}
	return h, err
}

func (c *countedChain) Transactions(ctx context.Context, hashes []string) ([]settlement.Tx, error) {
	txs, err := c.c.Transactions(ctx, hashes)
	c.count("transactions", err)
	return txs, err
}

func (c *countedChain) BlockHashes(ctx context.Context, heights []uint64) (map[uint64]string, error) {
	m, err := c.c.BlockHashes(ctx, heights)
	c.count("block_hashes", err)
	return m, err
}
