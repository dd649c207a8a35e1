package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// BenchmarkDispatch measures deliveries per second through one dispatcher
// (16 workers) to a transport that answers at once: the cost of claiming
// and recording.
func BenchmarkDispatch(b *testing.B) {
	for _, dialect := range testdb.Dialects {
		b.Run(dialect, func(b *testing.B) {
			db := testdb.Open(b, dialect)
			t := &testing.T{}
			f := newFixture(t, db, fixtureOptions{})
			ctx := context.Background()
			if _, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, webhook.CreateEndpointInput{URL: "https://hooks.example.com/", Events: webhook.EventTypes}); err != nil {
				b.Fatal(err)
			}
			// Queue b.N deliveries in batches, as many redeems would.
			const batch = 200
			for i := 0; i < b.N; i += batch {
				err := db.Tx(ctx, func(tx *ent.Tx) error {
					for j := i; j < min(i+batch, b.N); j++ {
						v := simple(f.biz.ID, entvoucher.StatusRESERVED, "10", "")
						v.ID = fmt.Sprintf("vch_b%d", j)
						next := with(v, func(c *ent.Voucher) { c.Status = entvoucher.StatusREDEEMED })
						if err := f.outbox.VoucherChanged(ctx, tx, v, next); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			d := webhook.NewDispatcher(db, webhook.DispatcherOptions{Transport: f.transport, Box: f.box, Log: quiet, Workers: 16})
			b.ResetTimer()
			start := time.Now()
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { d.Run(runCtx); close(done) }()
			for len(f.transport.requests()) < b.N {
				time.Sleep(time.Millisecond)
			}
			// Then until every attempt is recorded.
			for db.WebhookDelivery.Query().Where(webhookdelivery.StatusEQ(webhookdelivery.StatusSUCCEEDED)).CountX(ctx) < b.N {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cancel()
			<-done
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}
