package main_test

// Webhook end-to-end tests: the real voucherd binary (testsupport/testserver) against
// a local receiver, on SQLite and PostgreSQL, used the way a business
// would: over REST and GraphQL.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testnats"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const (
	usdcPolygon  = "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"
	payeeAddress = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
)

// delivery is one request the receiver got.
type delivery struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
	event  webhook.Payload
}

// receiver is a local webhook endpoint. respond decides each answer (200
// when nil); it may block.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []delivery
	respond func(d delivery, nth int) int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		d := delivery{at: time.Now(), path: req.URL.Path, header: req.Header.Clone(), body: b}
		_ = json.Unmarshal(b, &d.event)
		r.mu.Lock()
		r.got = append(r.got, d)
		nth := 0
		for _, g := range r.got {
			if g.header.Get("webhook-id") == d.header.Get("webhook-id") {
				nth++
			}
		}
		respond := r.respond
		r.mu.Unlock()
		status := http.StatusOK
		if respond != nil {
			status = respond(d, nth)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setRespond(fn func(d delivery, nth int) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.respond = fn
}

func (r *receiver) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// forVoucher returns the requests about one voucher.
func (r *receiver) forVoucher(id string) []delivery {
	var out []delivery
	for _, d := range r.all() {
		if d.event.Data.VoucherID == id {
			out = append(out, d)
		}
	}
	return out
}

func (r *receiver) byID(webhookID string) []delivery {
	var out []delivery
	for _, d := range r.all() {
		if d.header.Get("webhook-id") == webhookID {
			out = append(out, d)
		}
	}
	return out
}

// world is a running server with a business (owned by owner), an endpoint
// at rcv, and a payer with an open voucher session.
type world struct {
	srv      *testserver.Server
	owner    testserver.Identity
	payer    testserver.Identity
	code     string
	biz      string
	endpoint map[string]any
	rcv      *receiver
}

func startWorld(t *testing.T, dialect string, env map[string]string, events ...string) *world {
	t.Helper()
	base := map[string]string{"VOUCHER_WEBHOOK_RETRY_INTERVAL": "200ms"}
	for k, v := range env {
		base[k] = v
	}
	w := &world{srv: testserver.Start(t, testserver.Options{Dialect: dialect, Env: base}), rcv: newReceiver(t)}
	w.setup(t, events...)
	return w
}

func (w *world) setup(t *testing.T, events ...string) {
	t.Helper()
	w.owner = w.srv.User(t)
	r := w.srv.Do(t, "POST", "/api/v1/businesses/create-business", w.owner.Token, map[string]any{"name": "Shop"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	w.biz = r.Map(t)["id"].(string)
	if len(events) == 0 {
		events = webhook.EventTypes
	}
	w.endpoint = w.createEndpoint(t, w.rcv.srv.URL+"/hooks", events...)
	w.payer = w.srv.Device(t)
	_, w.code = w.srv.Session(t, w.payer)
}

func (w *world) createEndpoint(t *testing.T, url string, events ...string) map[string]any {
	t.Helper()
	r := w.srv.Do(t, "POST", "/api/v1/businesses/"+w.biz+"/webhook-endpoints/create-endpoint", w.owner.Token,
		map[string]any{"url": url, "events": events, "description": "test receiver"})
	if r.Status != 200 {
		t.Fatalf("create-endpoint: %d %s", r.Status, r.Body)
	}
	return r.Map(t)
}

func (w *world) secret() string { return w.endpoint["signingSecret"].(string) }

// deposit reserves a business voucher and redeems it for amount USDC on
// polygon; it returns the voucher id and its payment id.
func (w *world) deposit(t *testing.T, amount string) (string, string) {
	t.Helper()
	id := w.srv.Reserve(t, w.owner.Token, map[string]any{"code": w.code, "businessId": w.biz})
	r := w.srv.Do(t, "POST", "/api/v1/vouchers/"+id+"/redeem-voucher", w.owner.Token, map[string]any{"expectedPayment": map[string]any{
		"network": "polygon", "currency": "USDC", "currencyAddress": usdcPolygon, "amount": amount,
		"wallet": map[string]any{"address": payeeAddress},
	}})
	if r.Status != 200 {
		t.Fatalf("redeem-voucher: %d %s", r.Status, r.Body)
	}
	var v struct {
		ExpectedPayment struct{ ID string } `json:"expectedPayment"`
	}
	r.JSON(t, &v)
	return id, v.ExpectedPayment.ID
}

func (w *world) resolve(t *testing.T, id, paymentID, paid string) {
	t.Helper()
	r := w.srv.Do(t, "POST", "/api/v1/vouchers/"+id+"/resolve-voucher", w.payer.Token, map[string]any{
		"receipts": []map[string]any{{"paymentId": paymentID, "transactionHash": "0xfeed", "amount": paid}},
	})
	if r.Status != 200 {
		t.Fatalf("resolve-voucher: %d %s", r.Status, r.Body)
	}
}

// waitTypes waits until the receiver has, for the voucher, exactly the
// event types wanted (in any order), each once.
func (w *world) waitTypes(t *testing.T, voucherID string, want ...string) []delivery {
	t.Helper()
	var got []delivery
	testserver.Eventually(t, 15*time.Second, "events "+strings.Join(want, ","), func() bool {
		got = w.rcv.forVoucher(voucherID)
		return len(got) >= len(want)
	})
	time.Sleep(100 * time.Millisecond) // nothing extra arrives
	got = w.rcv.forVoucher(voucherID)
	seen := map[string]int{}
	for _, d := range got {
		seen[d.event.Type]++
	}
	for _, ty := range want {
		if seen[ty] != 1 {
			t.Fatalf("voucher %s: got types %v, want each of %v once", voucherID, seen, want)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("voucher %s: %d deliveries, want %d (%v)", voucherID, len(got), len(want), seen)
	}
	return got
}

// verify checks a delivery with the Standard Webhooks reference library.
func verify(t *testing.T, secret string, d delivery) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(d.body, d.header); err != nil {
		t.Fatalf("%s does not verify: %v", d.event.Type, err)
	}
}

func TestE2EDepositLifecycle(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			w := startWorld(t, dialect, map[string]string{"VOUCHER_VOUCHER_TTL": "15s", "VOUCHER_SWEEP_INTERVAL": "200ms"})

			// Walked through its life: created, pending, confirmed.
			id, pmt := w.deposit(t, "12.5")
			w.waitTypes(t, id, webhook.DepositCreated)
			w.resolve(t, id, pmt, "12.5")
			got := w.waitTypes(t, id, webhook.DepositCreated, settlement.EventPending, settlement.EventConfirmed)
			r := w.srv.Do(t, "GET", "/api/v1/vouchers/"+id, w.owner.Token, nil)
			var view map[string]any
			r.JSON(t, &view)
			for _, d := range got {
				verify(t, w.secret(), d)
				if d.header.Get("webhook-id") != d.event.ID || !strings.HasPrefix(d.event.ID, "evt_") {
					t.Fatalf("webhook-id %q for event %q", d.header.Get("webhook-id"), d.event.ID)
				}
				data := d.event.Data
				if data.BusinessID != w.biz || data.Network != "polygon" || data.Currency != "USDC" || data.ExpectedAmount != "12.5" {
					t.Fatalf("%s data %+v", d.event.Type, data)
				}
				vv, _ := data.Voucher.(map[string]any)
				if vv["id"] != id || int(vv["version"].(float64)) != data.VoucherVersion {
					t.Fatalf("voucher in payload %v (version %d)", vv, data.VoucherVersion)
				}
				if d.event.Type == webhook.DepositCreated {
					if vv["status"] != "REDEEMED" || data.PaidAmount != "" {
						t.Fatalf("created: %v paid %q", vv["status"], data.PaidAmount)
					}
				} else {
					if vv["status"] != "RESOLVED" || data.PaidAmount != "12.5" || data.VoucherVersion != int(view["version"].(float64)) {
						t.Fatalf("%s: %v paid %q version %d (voucher %v)", d.event.Type, vv["status"], data.PaidAmount, data.VoucherVersion, view["version"])
					}
				}
			}

			// Underpaid and overpaid.
			id, pmt = w.deposit(t, "10")
			w.resolve(t, id, pmt, "9.99")
			w.waitTypes(t, id, webhook.DepositCreated, settlement.EventPending, settlement.EventUnderpaid)
			id, pmt = w.deposit(t, "10")
			w.resolve(t, id, pmt, "10.000001")
			over := w.waitTypes(t, id, webhook.DepositCreated, settlement.EventPending, settlement.EventOverpaid)
			for _, d := range over {
				if d.event.Type == settlement.EventOverpaid && d.event.Data.PaidAmount != "10.000001" {
					t.Fatalf("overpaid paidAmount %q", d.event.Data.PaidAmount)
				}
			}

			// Discarded after redeem: failed.
			id, _ = w.deposit(t, "5")
			r = w.srv.Do(t, "POST", "/api/v1/vouchers/"+id+"/discard-voucher", w.owner.Token, map[string]any{})
			if r.Status != 200 {
				t.Fatalf("discard-voucher: %d %s", r.Status, r.Body)
			}
			w.waitTypes(t, id, webhook.DepositCreated, settlement.EventFailed)

			// Expired unpaid: the sweeper records it and the event follows.
			id, _ = w.deposit(t, "5")
			testserver.Eventually(t, 45*time.Second, "deposit.expired", func() bool {
				for _, d := range w.rcv.forVoucher(id) {
					if d.event.Type == webhook.DepositExpired {
						return true
					}
				}
				return false
			})
			w.waitTypes(t, id, webhook.DepositCreated, webhook.DepositExpired)

			for _, d := range w.rcv.all() {
				verify(t, w.secret(), d)
			}
			// The secret reached nobody but the creator.
			if logs := w.srv.Logs(); strings.Contains(logs, w.secret()) || strings.Contains(logs, strings.TrimPrefix(w.secret(), "whsec_")) {
				t.Fatal("the signing secret is in the logs")
			}
		})
	}
}

