package webhook_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/deliveryattempt"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/internal/webhook/signing"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// redeem records a deposit.created for a fresh voucher and returns the
// event id.
func (f *fixture) redeem(t *testing.T) string {
	t.Helper()
	v := simple(f.biz.ID, entvoucher.StatusRESERVED, "10", "")
	v.ID = fmt.Sprintf("vch_%d", seq.Add(1))
	next := with(v, func(c *ent.Voucher) { c.Status = entvoucher.StatusREDEEMED })
	ps := change(t, f, v, next)
	if len(ps) != 1 {
		t.Fatalf("events %v", ps)
	}
	return ps[0].ID
}

func (f *fixture) deliveryOf(t *testing.T, eventID string) *ent.WebhookDelivery {
	t.Helper()
	return f.db.WebhookDelivery.Query().Where(webhookdelivery.EventID(eventID)).OnlyX(context.Background())
}

func (f *fixture) attempts(t *testing.T, deliveryID string) []*ent.DeliveryAttempt {
	t.Helper()
	return f.db.DeliveryAttempt.Query().Where(deliveryattempt.DeliveryID(deliveryID)).
		Order(ent.Asc(deliveryattempt.FieldAttemptedAt)).AllX(context.Background())
}

func TestDispatcherDelivers(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		// A long poll: only the commit's wake-up can make this quick.
		heard := make(chan webhook.AttemptInfo, 8)
		f.disp = webhook.NewDispatcher(db, webhook.DispatcherOptions{Transport: f.transport, Box: f.box, Log: quiet, PollInterval: time.Hour,
			OnAttempt: func(a webhook.AttemptInfo) { heard <- a }})
		f.outbox = webhook.NewOutbox(db, webhook.OutboxOptions{Wake: f.disp.Wake})
		e := f.endpoint(t, "https://hooks.example.com/a")
		f.run(t)
		time.Sleep(50 * time.Millisecond) // let the first (empty) claim pass

		start := time.Now()
		id := f.redeem(t)
		eventually(t, 2*time.Second, "delivery", func() bool { return f.transport.count(id) == 1 })
		if d := time.Since(start); d > time.Second {
			t.Fatalf("first attempt %v after commit", d)
		}
		eventually(t, 2*time.Second, "success recorded", func() bool {
			return f.deliveryOf(t, id).Status == webhookdelivery.StatusSUCCEEDED
		})
		d := f.deliveryOf(t, id)
		if d.Attempts != 1 || d.LastResponseStatus == nil || *d.LastResponseStatus != 200 || d.NextAttemptAt != nil || d.LeasedUntil != nil {
			t.Fatalf("delivery %+v", d)
		}
		req := f.transport.requests()[0]
		ev := db.Event.GetX(context.Background(), id)
		key, _ := signing.ParseSecret(e.SigningSecret)
		if req.URL != e.URL || req.MessageID != id || string(req.Body) != string(ev.Payload) || len(req.Secrets) != 1 || string(req.Secrets[0]) != string(key) {
			t.Fatalf("request %+v", req)
		}
		as := f.attempts(t, d.ID)
		if len(as) != 1 || as[0].Manual || as[0].ResponseStatus == nil || *as[0].ResponseStatus != 200 || as[0].Error != nil {
			t.Fatalf("attempts %+v", as)
		}
		// The metrics hook heard the first automatic attempt, timed from
		// the commit that queued it.
		select {
		case a := <-heard:
			if a.Status != 200 || a.Manual || !a.First || a.SinceCommit < 0 || a.SinceCommit > time.Since(start) {
				t.Fatalf("OnAttempt heard %+v (%v since the redeem)", a, time.Since(start))
			}
		default:
			t.Fatal("OnAttempt heard nothing")
		}
	})
}

