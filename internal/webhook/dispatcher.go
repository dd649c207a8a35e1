package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook/signing"
)

// Schedule constants (spec: up to 3 automatic retries).
const (
	// MaxAutoAttempts is the first attempt plus three retries.
	MaxAutoAttempts = 4
	// AttemptTimeout is the spec's "2xx within 10 s"; the Transport
	// enforces it.
	AttemptTimeout = 10 * time.Second
	// DefaultLease is how long a claimed delivery stays with its worker. It
	// is longer than any attempt can take, so a live worker never loses
	// its claim; after a crash the delivery is claimable again once it
	// runs out.
	DefaultLease = AttemptTimeout + 5*time.Second
	// DefaultPollInterval bounds how late another replica's deliveries, or
	// retries falling due, are noticed when no wake-up arrives.
	DefaultPollInterval = 250 * time.Millisecond
)

// Request is one signed POST for a Transport to make.
type Request struct {
	URL string
	// MessageID is the event id: the webhook-id header, the same on every
	// attempt so receivers can deduplicate.
	MessageID string
	Body      []byte
	// Secrets are the raw HMAC keys to sign with, current first.
	Secrets [][]byte
}

// Result is what one attempt came to.
type Result struct {
	// Status is the response status; 0 when no response arrived.
	Status int
	// Error is a fixed, client-safe reason when the attempt failed before a
	// response (never the underlying error text, which can name internal
	// addresses).
	Error    string
	Duration time.Duration
}

// OK reports a 2xx response.
func (r Result) OK() bool { return r.Error == "" && r.Status >= 200 && r.Status < 300 }

// Transport performs one delivery attempt: it signs and POSTs the request
// through the SSRF guard, with AttemptTimeout, following no redirect.
type Transport interface {
	Deliver(ctx context.Context, req Request) Result
}

// Fixed reasons recorded when no request was made.
const (
	reasonURLRefused     = "endpoint url refused: "
	reasonSigningFailure = "internal error: the delivery could not be signed"
)

// DispatcherOptions configure the Dispatcher.
type DispatcherOptions struct {
	Transport Transport
	// Box opens the endpoints' sealed signing secrets.
	Box secretbox.Key
	// AllowPrivate must match the Service's: URLs are re-validated before
	// every attempt.
	AllowPrivate bool
	// RetryInterval separates automatic attempts (spec: 30 s).
	RetryInterval time.Duration
	// Workers bounds concurrent attempts on this replica.
	Workers int
	// PollInterval and Lease default to DefaultPollInterval and DefaultLease.
	PollInterval time.Duration
	Lease        time.Duration
	// ListenURL, on PostgreSQL, is the connection string to LISTEN on
	// NotifyChannel with, so deliveries queued by other replicas start at
	// once instead of at the next poll. Empty: poll only.
	ListenURL string
	// ClaimURL, on PostgreSQL, is the connection string for the claims'
	// own session, whose commits do not wait for a WAL flush: a claim
	// only writes a lease, and a lease lost in a crash only lets the
	// delivery be attempted again (at-least-once, as after any crash
	// between an attempt and its record). So a first attempt never waits
	// for the disk: a flush that stalls for hundreds of milliseconds
	// delayed every first attempt behind it by as much. Attempts' records
	// stay durable. Empty: claims run on the shared pool.
	ClaimURL string
	// OnAttempt hears every attempt this dispatcher makes (metrics); nil:
	// nobody.
	OnAttempt func(AttemptInfo)
	Now       func() time.Time
	Log       *slog.Logger
}

// AttemptInfo is what OnAttempt hears of one attempt.
type AttemptInfo struct {
	// Status is the receiver's HTTP status; 0 when there was no answer
	// (network error, timeout, a refused URL, no signing secret).
	Status int
	Manual bool
	// First is the delivery's first automatic attempt; SinceCommit is then
	// the time from the commit that queued it (the delivery id's time) to
	// the attempt's start, else -1.
	First       bool
	SinceCommit time.Duration
}

