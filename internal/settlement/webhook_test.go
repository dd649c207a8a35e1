package settlement_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// A business's receiver gets the settlement's deposit events, signed
// (checked with the Standard Webhooks library), each once: the outbox
// rows the settlement wrote go out through the real dispatcher.
func TestSignedDepositEventsFromTheChain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		e := newEnv(t, db, newFakeChain())
		box, err := secretbox.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string // event types whose signature verified
		var bad []string
		var wh *standardwebhooks.Webhook
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			if err := wh.Verify(body, r.Header); err != nil {
				bad = append(bad, err.Error())
			} else {
				var p webhook.Payload
				_ = jsonUnmarshal(body, &p)
				got = append(got, p.Type+" "+p.Data.PaidAmount)
			}
		}))
		defer rcv.Close()

		disp := webhook.NewDispatcher(db, webhook.DispatcherOptions{
			Transport: sender.New(netguard.Options{AllowPrivate: true}), Box: box, AllowPrivate: true,
			RetryInterval: time.Second, Workers: 2, PollInterval: 50 * time.Millisecond,
		})
		hooks := webhook.NewService(db, webhook.Options{Box: box, AllowPrivate: true, Dispatcher: disp})
		ep, err := hooks.CreateEndpoint(as(e.member), e.biz.ID, webhook.CreateEndpointInput{
			URL: rcv.URL + "/hooks", Events: []string{webhook.DepositCreated, settlement.EventPending, settlement.EventConfirmed, settlement.EventFailed},
		})
		if err != nil {
			t.Fatal(err)
		}
		if wh, err = standardwebhooks.NewWebhook(ep.SigningSecret); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); disp.Run(ctx) }()
		defer func() { cancel(); <-done }()

		d := e.redeemed(tokenBody("ethereum", "USDC", usdcChecked, "7.25"))
		h := newHash()
		e.mustResolve(d, h)
		e.chain.mine(tokenTx(h, credit(usdc, payee, units("7.25", 6))))
		for i := 0; i < required; i++ {
			e.poll()
			e.chain.advance(1)
		}
		e.want(d, payment.SettlementConfirmed, "7.25", settlement.EventPending, settlement.EventConfirmed)

		want := []string{"deposit.confirmed 7.25", "deposit.created ", "deposit.pending 7.25"}
		deadline := time.Now().Add(15 * time.Second)
		for {
			mu.Lock()
			g := slices.Clone(got)
			b := slices.Clone(bad)
			mu.Unlock()
			slices.Sort(g)
			if len(b) > 0 {
				t.Fatalf("signatures that do not verify: %v", b)
			}
			if slices.Equal(g, want) {
				break
			}
			if len(g) > len(want) || time.Now().After(deadline) {
				t.Fatalf("receiver got %v, want %v", g, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
