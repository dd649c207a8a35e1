package webhook_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/deliveryattempt"
	entevent "github.com/voucherd/voucherd/ent/event"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
)

// logEvents writes n events of type typ for the fixture's business,
// created one millisecond apart from start, as the outbox stores them.
func (f *fixture) logEvents(t *testing.T, n int, typ string, start time.Time) []*ent.Event {
	t.Helper()
	ctx := context.Background()
	var out []*ent.Event
	for len(out) < n {
		var batch []*ent.EventCreate
		for i := 0; i < 500 && len(out)+len(batch) < n; i++ {
			at := start.Add(time.Duration(len(out)+len(batch)) * time.Millisecond).UTC()
			id := ids.New(ids.Event)
			body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "createdAt": at, "data": map[string]any{"businessId": f.biz.ID, "n": len(out) + len(batch)}})
			batch = append(batch, f.db.Event.Create().SetID(id).SetBusinessID(f.biz.ID).SetVoucherID("vch_x").
				SetVoucherVersion(1).SetType(typ).SetPayload(body).SetCreatedAt(at))
		}
		rows, err := f.db.Event.CreateBulk(batch...).Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}

// TestReplayBound: a window of more than 10,000 matching events is refused
// and queues nothing; the same window cut to 10,000 queues each once, for
// the endpoint's subscribed types only.
func TestReplayBound(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{allowPrivate: true})
		ep := f.endpoint(t, "http://127.0.0.1:9/hook", settlement.EventConfirmed)
		start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		events := f.logEvents(t, webhook.MaxReplay+1, settlement.EventConfirmed, start)
		f.logEvents(t, 50, webhook.DepositCreated, start) // not subscribed
		since := start.Add(-time.Millisecond).UnixMilli()

		_, err := f.svc.Replay(f.owner, f.biz.ID, ep.ID, webhook.ReplayInput{Since: &since})
		if !apperr.HasCode(err, apperr.ValidationFailed) {
			t.Fatalf("replay of %d events: %v, want validation_failed", len(events), err)
		}
		if n := db.WebhookDelivery.Query().CountX(context.Background()); n != 0 {
			t.Fatalf("a refused replay queued %d deliveries", n)
		}

		until := events[webhook.MaxReplay].CreatedAt.UnixMilli() // the last one is left out
		n, err := f.svc.Replay(f.owner, f.biz.ID, ep.ID, webhook.ReplayInput{Since: &since, Until: &until})
		if err != nil || n != webhook.MaxReplay {
			t.Fatalf("replay: %d, %v; want %d", n, err, webhook.MaxReplay)
		}
		ds := db.WebhookDelivery.Query().Where(webhookdelivery.EndpointID(ep.ID)).AllX(context.Background())
		seen := map[string]bool{}
		for _, d := range ds {
			if d.EventType != settlement.EventConfirmed || d.Status != webhookdelivery.StatusPENDING || seen[d.EventID] {
				t.Fatalf("delivery %+v", d)
			}
			seen[d.EventID] = true
		}
		if len(seen) != webhook.MaxReplay || seen[events[webhook.MaxReplay].ID] {
			t.Fatalf("%d distinct events queued", len(seen))
		}

		// The same window again queues the same events again.
		if n, err := f.svc.Replay(f.owner, f.biz.ID, ep.ID, webhook.ReplayInput{Since: &since, Until: &until}); err != nil || n != webhook.MaxReplay {
			t.Fatalf("second replay: %d, %v", n, err)
		}
	})
}