func TestDispatcherRetriesThenFails(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		interval := 100 * time.Millisecond
		f := newFixture(t, db, fixtureOptions{retryInterval: interval})
		f.transport.setRespond(func(webhook.Request, int) webhook.Result { return webhook.Result{Status: 503} })
		f.endpoint(t, "https://hooks.example.com/a")
		id := f.redeem(t)
		f.run(t)
		eventually(t, 5*time.Second, "FAILED", func() bool { return f.deliveryOf(t, id).Status == webhookdelivery.StatusFAILED })
		time.Sleep(3 * interval) // nothing more comes
		if n := f.transport.count(id); n != webhook.MaxAutoAttempts {
			t.Fatalf("%d attempts, want %d", n, webhook.MaxAutoAttempts)
		}
		d := f.deliveryOf(t, id)
		if d.Attempts != 4 || d.AutoAttempts != 4 || d.NextAttemptAt != nil || *d.LastResponseStatus != 503 {
			t.Fatalf("delivery %+v", d)
		}
		as := f.attempts(t, d.ID)
		if len(as) != 4 {
			t.Fatalf("%d attempts recorded", len(as))
		}
		for i := 1; i < len(as); i++ {
			if gap := as[i].AttemptedAt.Sub(as[i-1].AttemptedAt); gap < interval-10*time.Millisecond {
				t.Fatalf("attempt %d came %v after the previous one; interval is %v", i, gap, interval)
			}
		}
	})
}

func TestManualRetry(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{retryInterval: 20 * time.Millisecond})
		var mu sync.Mutex
		status := 500
		f.transport.setRespond(func(webhook.Request, int) webhook.Result {
			mu.Lock()
			defer mu.Unlock()
			return webhook.Result{Status: status}
		})
		f.endpoint(t, "https://hooks.example.com/a")
		id := f.redeem(t)
		f.run(t)
		eventually(t, 5*time.Second, "FAILED", func() bool { return f.deliveryOf(t, id).Status == webhookdelivery.StatusFAILED })
		dl := f.deliveryOf(t, id)

		_, err := f.svc.RetryDelivery(f.member, f.biz.ID, dl.ID)
		wantCode(t, err, apperr.Forbidden)
		_, err = f.svc.RetryDelivery(f.outsider, f.biz.ID, dl.ID)
		wantCode(t, err, apperr.NotFound)

		// A failed manual attempt is recorded and leaves the delivery FAILED.
		got, err := f.svc.RetryDelivery(f.admin, f.biz.ID, dl.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != webhookdelivery.StatusFAILED || got.Attempts != 5 || got.AutoAttempts != 4 {
			t.Fatalf("after a failed retry %+v", got)
		}
		mu.Lock()
		status = 204
		mu.Unlock()
		got, err = f.svc.RetryDelivery(f.owner, f.biz.ID, dl.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != webhookdelivery.StatusSUCCEEDED || got.Attempts != 6 || *got.LastResponseStatus != 204 {
			t.Fatalf("after a good retry %+v", got)
		}
		as := f.attempts(t, dl.ID)
		if len(as) != 6 || !as[4].Manual || !as[5].Manual || as[3].Manual {
			t.Fatalf("attempt log %+v", as)
		}
		_, err = f.svc.RetryDelivery(f.owner, f.biz.ID, dl.ID)
		wantCode(t, err, apperr.NotRetryable)
		if f.transport.count(id) != 6 {
			t.Fatalf("%d requests", f.transport.count(id))
		}
	})
}

func TestManualRetryKeepsSchedule(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		// The manual retry must come before the second automatic attempt is
		// due: a second leaves room for a loaded CI machine between the
		// first attempt being seen and the retry.
		interval := time.Second
		f := newFixture(t, db, fixtureOptions{retryInterval: interval})
		f.transport.setRespond(func(webhook.Request, int) webhook.Result { return webhook.Result{Status: 500} })
		f.endpoint(t, "https://hooks.example.com/a")
		f.run(t)
		// The case needs the manual attempt to land between the first and
		// the second automatic one. A loaded machine can let the second
		// come first: that try proves nothing either way, so it is made
		// again with a new delivery (at most 5 times).
		var id string
		for try := 1; ; try++ {
			id = f.redeem(t)
			eventually(t, 5*time.Second, "first attempt", func() bool { return f.deliveryOf(t, id).AutoAttempts == 1 })
			dl := f.deliveryOf(t, id)
			next := *dl.NextAttemptAt
			got, err := f.svc.RetryDelivery(f.owner, f.biz.ID, dl.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.AutoAttempts != 1 {
				if try == 5 {
					t.Fatalf("in 5 tries the second automatic attempt always came before the manual one: %+v", got)
				}
				continue
			}
			if got.Status != webhookdelivery.StatusPENDING || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) || got.Attempts != 2 {
				t.Fatalf("a manual attempt moved the schedule: %+v", got)
			}
			break
		}
		eventually(t, 10*time.Second, "FAILED", func() bool { return f.deliveryOf(t, id).Status == webhookdelivery.StatusFAILED })
		if d := f.deliveryOf(t, id); d.Attempts != 5 || d.AutoAttempts != 4 {
			t.Fatalf("delivery %+v: want 4 automatic attempts and the manual one", d)
		}

		// A manual success ends the schedule at once.
		id2 := f.redeem(t)
		eventually(t, 5*time.Second, "first attempt", func() bool { return f.deliveryOf(t, id2).AutoAttempts == 1 })
		f.transport.setRespond(nil)
		got, err := f.svc.RetryDelivery(f.owner, f.biz.ID, f.deliveryOf(t, id2).ID)
		if err != nil || got.Status != webhookdelivery.StatusSUCCEEDED || got.NextAttemptAt != nil {
			t.Fatalf("%+v %v", got, err)
		}
		// Nothing is sent after it (the first attempt, maybe a second
		// automatic one on a slow machine, and the manual success).
		n0 := f.transport.count(id2)
		time.Sleep(2 * interval)
		if n := f.transport.count(id2); n != n0 || n < 2 {
			t.Fatalf("%d requests after a manual success, want the %d sent before it", n, n0)
		}
	})
}