func TestE2ERetriesAndManualRetry(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			w := startWorld(t, dialect, nil, webhook.DepositCreated)
			var mu sync.Mutex
			status := http.StatusInternalServerError
			w.rcv.setRespond(func(delivery, int) int { mu.Lock(); defer mu.Unlock(); return status })
			id, _ := w.deposit(t, "1")
			deliveries := "/api/v1/businesses/" + w.biz + "/webhook-deliveries"

			var list []map[string]any
			testserver.Eventually(t, 15*time.Second, "FAILED", func() bool {
				r := w.srv.Do(t, "GET", deliveries+"?status=FAILED", w.owner.Token, nil)
				r.JSON(t, &list)
				return len(list) == 1
			})
			time.Sleep(600 * time.Millisecond) // three more intervals: nothing more comes
			got := w.rcv.forVoucher(id)
			if len(got) != 1+3 {
				t.Fatalf("a failing receiver got %d attempts, want 1 + 3 retries", len(got))
			}
			for i, d := range got {
				verify(t, w.secret(), d)
				if d.header.Get("webhook-id") != got[0].header.Get("webhook-id") {
					t.Fatal("webhook-id changed across retries")
				}
				if i > 0 && d.at.Sub(got[i-1].at) < 150*time.Millisecond {
					t.Fatalf("retry %d came %v after the previous attempt", i, d.at.Sub(got[i-1].at))
				}
			}
			dl := list[0]
			if dl["eventType"] != webhook.DepositCreated || int(dl["attempts"].(float64)) != 4 || int(dl["lastResponseStatus"].(float64)) != 500 {
				t.Fatalf("delivery %v", dl)
			}
			if _, ok := dl["nextAttemptAt"]; ok {
				t.Fatal("a FAILED delivery shows a next attempt")
			}
			dlID := dl["id"].(string)
			r := w.srv.Do(t, "GET", deliveries+"/"+dlID, w.owner.Token, nil)
			var one struct {
				Status     string           `json:"status"`
				AttemptLog []map[string]any `json:"attemptLog"`
			}
			r.JSON(t, &one)
			if one.Status != "FAILED" || len(one.AttemptLog) != 4 {
				t.Fatalf("get delivery: %s", r.Body)
			}
			// The same log through GraphQL: the connection and node(id:).
			g := w.srv.GraphQL(t, w.owner.Token, `query($b: ID!, $id: ID!) {
				webhookDeliveries(businessId: $b, status: FAILED) { totalCount edges { node { id attempts eventType } } }
				node(id: $id) { ... on WebhookDelivery { status attemptLog { manual responseStatus } } } }`,
				map[string]any{"b": w.biz, "id": dlID})
			if len(g.Errors) > 0 || !strings.Contains(string(g.Data), `"totalCount":1`) || !strings.Contains(string(g.Data), `"attempts":4`) ||
				strings.Count(string(g.Data), `"responseStatus":500`) != 4 {
				t.Fatalf("GraphQL delivery log: %s %+v", g.Data, g.Errors)
			}

			// Manual retry: at once, recorded, still FAILED while the receiver fails.
			retry := deliveries + "/" + dlID + "/retry-delivery"
			r = w.srv.Do(t, "POST", retry, w.owner.Token, map[string]any{})
			if r.Status != 200 || len(r.Body) != 0 {
				t.Fatalf("retry-delivery: %d %q", r.Status, r.Body)
			}
			if n := len(w.rcv.forVoucher(id)); n != 5 {
				t.Fatalf("%d attempts after a manual retry", n)
			}
			mu.Lock()
			status = http.StatusNoContent
			mu.Unlock()
			// The GraphQL twin answers with the delivery.
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $id: ID!) { retryDelivery(businessId: $b, id: $id) { id status attempts lastResponseStatus attemptLog { manual responseStatus } } }`,
				map[string]any{"b": w.biz, "id": dlID})
			if len(g.Errors) > 0 {
				t.Fatalf("retryDelivery: %+v", g.Errors)
			}
			var out struct {
				RetryDelivery struct {
					Status     string
					Attempts   int
					AttemptLog []struct {
						Manual         bool
						ResponseStatus *int
					}
				}
			}
			if err := json.Unmarshal(g.Data, &out); err != nil {
				t.Fatal(err)
			}
			rd := out.RetryDelivery
			if rd.Status != "SUCCEEDED" || rd.Attempts != 6 || len(rd.AttemptLog) != 6 || !rd.AttemptLog[5].Manual || *rd.AttemptLog[5].ResponseStatus != 204 {
				t.Fatalf("after a good manual retry: %+v", rd)
			}
			r = w.srv.Do(t, "POST", retry, w.owner.Token, map[string]any{})
			if r.Status != 400 || r.Code() != "not_retryable" {
				t.Fatalf("retry of a SUCCEEDED delivery: %d %s", r.Status, r.Body)
			}
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $id: ID!) { retryDelivery(businessId: $b, id: $id) { id } }`, map[string]any{"b": w.biz, "id": dlID})
			if g.ErrorCode() != "not_retryable" {
				t.Fatalf("GraphQL retry of a SUCCEEDED delivery: %+v", g.Errors)
			}
		})
	}
}