// Dispatcher delivers due deliveries. Several replicas may run one each on
// the same PostgreSQL: a delivery is claimed by exactly one of them at a
// time (FOR UPDATE SKIP LOCKED, then a lease), and an attempt is recorded
// before the claim is given up.
type Dispatcher struct {
	db            *storage.DB
	transport     Transport
	box           secretbox.Key
	allowPrivate  bool
	retryInterval time.Duration
	workers       int
	poll          time.Duration
	lease         time.Duration
	listenURL     string
	claimURL      string
	now           func() time.Time
	log           *slog.Logger
	onAttempt     func(AttemptInfo)

	wake  chan struct{}
	freed chan struct{}
}

// NewDispatcher returns a dispatcher; Run starts it.
func NewDispatcher(db *storage.DB, opts DispatcherOptions) *Dispatcher {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 30 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Dispatcher{
		db: db, transport: opts.Transport, box: opts.Box, allowPrivate: opts.AllowPrivate,
		retryInterval: opts.RetryInterval, workers: opts.Workers, poll: opts.PollInterval,
		lease: opts.Lease, listenURL: opts.ListenURL, claimURL: opts.ClaimURL, now: opts.Now, log: opts.Log,
		onAttempt: opts.OnAttempt,
		wake:      make(chan struct{}, 1), freed: make(chan struct{}, 1),
	}
}

// Wake makes the dispatcher look for due deliveries now. It never blocks.
func (d *Dispatcher) Wake() { signal(d.wake) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends, then waits for the attempts in flight to
// finish and be recorded (each is bounded by AttemptTimeout), so a graceful
// shutdown leaves nothing half done.
func (d *Dispatcher) Run(ctx context.Context) {
	if d.listenURL != "" && d.db.IsPostgres() {
		stop := d.listen()
		defer stop()
	}
	claims := querier(d.db.Prepared)
	if d.claimURL != "" && d.db.IsPostgres() {
		if db, err := openClaims(d.claimURL); err != nil {
			d.log.ErrorContext(ctx, "webhook claims: own session unavailable; claiming on the shared pool", "err", err.Error())
		} else {
			p := storage.NewPrepared(db)
			defer db.Close()
			defer p.Close()
			claims = p
		}
	}
	// Attempts and their records outlive ctx: cancelling them would lose
	// their outcome and make the receiver see the event again after the
	// lease.
	bg := context.WithoutCancel(ctx)
	outcomes := make(chan outcome, d.workers)
	recorded := make(chan struct{})
	go func() { d.recordLoop(bg, outcomes); close(recorded) }()
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		close(outcomes)
		<-recorded
	}()
	busy := make(chan struct{}, d.workers)
	tick := time.NewTicker(d.poll)
	defer tick.Stop()
	// mayHaveWork is false only after a claim came back short: until a
	// wake-up or the poll, a freed slot is no reason to query again.
	mayHaveWork := true
	for {
		if free := d.workers - len(busy); mayHaveWork && free > 0 && ctx.Err() == nil {
			jobs, err := d.claim(ctx, claims, free)
			if err != nil && ctx.Err() == nil {
				d.log.ErrorContext(ctx, "webhook claim failed", "err", err.Error())
			}
			mayHaveWork = len(jobs) == free
			for _, j := range jobs {
				busy <- struct{}{}
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					if o, ok := d.attempt(bg, j, false); ok {
						outcomes <- o
					}
					<-busy
					signal(d.freed)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			mayHaveWork = true
		case <-tick.C:
			mayHaveWork = true
		case <-d.freed:
		}
	}
}

// maxRecordBatch bounds how many outcomes one transaction records.
const maxRecordBatch = 64

// recordLoop records outcomes as they come, several to a transaction when
// they come faster than one transaction takes: under load that is what
// keeps the database's work per delivery small.
func (d *Dispatcher) recordLoop(ctx context.Context, outcomes <-chan outcome) {
	batch := make([]outcome, 0, maxRecordBatch)
	for o := range outcomes {
		batch = append(batch[:0], o)
	more:
		for len(batch) < maxRecordBatch {
			select {
			case o, ok := <-outcomes:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		if err := d.record(ctx, batch); err != nil {
			// One bad row must not lose the others' outcomes.
			for _, o := range batch {
				if err := d.record(ctx, []outcome{o}); err != nil {
					d.log.ErrorContext(ctx, "webhook attempt not recorded", "delivery_id", o.j.deliveryID, "err", err.Error())
				}
			}
		}
	}
}

// listen wakes the dispatcher on NOTIFY from any replica's commit.
func (d *Dispatcher) listen() (stop func()) {
	l := pq.NewListener(d.listenURL, 100*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			d.log.Warn("webhook listener", "event", int(ev), "err", "connection problem")
		}
	})
	if err := l.Listen(NotifyChannel); err != nil {
		d.log.Warn("webhook listener unavailable; polling only", "err", err.Error())
		_ = l.Close()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-l.Notify:
				// nil after a reconnect: something may have been missed.
				d.Wake()
			}
		}
	}()
	return func() { close(done); _ = l.Close() }
}