func TestDispatcherSkipsEndpointsThatMayNotReceive(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{})
		e := f.endpoint(t, "https://hooks.example.com/a")
		disabledID := f.redeem(t)
		// Disabled before the dispatcher runs: the queued delivery ends
		// without an attempt, and can be retried once enabled again.
		if _, err := f.svc.UpdateEndpoint(f.owner, f.biz.ID, e.ID, webhook.UpdateEndpointInput{Enabled: ptr(false)}); err != nil {
			t.Fatal(err)
		}
		dl := f.deliveryOf(t, disabledID)
		if dl.Status != webhookdelivery.StatusFAILED || dl.NextAttemptAt != nil || dl.Attempts != 0 {
			t.Fatalf("delivery to a disabled endpoint %+v", dl)
		}
		_, err := f.svc.RetryDelivery(f.owner, f.biz.ID, dl.ID)
		wantCode(t, err, apperr.NotRetryable)
		if _, err := f.svc.UpdateEndpoint(f.owner, f.biz.ID, e.ID, webhook.UpdateEndpointInput{Enabled: ptr(true)}); err != nil {
			t.Fatal(err)
		}

		// The business goes INACTIVE with a delivery queued: no attempt.
		inactiveID := f.redeem(t)
		f.setBusinessStatus(t, entbusiness.StatusINACTIVE)
		_, err = f.svc.RetryDelivery(f.owner, f.biz.ID, f.deliveryOf(t, inactiveID).ID)
		wantCode(t, err, apperr.BusinessInactive)
		f.run(t)
		eventually(t, 5*time.Second, "cancelled", func() bool {
			return f.deliveryOf(t, inactiveID).Status == webhookdelivery.StatusFAILED
		})
		if f.transport.count(inactiveID) != 0 || f.transport.count(disabledID) != 0 || f.deliveryOf(t, inactiveID).Attempts != 0 {
			t.Fatal("an endpoint that may not receive was sent something")
		}

		// Back to ACTIVE, the delivery can be retried by hand.
		f.setBusinessStatus(t, entbusiness.StatusACTIVE)
		got, err := f.svc.RetryDelivery(f.owner, f.biz.ID, f.deliveryOf(t, disabledID).ID)
		if err != nil || got.Status != webhookdelivery.StatusSUCCEEDED {
			t.Fatalf("%+v %v", got, err)
		}

		// Deleted: queued deliveries end, retries are refused.
		f.transport.setRespond(func(webhook.Request, int) webhook.Result { return webhook.Result{Status: 500} })
		deletedID := f.redeem(t)
		eventually(t, 5*time.Second, "first attempt", func() bool { return f.deliveryOf(t, deletedID).Attempts == 1 })
		if _, err := f.svc.DeleteEndpoint(f.owner, f.biz.ID, e.ID); err != nil {
			t.Fatal(err)
		}
		dl = f.deliveryOf(t, deletedID)
		if dl.Status != webhookdelivery.StatusFAILED {
			t.Fatalf("delivery to a deleted endpoint %+v", dl)
		}
		_, err = f.svc.RetryDelivery(f.owner, f.biz.ID, dl.ID)
		wantCode(t, err, apperr.NotRetryable)
		// Its deliveries stay in the log.
		if _, err := f.svc.GetDelivery(f.member, f.biz.ID, dl.ID); err != nil {
			t.Fatal(err)
		}
		_ = ctx
	})
}