func TestE2ERotationOverlap(t *testing.T) {
	t.Parallel()
	w := startWorld(t, storage.SQLite, nil, webhook.DepositCreated)
	old := w.secret()
	whe := w.endpoint["id"].(string)
	r := w.srv.Do(t, "POST", "/api/v1/businesses/"+w.biz+"/webhook-endpoints/"+whe+"/rotate-secret", w.owner.Token, map[string]any{})
	if r.Status != 200 {
		t.Fatalf("rotate-secret: %d %s", r.Status, r.Body)
	}
	rotated := r.Map(t)
	fresh, _ := rotated["signingSecret"].(string)
	if !strings.HasPrefix(fresh, "whsec_") || fresh == old || rotated["id"] != whe {
		t.Fatalf("rotate-secret answered %s", r.Body)
	}
	id, _ := w.deposit(t, "1")
	d := w.waitTypes(t, id, webhook.DepositCreated)[0]
	if sigs := strings.Fields(d.header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("during the grace want two signatures, got %q", d.header.Get("webhook-signature"))
	}
	verify(t, old, d)   // a receiver not yet switched
	verify(t, fresh, d) // a receiver already switched
	// Neither secret shows anywhere else.
	for _, path := range []string{"/webhook-endpoints", "/webhook-endpoints/" + whe} {
		r := w.srv.Do(t, "GET", "/api/v1/businesses/"+w.biz+path, w.owner.Token, nil)
		if strings.Contains(string(r.Body), "whsec_") || strings.Contains(string(r.Body), "signingSecret") {
			t.Fatalf("%s shows a secret: %s", path, r.Body)
		}
	}
	if logs := w.srv.Logs(); strings.Contains(logs, fresh) || strings.Contains(logs, old) {
		t.Fatal("a signing secret is in the logs")
	}
}