// job is a claimed delivery with what an attempt needs.
type job struct {
	deliveryID string
	// lease is the claim's leased_until: the record step gives up the claim
	// only if it is still ours. Zero for a manual attempt.
	lease   time.Time
	eventID string
	payload []byte

	endpointID, url string
	// receives: the endpoint is enabled and not deleted, its business ACTIVE.
	receives bool
	// secret is the sealed current signing secret; previous the sealed one
	// still in its rotation grace, if any.
	secret   string
	previous *string
	// autoAttempts is how many automatic attempts were recorded before.
	autoAttempts int
}

// jobColumns read a claimed delivery's job: d is the delivery (id, auto_attempts,
// event_id, endpoint_id), joined with its event, endpoint and business.
// The previous secret is read only while its grace lasts (the ? is now).
const jobColumns = `SELECT d.id, d.auto_attempts, e.id, e.payload, ep.id, ep.url,
  ep.enabled AND ep.deleted_at IS NULL AND b.status = 'ACTIVE',
  ep.secret_ciphertext,
  CASE WHEN ep.previous_secret_expires_at > ? THEN ep.previous_secret_ciphertext END
FROM %s d
JOIN events e ON e.id = d.event_id
JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
JOIN businesses b ON b.id = ep.business_id`

// claimSubquery picks up to n due, unclaimed deliveries, oldest due first.
const claimSubquery = `SELECT id FROM webhook_deliveries
  WHERE status = 'PENDING' AND next_attempt_at <= ? AND (leased_until IS NULL OR leased_until < ?)
  ORDER BY next_attempt_at LIMIT ?`

// claim takes up to n due deliveries and reads what their attempts need.
// On PostgreSQL it is one statement, and SKIP LOCKED lets replicas claim
// side by side without waiting on or taking each other's rows; SQLite (one
// process) claims, then reads. The lease keeps a claimed row from being
// taken again until it is recorded or, after a crash, runs out.
func (d *Dispatcher) claim(ctx context.Context, claims querier, n int) ([]*job, error) {
	now := d.now().UTC().Truncate(time.Millisecond)
	until := now.Add(d.lease)
	if d.db.IsPostgres() {
		q := `WITH c AS (UPDATE webhook_deliveries SET leased_until = ?
  WHERE id IN (` + claimSubquery + ` FOR UPDATE SKIP LOCKED)
  RETURNING id, event_id, endpoint_id, auto_attempts)
` + fmt.Sprintf(jobColumns, "c")
		// Placeholders in text order: the CTE's, then the select's.
		return d.jobs(ctx, claims, until, q, until, now, now, n, now)
	}
	rows, err := d.db.Prepared.QueryContext(ctx, `UPDATE webhook_deliveries SET leased_until = ?
  WHERE id IN (`+claimSubquery+`) RETURNING id`, until, now, now, n)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// The leases run out if this read fails, and another pass takes the
	// rows again.
	return d.jobs(ctx, d.db.Prepared, until, jobsByID(len(ids)), append([]any{now}, ids...)...)
}

// jobsByID is the job query for n delivery ids.
func jobsByID(n int) string {
	return fmt.Sprintf(jobColumns, "webhook_deliveries") + " WHERE d.id IN (?" + strings.Repeat(", ?", n-1) + ")"
}

// querier runs a claim or job query: the shared pool's prepared
// statements, or the claims' own session.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ClaimsApplicationName tags the claims' session in pg_stat_activity.
const ClaimsApplicationName = "voucherd-webhook-claims"