func TestDispatcherRevalidatesURL(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{})
		e := f.endpoint(t, "https://hooks.example.com/a")
		// Stored before a policy change (say, allow-private was on then).
		db.WebhookEndpoint.UpdateOneID(e.ID).SetURL("http://10.0.0.7/hook").ExecX(ctx)
		id := f.redeem(t)
		f.run(t)
		eventually(t, 5*time.Second, "attempt", func() bool { return f.deliveryOf(t, id).Attempts >= 1 })
		if f.transport.count(id) != 0 {
			t.Fatal("the transport was called for a refused URL")
		}
		a := f.attempts(t, f.deliveryOf(t, id).ID)[0]
		if a.Error == nil || a.ResponseStatus != nil {
			t.Fatalf("attempt %+v", a)
		}
		if got := *a.Error; got[:len("endpoint url refused")] != "endpoint url refused" {
			t.Fatalf("error %q", got)
		}
	})
}

func TestRotationSignsWithBothSecrets(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{})
		e := f.endpoint(t, "https://hooks.example.com/a")
		r, err := f.svc.RotateSecret(f.owner, f.biz.ID, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		f.run(t)
		id := f.redeem(t)
		eventually(t, 5*time.Second, "delivery", func() bool { return f.transport.count(id) == 1 })
		oldKey, _ := signing.ParseSecret(e.SigningSecret)
		newKey, _ := signing.ParseSecret(r.SigningSecret)
		req := f.transport.requests()[0]
		if len(req.Secrets) != 2 || string(req.Secrets[0]) != string(newKey) || string(req.Secrets[1]) != string(oldKey) {
			t.Fatal("during the grace the new secret signs first and the old one second")
		}
		// After the grace only the new one signs.
		db.WebhookEndpoint.Update().Where(webhookendpoint.ID(e.ID)).SetPreviousSecretExpiresAt(time.Now().Add(-time.Second)).ExecX(ctx)
		id2 := f.redeem(t)
		eventually(t, 5*time.Second, "delivery", func() bool { return f.transport.count(id2) == 1 })
		reqs := f.transport.requests()
		if last := reqs[len(reqs)-1]; len(last.Secrets) != 1 || string(last.Secrets[0]) != string(newKey) {
			t.Fatal("the expired secret still signs")
		}
	})
}

// A claim whose worker died is taken again once its lease runs out, and
// not before.
func TestExpiredLeaseIsReclaimed(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{})
		f.endpoint(t, "https://hooks.example.com/a")
		id := f.redeem(t)
		leasedUntil := time.Now().Add(700 * time.Millisecond).UTC()
		db.WebhookDelivery.Update().Where(webhookdelivery.EventID(id)).SetLeasedUntil(leasedUntil).ExecX(ctx)
		f.run(t)
		time.Sleep(400 * time.Millisecond)
		if f.transport.count(id) != 0 {
			t.Fatal("a leased delivery was taken before its lease ran out")
		}
		eventually(t, 5*time.Second, "delivery after the lease", func() bool { return f.transport.count(id) == 1 })
		eventually(t, 5*time.Second, "recorded", func() bool { return f.deliveryOf(t, id).Status == webhookdelivery.StatusSUCCEEDED })
	})
}

// Dispatchers sharing a database deliver every delivery exactly once.
func TestDispatchersShareWork(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		f := newFixture(t, db, fixtureOptions{})
		f.endpoint(t, "https://a.example.com/")
		f.endpoint(t, "https://b.example.com/")
		slow := func(webhook.Request, int) webhook.Result {
			time.Sleep(2 * time.Millisecond)
			return webhook.Result{Status: 200}
		}
		f.transport.setRespond(slow)
		const events = 60
		var ids []string
		for range events {
			ids = append(ids, f.redeem(t))
		}
		// Three dispatchers (replicas) over the same database.
		var wg sync.WaitGroup
		runCtx, cancel := context.WithCancel(ctx)
		for range 3 {
			d := webhook.NewDispatcher(db, webhook.DispatcherOptions{Transport: f.transport, Box: f.box, Log: quiet, Workers: 8, PollInterval: 5 * time.Millisecond})
			wg.Add(1)
			go func() { defer wg.Done(); d.Run(runCtx) }()
		}
		eventually(t, 20*time.Second, "all succeeded", func() bool {
			return db.WebhookDelivery.Query().Where(webhookdelivery.StatusEQ(webhookdelivery.StatusSUCCEEDED)).CountX(ctx) == 2*events
		})
		cancel()
		wg.Wait()
		for _, id := range ids {
			if n := f.transport.count(id); n != 2 {
				t.Fatalf("event %s sent %d times, want once per endpoint (2)", id, n)
			}
		}
		if n := db.DeliveryAttempt.Query().CountX(ctx); n != 2*events {
			t.Fatalf("%d attempts recorded, want %d", n, 2*events)
		}
	})
}

