package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/voucherd/voucherd/bench/pgref"
	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// receiver is the local webhook endpoint: it answers 200 at once (unless
// held, see hold) and notes when each voucher's first delivery attempt
// arrived.
type receiver struct {
	mu       sync.Mutex
	first    map[string]time.Time
	attempts atomic.Int64
	bad      atomic.Int64
	held     atomic.Int64
	srv      *http.Server
	url      string
	// gate, while open (not nil and not closed), holds every attempt
	// until it is closed or maxHold has passed.
	gate atomic.Pointer[chan struct{}]
}

// maxHold keeps a held attempt well inside the service's 10 s attempt
// timeout: a held attempt must still succeed.
const maxHold = 7 * time.Second

// hold makes the receiver keep attempts waiting until release is called:
// the dispatcher's workers all wait on it, so deliveries pile up as
// PENDING, and release then measures how fast the dispatcher drains them.
func (r *receiver) hold() (release func()) {
	g := make(chan struct{})
	r.gate.Store(&g)
	var once sync.Once
	return func() { once.Do(func() { close(g); r.gate.Store(nil) }) }
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{first: map[string]time.Time{}, url: "http://" + ln.Addr().String() + "/hook"}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if g := r.gate.Load(); g != nil {
		r.held.Add(1)
		select {
		case <-*g:
		case <-time.After(maxHold):
		}
	}
	at := time.Now()
	r.attempts.Add(1)
	b, err := io.ReadAll(req.Body)
	var ev struct {
		Type string `json:"type"`
		Data struct {
			VoucherID string `json:"voucherId"`
		} `json:"data"`
	}
	if err != nil || json.Unmarshal(b, &ev) != nil || ev.Data.VoucherID == "" || req.Header.Get("webhook-signature") == "" {
		r.bad.Add(1)
	} else {
		r.mu.Lock()
		if _, ok := r.first[ev.Data.VoucherID]; !ok {
			r.first[ev.Data.VoucherID] = at
		}
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) got(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.first[id]
	return t, ok
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.first)
}

