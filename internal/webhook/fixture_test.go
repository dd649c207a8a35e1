package webhook_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func ptr[T any](v T) *T { return &v }

// quiet drops the services' logs in tests.
var quiet = slog.New(slog.DiscardHandler)

var seq atomic.Int64

// fixture is one ACTIVE business with an OWNER, an ADMIN and a MEMBER, a
// user who belongs to no business, and the webhook service over a fake
// transport.
type fixture struct {
	db        *storage.DB
	box       secretbox.Key
	svc       *webhook.Service
	outbox    *webhook.Outbox
	disp      *webhook.Dispatcher
	transport *fakeTransport
	biz       *ent.Business
	// settle judges resolved vouchers' receipts, as the voucher service's
	// resolve has it do (no verified networks: receipts are trusted).
	settle *settlement.Service

	owner, admin, member, outsider context.Context
}

type fixtureOptions struct {
	allowPrivate  bool
	retryInterval time.Duration
	transport     webhook.Transport
}

func newFixture(t *testing.T, db *storage.DB, o fixtureOptions) *fixture {
	t.Helper()
	ctx := context.Background()
	box, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if o.retryInterval == 0 {
		o.retryInterval = 50 * time.Millisecond
	}
	f := &fixture{db: db, box: box, transport: &fakeTransport{}}
	tr := o.transport
	if tr == nil {
		tr = f.transport
	}
	f.disp = webhook.NewDispatcher(db, webhook.DispatcherOptions{
		Transport: tr, Box: box, AllowPrivate: o.allowPrivate, Log: quiet,
		RetryInterval: o.retryInterval, Workers: 4, PollInterval: 20 * time.Millisecond,
	})
	f.svc = webhook.NewService(db, webhook.Options{Box: box, AllowPrivate: o.allowPrivate, Dispatcher: f.disp, Log: quiet})
	f.outbox = webhook.NewOutbox(db, webhook.OutboxOptions{
		Wake: f.disp.Wake,
		View: func(v *ent.Voucher) any { return map[string]any{"id": v.ID, "status": v.Status} },
	})
	fin, err := finance.New(finance.Default())
	if err != nil {
		t.Fatal(err)
	}
	if f.settle, err = settlement.NewService(db, fin.Registry(), settlement.Options{}); err != nil {
		t.Fatal(err)
	}
	f.biz, err = db.Business.Create().SetName("Shop").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.owner = f.join(t, businessuser.RoleOWNER)
	f.admin = f.join(t, businessuser.RoleADMIN)
	f.member = f.join(t, businessuser.RoleMEMBER)
	f.outsider = as(auth.KindUser, newUser(t, db).ID)
	return f
}

// resolve is v RESOLVED with receipts rs and the settlement the resolve
// opens for them (the settlement domain's verdict, which the outbox turns
// into events).
func (f *fixture) resolve(t *testing.T, v *ent.Voucher, rs ...payment.Receipt) *ent.Voucher {
	t.Helper()
	st, err := f.settle.Open(v, rs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := *v
	c.Status, c.Receipts, c.Settlement = entvoucher.StatusRESOLVED, rs, st
	return &c
}

func as(kind auth.Kind, id string) context.Context {
	return auth.WithPrincipal(context.Background(), &auth.Principal{Kind: kind, ID: id})
}

func newUser(t *testing.T, db *storage.DB) *ent.User {
	t.Helper()
	u, err := db.User.Create().SetEmail(fmt.Sprintf("user%d@example.com", seq.Add(1))).SetPasswordHash("x").Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (f *fixture) join(t *testing.T, role businessuser.Role) context.Context {
	t.Helper()
	u := newUser(t, f.db)
	if _, err := f.db.BusinessUser.Create().SetBusinessID(f.biz.ID).SetUserID(u.ID).SetRole(role).Save(context.Background()); err != nil {
		t.Fatal(err)
	}
	return as(auth.KindUser, u.ID)
}

func (f *fixture) setBusinessStatus(t *testing.T, st entbusiness.Status) {
	t.Helper()
	if err := f.db.Business.UpdateOneID(f.biz.ID).SetStatus(st).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// endpoint creates an endpoint subscribed to events (all types when none).
func (f *fixture) endpoint(t *testing.T, url string, events ...string) *webhook.EndpointWithSecret {
	t.Helper()
	if len(events) == 0 {
		events = webhook.EventTypes
	}
	e, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, webhook.CreateEndpointInput{URL: url, Events: events})
	if err != nil {
		t.Fatalf("create endpoint: %v", err)
	}
	return e
}

// run starts the dispatcher until the test ends.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.disp.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// fakeTransport records requests and answers with respond (200 when nil).
type fakeTransport struct {
	mu      sync.Mutex
	reqs    []webhook.Request
	respond func(req webhook.Request, nth int) webhook.Result
	// perID counts requests per message id.
	perID map[string]int
}

func (ft *fakeTransport) Deliver(ctx context.Context, req webhook.Request) webhook.Result {
	ft.mu.Lock()
	if ft.perID == nil {
		ft.perID = map[string]int{}
	}
	ft.perID[req.MessageID]++
	n := ft.perID[req.MessageID]
	ft.reqs = append(ft.reqs, req)
	respond := ft.respond
	ft.mu.Unlock()
	if respond == nil {
		return webhook.Result{Status: 200, Duration: time.Millisecond}
	}
	return respond(req, n)
}

func (ft *fakeTransport) setRespond(fn func(req webhook.Request, nth int) webhook.Result) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.respond = fn
}

func (ft *fakeTransport) count(id string) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.perID[id]
}

func (ft *fakeTransport) requests() []webhook.Request {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return append([]webhook.Request(nil), ft.reqs...)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eachDB runs fn on SQLite and PostgreSQL, in parallel with the package's
// other tests.
func eachDB(t *testing.T, fn func(t *testing.T, db *storage.DB)) {
	t.Helper()
	t.Parallel()
	testdb.Each(t, fn)
}