// Run returns only after the attempts in flight are recorded.
func TestShutdownFinishesInFlight(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		started := make(chan struct{}, 1)
		f.transport.setRespond(func(webhook.Request, int) webhook.Result {
			started <- struct{}{}
			time.Sleep(300 * time.Millisecond)
			return webhook.Result{Status: 200}
		})
		f.endpoint(t, "https://hooks.example.com/a")
		id := f.redeem(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { f.disp.Run(ctx); close(done) }()
		<-started
		cancel()
		<-done
		if d := f.deliveryOf(t, id); d.Status != webhookdelivery.StatusSUCCEEDED || d.Attempts != 1 {
			t.Fatalf("in-flight attempt not recorded before Run returned: %+v", d)
		}
	})
}

func TestDeliveryLog(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		a := f.endpoint(t, "https://a.example.com/")
		b := f.endpoint(t, "https://b.example.com/", settlement.EventConfirmed)
		f.transport.setRespond(func(r webhook.Request, _ int) webhook.Result {
			if r.URL == a.URL {
				return webhook.Result{Error: "connection refused"}
			}
			return webhook.Result{Status: 200}
		})
		redeemed := simple(f.biz.ID, entvoucher.StatusREDEEMED, "10", "")
		change(t, f, simple(f.biz.ID, entvoucher.StatusRESERVED, "10", ""), redeemed)
		change(t, f, redeemed, f.resolve(t, redeemed, receipt("10")))
		f.run(t)
		eventually(t, 5*time.Second, "b delivered", func() bool {
			return db.WebhookDelivery.Query().Where(webhookdelivery.EndpointID(b.ID), webhookdelivery.StatusEQ(webhookdelivery.StatusSUCCEEDED)).CountX(context.Background()) == 1
		})
		// The delivery log as REST reads it: newest first, a page of it.
		list := func(in webhook.DeliveryFilter, page ...int) []*ent.WebhookDelivery {
			t.Helper()
			q, err := f.svc.ListDeliveries(f.member, f.biz.ID, in)
			if err != nil {
				t.Fatal(err)
			}
			q = q.Order(webhook.NewestFirst...)
			if len(page) == 2 {
				q = q.Limit(page[0]).Offset(page[1])
			}
			return q.AllX(context.Background())
		}
		if n := len(list(webhook.DeliveryFilter{})); n != 4 {
			t.Fatalf("%d deliveries, want 4 (3 to a, 1 to b)", n)
		}
		if n := len(list(webhook.DeliveryFilter{EndpointID: &b.ID})); n != 1 {
			t.Fatalf("%d deliveries to b", n)
		}
		if rows := list(webhook.DeliveryFilter{Status: ptr("SUCCEEDED")}); len(rows) != 1 || rows[0].EndpointID != b.ID {
			t.Fatalf("succeeded %v", rows)
		}
		if n := len(list(webhook.DeliveryFilter{}, 2, 3)); n != 1 {
			t.Fatalf("page of %d", n)
		}
		_, err := f.svc.ListDeliveries(f.member, f.biz.ID, webhook.DeliveryFilter{Status: ptr("DONE")})
		wantCode(t, err, apperr.ValidationFailed)
		_, err = f.svc.ListDeliveries(f.outsider, f.biz.ID, webhook.DeliveryFilter{})
		wantCode(t, err, apperr.NotFound)

		toA := list(webhook.DeliveryFilter{EndpointID: &a.ID})[0]
		eventually(t, 5*time.Second, "an attempt to a", func() bool {
			d, _ := f.svc.GetDelivery(f.member, f.biz.ID, toA.ID)
			return d.Attempts >= 1
		})
		d, err := f.svc.GetDelivery(f.member, f.biz.ID, toA.ID)
		if err != nil {
			t.Fatal(err)
		}
		log, err := f.svc.Attempts(f.member, d)
		if err != nil || len(log) < 1 || log[0].Error == nil || *log[0].Error != "connection refused" || log[0].ResponseStatus != nil {
			t.Fatalf("log %+v %v", log, err)
		}
		v := view.OfDeliveryWithLog(d, log)
		if v.EventType == "" || v.LastAttemptAt == nil || v.LastResponseStatus != nil || len(v.AttemptLog) != len(log) {
			t.Fatalf("view %+v", v)
		}
		// Node loaders: members only.
		if _, err := f.svc.DeliveryByID(f.member, d.ID); err != nil {
			t.Fatal(err)
		}
		_, err = f.svc.DeliveryByID(f.outsider, d.ID)
		wantCode(t, err, apperr.NotFound)
		if _, err := f.svc.EventByID(f.member, d.EventID); err != nil {
			t.Fatal(err)
		}
		_, err = f.svc.EventByID(f.outsider, d.EventID)
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.GetDelivery(f.owner, f.biz.ID, "dlv_nope")
		wantCode(t, err, apperr.NotFound)
	})
}