// openClaims opens the claims' own session (see DispatcherOptions.ClaimURL):
// one connection, as the run loop claims one batch at a time.
func openClaims(databaseURL string) (*sql.DB, error) {
	dsn, err := storage.AsyncCommitURL(databaseURL, ClaimsApplicationName)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}

// jobs runs a job query; lease is the claim's (zero for a manual attempt).
func (d *Dispatcher) jobs(ctx context.Context, on querier, lease time.Time, q string, args ...any) ([]*job, error) {
	rows, err := on.QueryContext(ctx, d.db.Rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var out []*job
	for rows.Next() {
		j := &job{lease: lease}
		var prev sql.NullString
		if err := rows.Scan(&j.deliveryID, &j.autoAttempts, &j.eventID, &j.payload, &j.endpointID, &j.url, &j.receives, &j.secret, &prev); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if prev.Valid {
			j.previous = &prev.String
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// outcome is one attempt waiting to be recorded.
type outcome struct {
	j       *job
	started time.Time
	res     Result
	manual  bool
}

// attempt makes one attempt. An automatic attempt for an endpoint that may
// no longer receive ends the delivery's schedule instead (FAILED, no
// attempt; it stays retryable by hand) and reports no outcome.
func (d *Dispatcher) attempt(ctx context.Context, j *job, manual bool) (outcome, bool) {
	if !manual && !j.receives {
		d.cancel(ctx, j)
		return outcome{}, false
	}
	o := outcome{j: j, started: d.now().UTC(), manual: manual}
	if err := netguard.ValidateURL(j.url, d.allowPrivate); err != nil {
		o.res = Result{Error: reasonURLRefused + err.Error()}
	} else if secrets, err := d.secrets(j); err != nil {
		d.log.ErrorContext(ctx, "webhook signing secret unavailable", "endpoint_id", j.endpointID, "err", err.Error())
		o.res = Result{Error: reasonSigningFailure}
	} else {
		o.res = d.transport.Deliver(ctx, Request{URL: j.url, MessageID: j.eventID, Body: j.payload, Secrets: secrets})
	}
	if d.onAttempt != nil {
		a := AttemptInfo{Status: o.res.Status, Manual: manual, SinceCommit: -1}
		if !manual && j.autoAttempts == 0 {
			if queued, ok := ids.Time(j.deliveryID); ok {
				a.First, a.SinceCommit = true, max(0, o.started.Sub(queued))
			}
		}
		d.onAttempt(a)
	}
	return o, true
}

// secrets opens the current signing secret and, during a rotation's grace,
// the previous one.
func (d *Dispatcher) secrets(j *job) ([][]byte, error) {
	cur, err := openSecret(d.box, j.endpointID, j.secret)
	if err != nil {
		return nil, err
	}
	out := [][]byte{cur}
	if j.previous != nil {
		prev, err := openSecret(d.box, j.endpointID, *j.previous)
		if err != nil {
			return nil, err
		}
		out = append(out, prev)
	}
	return out, nil
}

// cancel ends an automatic schedule without an attempt, if the claim is
// still ours.
func (d *Dispatcher) cancel(ctx context.Context, j *job) {
	now := d.now().UTC()
	_, err := d.db.WebhookDelivery.Update().
		Where(webhookdelivery.ID(j.deliveryID), webhookdelivery.StatusEQ(webhookdelivery.StatusPENDING), webhookdelivery.LeasedUntil(j.lease)).
		SetStatus(webhookdelivery.StatusFAILED).ClearNextAttemptAt().ClearLeasedUntil().SetUpdatedAt(now).
		Save(ctx)
	if err != nil {
		d.log.ErrorContext(ctx, "webhook delivery not cancelled", "delivery_id", j.deliveryID, "err", err.Error())
		return
	}
	d.log.InfoContext(ctx, "webhook delivery cancelled: endpoint disabled or deleted, or business inactive",
		"delivery_id", j.deliveryID, "endpoint_id", j.endpointID)
}

// record writes the attempts and moves their deliveries on, in one
// transaction. Each delivery's UPDATE decides from the row itself, so no
// read is needed first:
//   - a 2xx ends the delivery SUCCEEDED, whoever made it;
//   - a failed automatic attempt whose claim is still ours (leased_until
//     unchanged) schedules the next retry, or ends the delivery FAILED after
//     MaxAutoAttempts; a finished delivery stays as it is;
//   - a failed manual attempt changes no schedule.
func (d *Dispatcher) record(ctx context.Context, batch []outcome) error {
	now := d.now().UTC()
	next := now.Add(d.retryInterval)
	return d.db.Tx(ctx, func(tx *ent.Tx) error {
		creates := make([]*ent.DeliveryAttemptCreate, len(batch))
		for i, o := range batch {
			c := tx.DeliveryAttempt.Create().
				SetDeliveryID(o.j.deliveryID).SetManual(o.manual).SetAttemptedAt(o.started).
				SetDurationMs(int(o.res.Duration / time.Millisecond))
			if o.res.Status != 0 {
				c.SetResponseStatus(o.res.Status)
			}
			if o.res.Error != "" {
				c.SetError(truncate(o.res.Error, 1024))
			}
			creates[i] = c
		}
		if err := tx.DeliveryAttempt.CreateBulk(creates...).Exec(ctx); err != nil {
			return err
		}
		for _, o := range batch {
			var status any
			if o.res.Status != 0 {
				status = o.res.Status
			}
			common := []any{o.started, status, now}
			var q string
			var args []any
			switch {
			case o.res.OK() && o.manual:
				q, args = recordManualSuccess, append(common, o.j.deliveryID)
			case o.res.OK():
				q, args = recordAutoSuccess, append(common, o.j.lease, o.j.deliveryID)
			case o.manual:
				q, args = recordManualFailure, append(common, o.j.deliveryID)
			default:
				l := o.j.lease
				q, args = recordAutoFailure, append(common, l, l, MaxAutoAttempts, l, MaxAutoAttempts, next, l, l, o.j.deliveryID)
			}
			if _, err := tx.ExecContext(ctx, d.db.Rebind(q), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// The record statements. Every SET expression reads the row as it was
// before the statement, on both databases.
const (
	recordSet = `UPDATE webhook_deliveries SET attempts = attempts + 1, last_attempt_at = ?, last_response_status = ?, updated_at = ?`

	recordManualSuccess = recordSet + `, status = 'SUCCEEDED', next_attempt_at = NULL, leased_until = NULL WHERE id = ?`

	recordAutoSuccess = recordSet + `, status = 'SUCCEEDED', next_attempt_at = NULL, leased_until = NULL,
		auto_attempts = auto_attempts + CASE WHEN leased_until = ? THEN 1 ELSE 0 END WHERE id = ?`

	recordManualFailure = recordSet + ` WHERE id = ?`

	recordAutoFailure = recordSet + `,
		auto_attempts = auto_attempts + CASE WHEN leased_until = ? THEN 1 ELSE 0 END,
		status = CASE WHEN status = 'PENDING' AND leased_until = ? AND auto_attempts + 1 >= ? THEN 'FAILED' ELSE status END,
		next_attempt_at = CASE
			WHEN status = 'PENDING' AND leased_until = ? AND auto_attempts + 1 < ? THEN ?
			WHEN status = 'PENDING' AND leased_until = ? THEN NULL
			ELSE next_attempt_at END,
		leased_until = CASE WHEN leased_until = ? THEN NULL ELSE leased_until END
		WHERE id = ?`
)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// attemptNow makes a manual attempt of a delivery at once and records it.
func (d *Dispatcher) attemptNow(ctx context.Context, deliveryID string) error {
	js, err := d.jobs(ctx, d.db.Prepared, time.Time{}, jobsByID(1), d.now().UTC(), deliveryID)
	if err != nil {
		return err
	}
	if len(js) != 1 {
		return errors.New("delivery refers to a missing row")
	}
	// The caller's request may end; the attempt and its record should not.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AttemptTimeout+5*time.Second)
	defer cancel()
	o, _ := d.attempt(actx, js[0], true)
	return d.record(actx, []outcome{o})
}

// openSecret opens a sealed signing secret (bound to its endpoint id) and
// returns its HMAC key.
func openSecret(box secretbox.Key, endpointID, sealed string) ([]byte, error) {
	plain, err := box.Open(sealed, []byte(endpointID))
	if err != nil {
		return nil, err
	}
	return signing.ParseSecret(string(plain))
}