// webhooks: redeeming business vouchers emits deposit.created into the
// outbox in the redeem's transaction; the dispatcher delivers it. Paced
// redeems give commit-to-first-attempt latency; a burst gives deliveries
// per second.
func (s *pgScenarios) webhooks(ctx context.Context) {
	h := s.h
	const lid, tid = "webhook-latency", "webhook-throughput"
	lname := fmt.Sprintf("webhook commit→first attempt, %.0f redeems/s", h.cfg.WebhookRate)
	tname := fmt.Sprintf("webhook deliveries, burst of %d", h.cfg.WebhookBurst)
	if r := s.setupReason("reserve-voucher", "redeem-voucher", "create-business", "create-endpoint"); r != "" {
		h.notRun(lid, "webhooks", lname, r)
		h.notRun(tid, "webhooks", tname, r)
		return
	}
	rcv, err := startReceiver()
	if err != nil {
		h.notRun(lid, "webhooks", lname, err.Error())
		return
	}
	defer rcv.srv.Close()
	var ids []string
	err = guard(func() error {
		biz, err := s.business(ctx)
		if err != nil {
			return err
		}
		var ep struct {
			ID string `json:"id"`
		}
		if err := s.api.Do(ctx, http.MethodPost, "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", s.user.Token,
			map[string]any{"url": rcv.url, "events": []string{"deposit.created"}, "description": "voucherbench receiver"}, &ep); err != nil {
			return err
		}
		src, err := s.api.Reserve(ctx, s.user.Token, s.sess.Code, biz)
		if err != nil {
			return err
		}
		paced := int(h.cfg.WebhookRate * h.cfg.Duration.Seconds())
		run, err := s.seed(ctx, src.ID, 1, paced+h.cfg.WebhookBurst)
		if err != nil {
			return err
		}
		for i := 0; i < paced+h.cfg.WebhookBurst; i++ {
			ids = append(ids, pgref.SeedID(run, 0, i+1))
		}
		// A first delivery proves the dispatcher is there at all.
		t1, err := s.redeemAt(ctx, ids[0])
		if err != nil {
			return err
		}
		if !waitFor(ctx, 15*time.Second, func() bool { _, ok := rcv.got(ids[0]); return ok }) {
			return fmt.Errorf("notrun: no webhook delivery arrived within 15 s of a business voucher's redeem (no dispatcher running?)")
		}
		_ = t1
		ids = ids[1:]
		paced--
		commits := make([]time.Time, paced)
		prof := s.profile(lid)
		smp := sampler(s.svc, true)
		n, errs, _, elapsed := OpenLoop(ctx, h.cfg.WebhookRate, h.cfg.Duration, 256, func(ctx context.Context, i int) error {
			if i >= paced {
				return nil
			}
			t, err := s.redeemAt(ctx, ids[i])
			commits[i] = t
			return err
		})
		n = min(n, paced)
		waitFor(ctx, 30*time.Second, func() bool { return rcv.count() >= n+1-int(errs.Summary(0).Errors) })
		usage := stopSampler(smp, s.svc, true)
		prof()
		var lat []time.Duration
		missing := int64(0)
		for i := 0; i < n; i++ {
			if commits[i].IsZero() {
				continue
			}
			at, ok := rcv.got(ids[i])
			if !ok {
				missing++
				continue
			}
			lat = append(lat, max(at.Sub(commits[i]), 0))
		}
		es := errs.Summary(elapsed)
		sum := stats.Summarize(lat, missing+es.Errors, elapsed, es.ErrorMsg)
		h.add(&report.Result{ID: lid, Group: "webhooks", Name: lname, Unit: "delivery", Latency: &sum, Usage: usage,
			Figures: []report.Figure{
				{Name: "redeems", Value: float64(n), Unit: ""},
				{Name: "not delivered within 30 s", Value: float64(missing), Unit: ""},
				{Name: "attempts with a bad body or no signature", Value: float64(rcv.bad.Load()), Unit: ""},
			}})
		ids = ids[paced:]
		return nil
	})
	if err != nil {
		reason := "failed: " + err.Error()
		if len(err.Error()) > 7 && err.Error()[:7] == "notrun:" {
			reason = err.Error()[8:]
		}
		h.notRun(lid, "webhooks", lname, reason)
		h.notRun(tid, "webhooks", tname, reason)
		return
	}
	err = guard(func() error {
		// Deliveries per second: the dispatcher's own rate, not the
		// redeems'. The receiver holds the first attempts, so every
		// worker waits on it while the burst of redeems fills the outbox;
		// then it lets go, and the drain is timed from that moment to
		// the last first attempt.
		burst := ids[:min(len(ids), h.cfg.WebhookBurst)]
		before := rcv.count()
		release := rcv.hold()
		defer release()
		smp := sampler(s.svc, true)
		prof := s.profile(tid)
		start := time.Now()
		failed := parallel(ctx, 16, len(burst), func(ctx context.Context, i int) error {
			_, err := s.redeemAt(ctx, burst[i])
			return err
		})
		redeemEnd := time.Now()
		heldBefore := rcv.held.Load()
		time.Sleep(200 * time.Millisecond) // the dispatcher has claimed what it can
		open := time.Now()
		release()
		lateGate := open.Sub(start) > maxHold
		waitFor(ctx, 120*time.Second, func() bool { return rcv.count() >= before+len(burst) })
		usage := stopSampler(smp, s.svc, true)
		prof()
		var last time.Time
		var lat []time.Duration
		for _, id := range burst {
			at, ok := rcv.got(id)
			if !ok {
				continue
			}
			if at.After(last) {
				last = at
			}
			lat = append(lat, max(at.Sub(open), 0))
		}
		delivered := len(lat)
		drain := last.Sub(open)
		sum := stats.Summarize(lat, int64(len(burst)-delivered), drain, nil)
		if drain > 0 {
			sum.PerSec = float64(delivered) / drain.Seconds()
		}
		res := &report.Result{ID: tid, Group: "webhooks", Name: tname, Unit: "delivery", Latency: &sum, Usage: usage,
			Figures: []report.Figure{
				{Name: "deliveries per second (dispatcher draining a full outbox)", Value: sum.PerSec, Unit: "/s"},
				{Name: "attempts held while the outbox filled", Value: float64(heldBefore), Unit: ""},
				{Name: "redeems per second filling it", Value: float64(len(burst)) / redeemEnd.Sub(start).Seconds(), Unit: "/s"},
				{Name: "redeem errors", Value: float64(failed), Unit: ""},
				{Name: "delivered", Value: float64(delivered), Unit: fmt.Sprintf("of %d", len(burst))},
			},
			Notes: []string{"latency columns: from the receiver letting go to each voucher's first attempt"}}
		if lateGate {
			res.Notes = append(res.Notes, fmt.Sprintf("the redeems took longer than %s, so held attempts were answered before the burst was complete: the drain overlaps the redeems", maxHold))
		}
		h.add(res)
		return nil
	})
	if err != nil {
		h.notRun(tid, "webhooks", tname, "failed: "+err.Error())
	}
}

// parallel runs fn for 0..n-1 on workers goroutines and counts failures.
func parallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) int64 {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if fn(ctx, i) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}

// redeemAt redeems id as the business user and returns when the answer
// (sent after commit) arrived.
func (s *pgScenarios) redeemAt(ctx context.Context, id string) (time.Time, error) {
	_, err := s.api.Redeem(ctx, s.user.Token, id)
	return time.Now(), err
}
