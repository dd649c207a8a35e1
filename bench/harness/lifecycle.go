package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// lifecycle measures whole voucher lifecycles per second: each client is a
// payer wallet (a device signed up beforehand) that opens a session, hands
// its code to a payee who signs in as a resource, reserves and redeems, and
// then negotiates and resolves as the payer: six requests, as in the spec.
func (h *Harness) lifecycle(ctx context.Context, id, name string, api *API, svc *Process, pprof string, f features) {
	if reason := f.missing("reserve-voucher", "redeem-voucher", "negotiate-voucher", "resolve-voucher"); reason != "" {
		h.notRun(id, "lifecycle", name, reason)
		return
	}
	err := guard(func() error {
		n := h.cfg.LifecycleClients
		payers := make([]Identity, n)
		for i := range payers {
			var err error
			if payers[i], err = api.Device(ctx); err != nil {
				return err
			}
		}
		steps := []string{"create-session", "resource sign-in", "reserve", "redeem", "negotiate", "resolve"}
		recs := make([]*stats.Recorder, len(steps))
		for i := range recs {
			recs[i] = stats.NewRecorder(0)
		}
		timed := func(i int, fn func() error) error {
			t := time.Now()
			err := fn()
			if err == nil {
				recs[i].Add(time.Since(t))
			}
			return err
		}
		one := func(ctx context.Context, w int) error {
			payer := payers[w].Token
			var sess Session
			var tok, paymentID string
			var v Voucher
			if err := timed(0, func() (err error) { sess, err = api.CreateSession(ctx, payer); return }); err != nil {
				return err
			}
			if err := timed(1, func() (err error) { tok, err = api.Resource(ctx, sess.Code); return }); err != nil {
				return err
			}
			if err := timed(2, func() (err error) { v, err = api.Reserve(ctx, tok, sess.Code, ""); return }); err != nil {
				return err
			}
			if err := timed(3, func() error {
				r, err := api.Redeem(ctx, tok, v.ID)
				if err == nil && (r.ExpectedPayment == nil || r.ExpectedPayment.ID == "") {
					err = errors.New("redeem answer has no expectedPayment.id")
				}
				if err == nil {
					paymentID = r.ExpectedPayment.ID
				}
				return err
			}); err != nil {
				return err
			}
			if err := timed(4, func() error { return api.Negotiate(ctx, payer, v.ID) }); err != nil {
				return err
			}
			return timed(5, func() error { return api.Resolve(ctx, payer, v.ID, paymentID) })
		}
		if err := one(ctx, 0); err != nil {
			return fmt.Errorf("first lifecycle: %w", err)
		}
		for _, r := range recs {
			*r = *stats.NewRecorder(0)
		}
		prof := h.profile(pprof, id)
		smp := sampler(svc, true)
		sum := ClosedLoop(ctx, n, h.cfg.Warmup, h.cfg.Duration, one)
		usage := stopSampler(smp, svc, true)
		prof()
		res := &report.Result{ID: id, Group: "lifecycle", Name: fmt.Sprintf("%s, %d clients", name, n), Unit: "lifecycle", Latency: &sum, Usage: usage}
		for i, r := range recs {
			s := r.Summary(sum.Elapsed)
			res.Figures = append(res.Figures, report.Figure{Name: "p50 " + steps[i], Value: float64(s.P50) / float64(time.Millisecond), Unit: "ms"})
		}
		h.add(res)
		return nil
	})
	if err != nil {
		h.notRun(id, "lifecycle", name, "failed: "+err.Error())
	}
}

// sqlite runs the lifecycle and the commit-to-subscriber phase against a
// second service on the embedded database (the PostgreSQL one is stopped
// by then).
func (h *Harness) sqlite(ctx context.Context) {
	const id, name = "lifecycle-sqlite", "lifecycle on SQLite"
	fail := func(reason string) {
		if h.want("lifecycle") {
			h.notRun(id, "lifecycle", name, reason)
		}
		if h.want("subscriptions") {
			h.notRun("subs-c2c-sqlite", "subscriptions", "commit→subscriber SQLite", reason)
		}
	}
	dir, err := os.MkdirTemp("", "voucherbench-sqlite")
	if err != nil {
		fail(err.Error())
		return
	}
	defer os.RemoveAll(dir)
	svc, pp, err := h.startService("sqlite://" + filepath.Join(dir, "voucherd.db"))
	if err != nil {
		fail("failed: " + err.Error())
		return
	}
	defer svc.Stop()
	api := NewAPI(svc.URL, 256)
	defer api.CloseIdle()
	s := &pgScenarios{h: h, api: api}
	f := s.probe(ctx)
	if h.want("lifecycle") {
		h.lifecycle(ctx, id, name, api, svc, pp, f)
	}
	if h.want("subscriptions") {
		h.sqliteCommitToClient(ctx, api, svc, pp, f)
	}
}
