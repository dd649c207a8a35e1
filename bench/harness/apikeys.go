package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/voucherd/voucherd/bench/report"
	"github.com/voucherd/voucherd/bench/stats"
)

// replayEvents is how many logged events the replay scenario queues: the
// most one replay call takes.
const replayEvents = 10000

// apiKeys: the same REST GET (the business) by a member's JWT and by an
// API key with business:read, interleaved slice by slice at the read
// clients (a key is proven from memory: no statement per request); and a
// replay of 10,000 logged events to an endpoint, timed until queued (the
// answer) and until the receiver had them all.
func (s *pgScenarios) apiKeys(ctx context.Context) {
	h := s.h
	lc := h.cfg.ReadClients
	jid, kid, rid := fmt.Sprintf("apikey-get-jwt-c%d", lc), fmt.Sprintf("apikey-get-key-c%d", lc), "apikey-replay-10000"
	jname, kname := fmt.Sprintf("GET business REST by JWT, %d clients", lc), fmt.Sprintf("GET business REST by API key, %d clients", lc)
	rname := fmt.Sprintf("replay of %d logged events", replayEvents)
	reason := s.setupReason("create-business", "create-endpoint")
	var biz, key string
	if reason == "" {
		if err := guard(func() error {
			var err error
			if biz, err = s.business(ctx); err != nil {
				return err
			}
			var k struct {
				Key string `json:"key"`
			}
			if err := s.api.Do(ctx, http.MethodPost, "/api/v1/businesses/"+biz+"/api-keys/create-api-key", s.user.Token,
				map[string]any{"name": "voucherbench", "scopes": []string{"business:read", "webhooks:write"}}, &k); err != nil {
				return err
			}
			key = k.Key
			return nil
		}); err != nil {
			reason = "the service has no API keys: " + err.Error()
		}
	}
	conns := newLeanConns(s.svc.Addr, max(lc, 1))
	defer conns.Close()
	get := func(token string) Op {
		want := []byte(biz)
		return func(ctx context.Context, w int) error {
			b, err := conns.ok(ctx, w, http.MethodGet, "/api/v1/businesses/"+biz, token, nil)
			if err == nil && !bytes.Contains(b, want) {
				err = fmt.Errorf("answer does not name the business: %.200s", b)
			}
			return err
		}
	}
	targets := []readTarget{{jid, jname, get(s.user.Token), s.svc, true}, {kid, kname, get(key), s.svc, true}}
	s.readPhase(ctx, lc, h.cfg.Duration, fmt.Sprintf("apikey-c%d", lc), targets, func(j int) (string, string, string, string) {
		return targets[j].id, targets[j].name, "apikeys", reason
	})

	if reason != "" {
		h.notRun(rid, "apikeys", rname, reason)
		return
	}
	rcv, err := startReceiver()
	if err != nil {
		h.notRun(rid, "apikeys", rname, err.Error())
		return
	}
	defer rcv.srv.Close()
	err = guard(func() error {
		var ep struct {
			ID string `json:"id"`
		}
		if err := s.api.Do(ctx, http.MethodPost, "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", s.user.Token,
			map[string]any{"url": rcv.url, "events": []string{"deposit.confirmed"}, "description": "voucherbench replay"}, &ep); err != nil {
			return err
		}
		since := time.Now().Add(-time.Hour)
		// The log as the outbox writes it, a millisecond apart.
		if _, err := h.adm.ExecContext(ctx, `INSERT INTO events (id, business_id, voucher_id, voucher_version, type, payload, created_at)
SELECT 'evt_bench' || g, $1::text, 'vch_bench' || g, 1, 'deposit.confirmed',
  convert_to('{"id":"evt_bench' || g || '","type":"deposit.confirmed","createdAt":"2026-11-27T00:00:00.000Z","data":{"businessId":"' || $1::text || '","voucherId":"vch_bench' || g || '"}}', 'UTF8'),
  $2::timestamptz + g * interval '1 millisecond'
FROM generate_series(1, $3::int) g`, biz, since, replayEvents); err != nil {
			return err
		}
		var out struct {
			Queued int `json:"queued"`
		}
		start := time.Now()
		if err := s.api.Do(ctx, http.MethodPost, "/api/v1/businesses/"+biz+"/webhook-endpoints/"+ep.ID+"/replay", key,
			map[string]any{"since": since.UnixMilli()}, &out); err != nil {
			return err
		}
		queued := time.Since(start)
		if out.Queued != replayEvents {
			return fmt.Errorf("replay queued %d, want %d", out.Queued, replayEvents)
		}
		deadline := time.Now().Add(5 * time.Minute)
		for rcv.attempts.Load() < replayEvents {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("only %d of %d replayed events delivered in 5 minutes", rcv.attempts.Load(), replayEvents)
			}
			time.Sleep(20 * time.Millisecond)
		}
		delivered := time.Since(start)
		sum := stats.Summary{Count: 1, Elapsed: queued, Min: queued, Mean: queued, P50: queued, P90: queued, P95: queued, P99: queued, P999: queued, Max: queued}
		h.add(&report.Result{ID: rid, Group: "apikeys", Name: rname, Unit: "call", Latency: &sum, Figures: []report.Figure{
			{Name: "queued (the call's answer)", Value: float64(queued) / float64(time.Millisecond), Unit: "ms"},
			{Name: "all delivered", Value: delivered.Seconds(), Unit: "s"},
			{Name: "delivery rate", Value: float64(replayEvents) / delivered.Seconds(), Unit: "/s"},
		}, Notes: []string{"events inserted as the outbox writes them; the replay is authenticated by the API key (webhooks:write)"}})
		return nil
	})
	if err != nil {
		h.notRun(rid, "apikeys", rname, "failed: "+err.Error())
	}
}