// A crash loses nothing: one delivery is killed mid-attempt and another
// before its first attempt; after a restart both arrive with their
// webhook-ids.
func TestE2ECrashRecovery(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			// One worker: while it is stuck on the first delivery, the second
			// is committed and queued but not attempted.
			env := map[string]string{"VOUCHER_WEBHOOK_WORKERS": "1"}
			w := startWorld(t, dialect, env, webhook.DepositCreated)
			release := make(chan struct{})
			var once sync.Once
			w.rcv.setRespond(func(d delivery, nth int) int {
				if nth == 1 && len(w.rcv.all()) == 1 {
					<-release // the first request ever hangs until the test ends
				}
				return http.StatusOK
			})
			t.Cleanup(func() { once.Do(func() { close(release) }) })

			inFlight, _ := w.deposit(t, "1")
			testserver.Eventually(t, 10*time.Second, "the first attempt", func() bool { return len(w.rcv.all()) == 1 })
			inFlightID := w.rcv.all()[0].header.Get("webhook-id")
			queued, _ := w.deposit(t, "2")
			// Committed: its delivery is in the log, not yet attempted.
			var list []map[string]any
			r := w.srv.Do(t, "GET", "/api/v1/businesses/"+w.biz+"/webhook-deliveries?status=PENDING", w.owner.Token, nil)
			r.JSON(t, &list)
			if len(list) != 2 {
				t.Fatalf("pending deliveries %s", r.Body)
			}
			var queuedID string
			for _, d := range list {
				if d["eventId"] != inFlightID {
					queuedID = d["eventId"].(string)
					if int(d["attempts"].(float64)) != 0 {
						t.Fatalf("the queued delivery was attempted: %v", d)
					}
				}
			}

			w.srv.Kill() // SIGKILL: no graceful anything
			restarted := time.Now()
			w.srv = testserver.Start(t, testserver.Options{Dialect: dialect, DatabaseURL: w.srv.DatabaseURL,
				Env: map[string]string{"VOUCHER_WEBHOOK_RETRY_INTERVAL": "200ms", "VOUCHER_WEBHOOK_WORKERS": "1"}})

			testserver.Eventually(t, 10*time.Second, "the queued event after the restart", func() bool { return len(w.rcv.byID(queuedID)) == 1 })
			// The interrupted one comes again once its lease runs out.
			testserver.Eventually(t, webhook.DefaultLease+15*time.Second, "the interrupted event after its lease", func() bool {
				return len(w.rcv.byID(inFlightID)) == 2
			})
			if since := time.Since(restarted); since > webhook.DefaultLease+10*time.Second {
				t.Fatalf("redelivered %v after the restart", since)
			}
			for _, id := range []string{queuedID, inFlightID} {
				ds := w.rcv.byID(id)
				last := ds[len(ds)-1]
				verify(t, w.secret(), last)
				if last.event.ID != id {
					t.Fatalf("event id %s under webhook-id %s", last.event.ID, id)
				}
			}
			if w.rcv.byID(inFlightID)[1].event.Data.VoucherID != inFlight || w.rcv.byID(queuedID)[0].event.Data.VoucherID != queued {
				t.Fatal("payloads mixed up")
			}
			testserver.Eventually(t, 10*time.Second, "both recorded SUCCEEDED", func() bool {
				r := w.srv.Do(t, "GET", "/api/v1/businesses/"+w.biz+"/webhook-deliveries?status=SUCCEEDED", w.owner.Token, nil)
				r.JSON(t, &list)
				return len(list) == 2
			})
			once.Do(func() { close(release) })
		})
	}
}

