package voucher_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Real mainnet addresses from the default registry.
const (
	usdcEth   = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	usdtEth   = "0xdAC17F958D2ee523a2206206994597C13D831ec7"
	daiEth    = "0x6B175474E89094C44Da98b954EedeAC495271d0F"
	nativeEVM = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"
	usdcPoly  = "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"
	usdcSol   = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
	// A payee wallet (EIP-55) and a Solana wallet.
	payeeWallet  = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	solanaWallet = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
)

// clock is a test clock the services share.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sink records every change the service hands to the event sink.
type sink struct {
	mu      sync.Mutex
	changes []change
	fail    error
}

type change struct{ prev, next *ent.Voucher }

func (s *sink) VoucherChanged(_ context.Context, tx *ent.Tx, prev, next *ent.Voucher) error {
	if tx == nil {
		return fmt.Errorf("sink called outside a transaction")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.changes = append(s.changes, change{prev, next})
	return nil
}

func (s *sink) all() []change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]change(nil), s.changes...)
}

// publisher records the changes the service publishes after commit and
// passes them on to also (the PostgreSQL notifier, in the tests that
// check what other replicas hear), as the app's wiring does.
type publisher struct {
	mu      sync.Mutex
	changes []pubsub.VoucherChange
	also    pubsub.Publisher
}

func (p *publisher) Publish(c pubsub.VoucherChange) {
	p.mu.Lock()
	p.changes = append(p.changes, c)
	also := p.also
	p.mu.Unlock()
	if also != nil {
		also.Publish(c)
	}
}

func (p *publisher) all() []pubsub.VoucherChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pubsub.VoucherChange(nil), p.changes...)
}

// fixture is one database with the services over it.
type fixture struct {
	t        *testing.T
	db       *storage.DB
	svc      *voucher.Service
	sessions *session.Service
	clock    *clock
	sink     *sink
	pub      *publisher
	fin      *finance.Service
}

const ttl = 15 * time.Minute

func newFixture(t *testing.T, db *storage.DB, finOpts ...finance.Option) *fixture {
	t.Helper()
	c := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	fin, err := finance.New(finance.Default(), finOpts...)
	if err != nil {
		t.Fatal(err)
	}
	sessions := session.NewService(db, 10*time.Minute, c.Now)
	f := &fixture{t: t, db: db, sessions: sessions, clock: c, sink: &sink{}, pub: &publisher{}, fin: fin}
	f.svc, err = voucher.NewService(db, voucher.Options{
		Finance: fin, Sessions: sessions, TTL: ttl, Now: c.Now, Events: f.sink, Publisher: f.pub,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func as(p *auth.Principal) context.Context {
	return auth.WithPrincipal(context.Background(), p)
}

func device() *auth.Principal { return &auth.Principal{Kind: auth.KindDevice, ID: ids.New(ids.Device)} }

// user creates a users row (business memberships need one).
func (f *fixture) user() *auth.Principal {
	f.t.Helper()
	u, err := f.db.User.Create().SetEmail(ids.New("u") + "@example.com").SetPasswordHash("x").Save(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return &auth.Principal{Kind: auth.KindUser, ID: u.ID}
}

// session opens a context for payer and returns it with the payee's
// resource principal.
func (f *fixture) session(payer *auth.Principal) (*ent.VoucherSession, *auth.Principal) {
	f.t.Helper()
	s, err := f.sessions.Create(as(payer))
	if err != nil {
		f.t.Fatal(err)
	}
	return s, &auth.Principal{Kind: auth.KindResource, ID: s.ID}
}

// parties is a payer with a context and the payee signed in on it.
type parties struct {
	payer, payee *auth.Principal
	session      *ent.VoucherSession
}

// as is the context of the payer, the payee or (any other name) a stranger.
func (p parties) as(who string) context.Context {
	switch who {
	case "payer":
		return as(p.payer)
	case "payee":
		return as(p.payee)
	}
	return as(device())
}

func (f *fixture) parties() parties {
	payer := device()
	s, payee := f.session(payer)
	return parties{payer: payer, payee: payee, session: s}
}

func (f *fixture) reserve(p parties) *ent.Voucher {
	f.t.Helper()
	v, err := f.svc.Reserve(as(p.payee), voucher.ReserveInput{Code: p.session.Code})
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

func simpleBody(amount string) voucher.RedeemInput {
	return voucher.RedeemInput{ExpectedPayment: &voucher.PaymentInput{
		Network: "ethereum", Currency: "USDC", CurrencyAddress: usdcEth, Amount: amount,
		Wallet: &voucher.WalletInput{Address: payeeWallet},
	}}
}

func customBody() voucher.RedeemInput {
	return voucher.RedeemInput{
		Networks: []voucher.NetworkInput{{Network: "ethereum", Type: "evm", ChainID: "1"}},
		Payments: []voucher.CustomPaymentInput{{Type: "send_transaction", Input: &voucher.TransactionInputInput{
			From: "{payer}", To: usdcEth, Value: "0", Data: "0xa9059cbb",
		}}},
	}
}

// redeemed reserves and redeems a SIMPLE voucher of amount USDC on ethereum.
func (f *fixture) redeemed(p parties, amount string) *ent.Voucher {
	f.t.Helper()
	v := f.reserve(p)
	r, err := f.svc.Redeem(as(p.payee), v.ID, simpleBody(amount))
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// row snapshots a stored voucher exactly as the database holds it, so a
// rejected request can be shown to have changed nothing.
func (f *fixture) row(id string) []any {
	f.t.Helper()
	rows, err := f.db.SQL.QueryContext(context.Background(), f.db.Rebind("SELECT * FROM vouchers WHERE id = ?"), id)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		f.t.Fatalf("voucher %s not stored", id)
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		f.t.Fatal(err)
	}
	return vals
}

func (f *fixture) unchanged(id string, before []any) {
	f.t.Helper()
	if after := f.row(id); !reflect.DeepEqual(before, after) {
		f.t.Fatalf("stored voucher changed:\nbefore %v\nafter  %v", before, after)
	}
}

// business creates a business with member as an ACTIVE OWNER.
func (f *fixture) business(member *auth.Principal, status business.Status) *ent.Business {
	f.t.Helper()
	ctx := context.Background()
	b, err := f.db.Business.Create().SetName("Shop").SetStatus(status).Save(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.member(b, member, businessuser.StatusACTIVE)
	return b
}

func (f *fixture) member(b *ent.Business, u *auth.Principal, st businessuser.Status) {
	f.t.Helper()
	if _, err := f.db.BusinessUser.Create().SetBusinessID(b.ID).SetUserID(u.ID).
		SetRole(businessuser.RoleMEMBER).SetStatus(st).Save(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// mustGet reads voucher id as who.
func (f *fixture) mustGet(who *auth.Principal, id string) *ent.Voucher {
	f.t.Helper()
	v, err := f.svc.Get(as(who), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// wantCode fails t unless err carries code.
func wantCode(t *testing.T, err error, code apperr.Code) {
	t.Helper()
	if apperr.CodeOf(err) != code || err == nil {
		t.Fatalf("want %s, got %v", code, err)
	}
}

// wantField fails t unless err is validation_failed naming field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	wantCode(t, err, apperr.ValidationFailed)
	e := apperr.From(err)
	for _, d := range e.Details {
		if d.Field == field {
			return
		}
	}
	t.Fatalf("want a problem with %q, got %v", field, err)
}