func TestReplayRules(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{allowPrivate: true})
		ep := f.endpoint(t, "http://127.0.0.1:9/hook", webhook.DepositCreated, settlement.EventConfirmed)
		start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		f.logEvents(t, 3, webhook.DepositCreated, start)
		f.logEvents(t, 2, settlement.EventConfirmed, start)
		f.logEvents(t, 4, settlement.EventFailed, start)
		since := start.Add(-time.Millisecond).UnixMilli()
		neg, early := int64(-1), since-1
		for _, c := range []struct {
			name string
			ctx  context.Context
			in   webhook.ReplayInput
			code apperr.Code
			n    int
		}{
			{"member", f.member, webhook.ReplayInput{Since: &since}, apperr.Forbidden, 0},
			{"outsider", f.outsider, webhook.ReplayInput{Since: &since}, apperr.NotFound, 0},
			{"no since", f.owner, webhook.ReplayInput{}, apperr.ValidationFailed, 0},
			{"negative since", f.owner, webhook.ReplayInput{Since: &neg}, apperr.ValidationFailed, 0},
			{"until before since", f.owner, webhook.ReplayInput{Since: &since, Until: &early}, apperr.ValidationFailed, 0},
			{"unknown type", f.owner, webhook.ReplayInput{Since: &since, Types: []string{"deposit.nope"}}, apperr.ValidationFailed, 0},
			{"repeated type", f.owner, webhook.ReplayInput{Since: &since, Types: []string{webhook.DepositCreated, webhook.DepositCreated}}, apperr.ValidationFailed, 0},
			{"all subscribed", f.admin, webhook.ReplayInput{Since: &since}, "", 5},
			{"one type", f.owner, webhook.ReplayInput{Since: &since, Types: []string{settlement.EventConfirmed}}, "", 2},
			{"unsubscribed type", f.owner, webhook.ReplayInput{Since: &since, Types: []string{settlement.EventFailed}}, "", 0},
		} {
			n, err := f.svc.Replay(c.ctx, f.biz.ID, ep.ID, c.in)
			if apperr.CodeOf(err) != c.code && !(c.code == "" && err == nil) || n != c.n {
				t.Errorf("%s: %d, %v; want %d, %q", c.name, n, err, c.n, c.code)
			}
		}
		if _, err := f.svc.Replay(f.owner, f.biz.ID, "whe_nope", webhook.ReplayInput{Since: &since}); !apperr.HasCode(err, apperr.NotFound) {
			t.Errorf("unknown endpoint: %v", err)
		}
		off := false
		if _, err := f.svc.UpdateEndpoint(f.owner, f.biz.ID, ep.ID, webhook.UpdateEndpointInput{Enabled: &off}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Replay(f.owner, f.biz.ID, ep.ID, webhook.ReplayInput{Since: &since}); !apperr.HasCode(err, apperr.NotRetryable) {
			t.Errorf("disabled endpoint: %v", err)
		}
	})
}

// TestPruneEvents: events past the retention go with their deliveries and
// attempts; younger ones stay.
func TestPruneEvents(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{allowPrivate: true})
		ep := f.endpoint(t, "http://127.0.0.1:9/hook")
		old := f.logEvents(t, 600, webhook.DepositCreated, time.Now().Add(-webhook.EventRetention-time.Hour))
		young := f.logEvents(t, 3, webhook.DepositCreated, time.Now().Add(-webhook.EventRetention+time.Hour))
		for _, e := range []*ent.Event{old[0], old[599], young[0]} {
			d := db.WebhookDelivery.Create().SetBusinessID(f.biz.ID).SetEndpointID(ep.ID).SetEventID(e.ID).
				SetEventType(e.Type).SaveX(ctx)
			db.DeliveryAttempt.Create().SetDeliveryID(d.ID).SetAttemptedAt(time.Now()).SetDurationMs(1).SaveX(ctx)
		}
		n, err := f.svc.PruneEvents(ctx)
		if err != nil || n != 600 {
			t.Fatalf("prune: %d, %v", n, err)
		}
		if got := db.Event.Query().Where(entevent.BusinessID(f.biz.ID)).IDsX(ctx); len(got) != 3 {
			t.Fatalf("%d events left, want the 3 young ones", len(got))
		}
		if n := db.WebhookDelivery.Query().CountX(ctx); n != 1 {
			t.Fatalf("%d deliveries left, want 1", n)
		}
		if n := db.DeliveryAttempt.Query().Where(deliveryattempt.HasDeliveryWith(webhookdelivery.EventID(young[0].ID))).CountX(ctx); n != 1 {
			t.Fatalf("the young event's attempt is gone")
		}
		if n, err := f.svc.PruneEvents(ctx); err != nil || n != 0 {
			t.Fatalf("second prune: %d, %v", n, err)
		}
	})
}