// Two replicas on one PostgreSQL deliver each event to each endpoint once,
// their wake-ups carried by LISTEN/NOTIFY or by NATS.
func TestE2ETwoReplicas(t *testing.T) {
	t.Parallel()
	for _, transport := range testnats.Transports {
		t.Run(transport, func(t *testing.T) {
			env := testnats.Env(t, transport)
			a := startWorld(t, storage.Postgres, env, webhook.DepositCreated)
			a.createEndpoint(t, a.rcv.srv.URL+"/second", webhook.DepositCreated)
			env["VOUCHER_WEBHOOK_RETRY_INTERVAL"] = "200ms"
			b := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, DatabaseURL: a.srv.DatabaseURL, Env: env})
			const n = 24
			for i := range n {
				w := *a
				if i%2 == 1 {
					w.srv = b // commit on either replica
				}
				w.deposit(t, "1")
			}
			testserver.Eventually(t, 20*time.Second, "every event at both endpoints", func() bool { return len(a.rcv.all()) >= 2*n })
			time.Sleep(500 * time.Millisecond)
			// Count receipts by webhook-id and endpoint (path).
			perID := map[string]map[string]int{}
			for _, d := range a.rcv.all() {
				id := d.header.Get("webhook-id")
				if perID[id] == nil {
					perID[id] = map[string]int{}
				}
				perID[id][d.path]++
			}
			if len(perID) != n {
				t.Fatalf("%d distinct webhook-ids, want %d", len(perID), n)
			}
			for id, byPath := range perID {
				if len(byPath) != 2 || byPath["/hooks"] != 1 || byPath["/second"] != 1 {
					t.Fatalf("event %s delivered %v, want once to each endpoint", id, byPath)
				}
			}
		})
	}
}