// The dial-time guard through the whole dispatcher: a URL that passes
// validation (here because validation allows private targets) but whose
// host resolves to loopback is refused when dialled, and the attempt
// records a reason that names no address.
func TestDispatcherDialGuard(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		var hits atomic.Int32
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		defer rcv.Close()
		_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
		f := newFixture(t, db, fixtureOptions{allowPrivate: true, transport: sender.New(netguard.Options{})})
		f.endpoint(t, "http://localhost:"+port+"/hook")
		id := f.redeem(t)
		f.run(t)
		eventually(t, 5*time.Second, "an attempt", func() bool { return f.deliveryOf(t, id).Attempts >= 1 })
		a := f.attempts(t, f.deliveryOf(t, id).ID)[0]
		if a.Error == nil || *a.Error != sender.ReasonForbiddenAddress || a.ResponseStatus != nil {
			t.Fatalf("attempt %+v", a)
		}
		if hits.Load() != 0 {
			t.Fatal("the loopback receiver was reached")
		}
	})
}

// On PostgreSQL a commit on one replica wakes the others' dispatchers
// through NOTIFY (the committer's notifier signals after commit, as the
// app wires it), without waiting for their poll.
func TestDispatcherListensForOtherReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := testdb.OpenURL(t, storage.Postgres)
	f := newFixture(t, db, fixtureOptions{})
	n, err := pubsub.NewNotifier(ctx, url, pubsub.NotifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	n.PeerJoined(time.Now()) // the dispatcher's replica, as the app's listener would report it
	// No local wake-up: the committer is "another replica".
	f.outbox = webhook.NewOutbox(db, webhook.OutboxOptions{Wake: func() { n.Signal(webhook.NotifyChannel) }})
	f.disp = webhook.NewDispatcher(db, webhook.DispatcherOptions{Transport: f.transport, Box: f.box, Log: quiet,
		PollInterval: time.Hour, ListenURL: url})
	f.endpoint(t, "https://hooks.example.com/a")
	f.run(t)
	time.Sleep(300 * time.Millisecond) // the first claim and LISTEN
	start := time.Now()
	id := f.redeem(t)
	eventually(t, 5*time.Second, "delivery woken by NOTIFY", func() bool { return f.transport.count(id) == 1 })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("delivered %v after the commit", d)
	}
}

// On PostgreSQL the dispatcher claims on a session of its own whose commits
// do not wait for a WAL flush (a lease lost in a crash only means another
// attempt); deliveries flow as before and their attempts are recorded.
func TestDispatcherClaimsOnItsOwnSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := testdb.OpenURL(t, storage.Postgres)
	f := newFixture(t, db, fixtureOptions{})
	f.disp = webhook.NewDispatcher(db, webhook.DispatcherOptions{Transport: f.transport, Box: f.box, Log: quiet,
		PollInterval: 50 * time.Millisecond, ClaimURL: url})
	f.endpoint(t, "https://hooks.example.com/a")
	f.run(t)
	id := f.redeem(t)
	eventually(t, 5*time.Second, "delivery", func() bool { return f.transport.count(id) == 1 })
	eventually(t, 5*time.Second, "its attempt recorded", func() bool { return f.deliveryOf(t, id).Attempts == 1 })
	var sessions int
	if err := db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
		webhook.ClaimsApplicationName).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != 1 {
		t.Fatalf("claims sessions: %d, want 1", sessions)
	}
}