func TestE2EEndpointAPI(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			w := startWorld(t, dialect, nil)
			base := "/api/v1/businesses/" + w.biz + "/webhook-endpoints"
			whe := w.endpoint["id"].(string)
			if w.endpoint["enabled"] != true || w.endpoint["description"] != "test receiver" || w.endpoint["createdAt"] == nil {
				t.Fatalf("create answered %v", w.endpoint)
			}

			// REST and GraphQL see the same endpoint.
			r := w.srv.Do(t, "GET", base, w.owner.Token, nil)
			var list []map[string]any
			r.JSON(t, &list)
			if r.Status != 200 || len(list) != 1 || list[0]["id"] != whe {
				t.Fatalf("list: %d %s", r.Status, r.Body)
			}
			keys := make([]string, 0, len(list[0]))
			for k := range list[0] {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if strings.Join(keys, ",") != "createdAt,description,enabled,events,id,url" {
				t.Fatalf("list fields %v", keys)
			}
			g := w.srv.GraphQL(t, w.owner.Token, `query($id: ID!) { business(id: $id) { webhookEndpoints { totalCount edges { node { id url events enabled } } } } }`, map[string]any{"id": w.biz})
			if len(g.Errors) > 0 || !strings.Contains(string(g.Data), whe) || !strings.Contains(string(g.Data), `"totalCount":1`) {
				t.Fatalf("Business.webhookEndpoints: %s %+v\n%s", g.Data, g.Errors, w.srv.Logs())
			}
			g = w.srv.GraphQL(t, w.owner.Token, `query($id: ID!) { node(id: $id) { ... on WebhookEndpoint { id url } } }`, map[string]any{"id": whe})
			if !strings.Contains(string(g.Data), whe) {
				t.Fatalf("node: %s %+v", g.Data, g.Errors)
			}

			// GraphQL create, with the same rules and codes as REST.
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $in: CreateEndpointInput!) { createEndpoint(businessId: $b, input: $in) { id url events enabled signingSecret } }`,
				map[string]any{"b": w.biz, "in": map[string]any{"url": w.rcv.srv.URL + "/g", "events": []string{"deposit.failed"}}})
			var created struct {
				CreateEndpoint struct{ ID, SigningSecret string }
			}
			if len(g.Errors) > 0 || json.Unmarshal(g.Data, &created) != nil || !strings.HasPrefix(created.CreateEndpoint.SigningSecret, "whsec_") {
				t.Fatalf("createEndpoint: %s %+v", g.Data, g.Errors)
			}
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $in: CreateEndpointInput!) { createEndpoint(businessId: $b, input: $in) { id } }`,
				map[string]any{"b": w.biz, "in": map[string]any{"url": "ftp://x", "events": []string{}}})
			r = w.srv.Do(t, "POST", base+"/create-endpoint", w.owner.Token, map[string]any{"url": "ftp://x", "events": []string{}})
			if g.ErrorCode() != "validation_failed" || r.Status != 400 || r.Code() != "validation_failed" {
				t.Fatalf("bad create: graphql %q, rest %d %s", g.ErrorCode(), r.Status, r.Body)
			}
			r = w.srv.Do(t, "POST", base+"/create-endpoint", w.owner.Token, `{"url":"https://a.example.com","events":["deposit.created"],"extra":1}`)
			if r.Status != 400 || r.Code() != "validation_failed" {
				t.Fatalf("unknown field: %d %s", r.Status, r.Body)
			}

			// Update, over both doors.
			r = w.srv.Do(t, "POST", base+"/"+whe+"/update-endpoint", w.owner.Token, map[string]any{"description": "renamed", "events": []string{"deposit.created"}})
			if r.Status != 200 || r.Map(t)["description"] != "renamed" {
				t.Fatalf("update-endpoint: %d %s", r.Status, r.Body)
			}
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $id: ID!) { updateEndpoint(businessId: $b, id: $id, input: {enabled: false}) { id enabled description } }`,
				map[string]any{"b": w.biz, "id": whe})
			if len(g.Errors) > 0 || !strings.Contains(string(g.Data), `"enabled":false`) || !strings.Contains(string(g.Data), "renamed") {
				t.Fatalf("updateEndpoint: %s %+v", g.Data, g.Errors)
			}

			// Who may: a MEMBER reads, cannot write; a stranger learns nothing;
			// a device token is refused.
			member := w.srv.User(t)
			r = w.srv.Do(t, "POST", "/api/v1/businesses/"+w.biz+"/users/add-user", w.owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"})
			if r.Status != 200 {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "GET", base+"/"+whe, member.Token, nil); r.Status != 200 || strings.Contains(string(r.Body), "whsec_") {
				t.Fatalf("member get: %d %s", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "POST", base+"/"+whe+"/rotate-secret", member.Token, map[string]any{}); r.Status != 403 || r.Code() != "forbidden" {
				t.Fatalf("member rotate: %d %s", r.Status, r.Body)
			}
			stranger := w.srv.User(t)
			if r := w.srv.Do(t, "GET", base+"/"+whe, stranger.Token, nil); r.Status != 404 || r.Code() != "not_found" {
				t.Fatalf("stranger get: %d %s", r.Status, r.Body)
			}
			g = w.srv.GraphQL(t, stranger.Token, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": whe})
			if strings.Contains(string(g.Data), whe) {
				t.Fatal("a stranger resolved the endpoint by node(id:)")
			}
			if r := w.srv.Do(t, "GET", base, w.payer.Token, nil); r.Status != 403 || r.Code() != "forbidden" {
				t.Fatalf("device token: %d %s", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "GET", base, "", nil); r.Status != 401 {
				t.Fatalf("no token: %d", r.Status)
			}
			if r := w.srv.Do(t, "GET", base+"?limit=0", w.owner.Token, nil); r.Status != 400 || r.Code() != "validation_failed" {
				t.Fatalf("limit=0: %d %s", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "GET", base+"?since=yesterday", w.owner.Token, nil); r.Status != 400 || r.Code() != "validation_failed" {
				t.Fatalf("since=yesterday: %d %s", r.Status, r.Body)
			}

			// Delete: gone from every read; its place is free again.
			r = w.srv.Do(t, "POST", base+"/"+whe+"/delete-endpoint", w.owner.Token, map[string]any{})
			if r.Status != 200 || len(r.Body) != 0 {
				t.Fatalf("delete-endpoint: %d %q", r.Status, r.Body)
			}
			if r := w.srv.Do(t, "GET", base+"/"+whe, w.owner.Token, nil); r.Status != 404 {
				t.Fatalf("get after delete: %d", r.Status)
			}
			g = w.srv.GraphQL(t, w.owner.Token, `mutation($b: ID!, $id: ID!) { deleteEndpoint(businessId: $b, id: $id) }`, map[string]any{"b": w.biz, "id": created.CreateEndpoint.ID})
			if len(g.Errors) > 0 || !strings.Contains(string(g.Data), created.CreateEndpoint.ID) {
				t.Fatalf("deleteEndpoint: %s %+v", g.Data, g.Errors)
			}
			r = w.srv.Do(t, "GET", base, w.owner.Token, nil)
			if string(r.Body) != "[]" {
				t.Fatalf("list after deletes: %s", r.Body)
			}
			g = w.srv.GraphQL(t, w.owner.Token, `query($id: ID!) { business(id: $id) { webhookEndpoints { totalCount } } }`, map[string]any{"id": w.biz})
			if !strings.Contains(string(g.Data), `"totalCount":0`) {
				t.Fatalf("edge after deletes: %s", g.Data)
			}
			// The limit.
			for i := range webhook.MaxEndpointsPerBusiness {
				w.createEndpoint(t, w.rcv.srv.URL+"/n"+string(rune('a'+i)), "deposit.created")
			}
			r = w.srv.Do(t, "POST", base+"/create-endpoint", w.owner.Token, map[string]any{"url": w.rcv.srv.URL, "events": []string{"deposit.created"}})
			if r.Status != 400 || r.Code() != "limit_exceeded" {
				t.Fatalf("17th endpoint: %d %s", r.Status, r.Body)
			}
			if strings.Contains(w.srv.Logs(), "whsec_") {
				t.Fatal("a signing secret is in the logs")
			}
		})
	}
}

// With allow-private off (production's setting), private targets are
// refused when stored.
func TestE2ESSRFRefusals(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite, Env: map[string]string{"VOUCHER_WEBHOOK_ALLOW_PRIVATE": "false"}})
	owner := srv.User(t)
	r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Shop"})
	biz := r.Map(t)["id"].(string)
	for _, u := range []string{
		"http://hooks.example.com/x", "https://127.0.0.1/x", "https://10.0.0.8/x", "https://192.168.1.1/",
		"https://169.254.169.254/latest/meta-data", "https://100.64.0.1/", "https://[::1]/", "https://[::ffff:10.0.0.1]/",
		"https://localhost/", "https://metadata.google.internal/", "https://intranet/",
	} {
		r := srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", owner.Token, map[string]any{"url": u, "events": []string{"deposit.created"}})
		if r.Status != 400 || r.Code() != "validation_failed" {
			t.Fatalf("%s: %d %s", u, r.Status, r.Body)
		}
	}
	r = srv.Do(t, "POST", "/api/v1/businesses/"+biz+"/webhook-endpoints/create-endpoint", owner.Token, map[string]any{"url": "https://hooks.example.com/x", "events": []string{"deposit.created"}})
	if r.Status != 200 {
		t.Fatalf("public URL: %d %s", r.Status, r.Body)
	}
}
