package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/settlementclaim"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/storage"
)

// DefaultWindow is VOUCHER_SETTLEMENT_WINDOW's default: a settlement with
// nothing confirmed an hour after resolve has FAILED.
const DefaultWindow = time.Hour

// DefaultPollInterval is a network's pollInterval unless the finance file
// sets one.
const DefaultPollInterval = 2 * time.Second

// Deposit event types the settlement causes, declared here only (the
// webhook outbox lists them among the event types endpoints subscribe to).
const (
	EventPending   = "deposit.pending"
	EventConfirmed = "deposit.confirmed"
	EventUnderpaid = "deposit.underpaid"
	EventOverpaid  = "deposit.overpaid"
	EventFailed    = "deposit.failed"
)

// Network is one verified network: its node and how it is watched.
type Network struct {
	// Name is the finance file's network name ("ethereum").
	Name  string
	Chain Chain
	// Confirmations is how many blocks make a transaction confirmed (evm:
	// head − block + 1 ≥ Confirmations; solana: finalized). At least 1.
	Confirmations int
	// PollInterval is how often the watcher polls (DefaultPollInterval
	// when zero).
	PollInterval time.Duration
}

// Validate checks a network's settings.
func (n Network) Validate() error {
	var v apperr.Validator
	v.Check(n.Name != "", "name", "is required")
	v.Check(n.Chain != nil, "chain", "is required")
	v.Check(n.Confirmations >= 1, "confirmations", "must be at least 1")
	v.Check(n.PollInterval >= 0, "pollInterval", "must not be negative")
	return v.Err()
}

// EventRecorder writes deposit events for a settlement change, inside the
// transaction that makes the change (the webhook outbox). It decides which
// vouchers have deposits (business vouchers only).
type EventRecorder interface {
	// SettlementsChanged records the events of the settlement changes
	// written in one transaction (types[i] are vs[i]'s), in a few
	// statements rather than a few per voucher.
	SettlementsChanged(ctx context.Context, tx *ent.Tx, vs []*ent.Voucher, types [][]string) error
}

// Options are the service's collaborators.
type Options struct {
	// Networks are the verified networks; any other network's receipts are
	// trusted (development only: the composition root refuses that in
	// production unless told otherwise).
	Networks []Network
	// Window is VOUCHER_SETTLEMENT_WINDOW (DefaultWindow when zero).
	Window time.Duration
	// Events records deposit events (none when nil).
	Events EventRecorder
	// Publisher gets every committed settlement change with the voucher's
	// new state (the path status changes take to voucherUpdated).
	Publisher pubsub.Publisher
	// MaxBackoff bounds the wait after failed polls (one minute when zero).
	MaxBackoff time.Duration
	// Polled hears the end of each of the watcher's checks of a network
	// (metrics; internal/metrics.Settlement.Polled); nil: nobody.
	Polled func(network string, err error)
	// Sweepers sweep the deposit addresses of the networks they are
	// given for (VOUCHER_SWEEP_KEY); a network without one is not swept.
	Sweepers map[string]Sweeper
	// SweepFailed hears each deposit address whose sweep failed
	// (metrics); nil: nobody.
	SweepFailed func(network string, addresses int)
	Now         func() time.Time
	Log         *slog.Logger
}

// Service keeps vouchers' settlement: it opens one at resolve, and its
// watcher moves it with what each network's chain shows.
type Service struct {
	db            *storage.DB
	reg           *finance.Registry
	networks      map[string]*watched
	window        time.Duration
	events        EventRecorder
	pub           pubsub.Publisher
	maxBackoff    time.Duration
	now           func() time.Time
	log           *slog.Logger
	polled        func(network string, err error)
	sweepers      map[string]Sweeper
	onSweepFailed func(network string, addresses int)
	// updateText is updateStatement in the database's dialect.
	updateText string
	// countsHead, countsRow, countsTail make countsStatement's text for a
	// number of rows (see commitCounts).
	countsHead, countsRow, countsTail string
}

// watched is a verified network, its watcher's wake-up line and what its
// polls keep between them.
type watched struct {
	Network
	typ  string
	wake chan struct{}

	// mu makes one poll of the network at a time in this process (Run's
	// goroutine, or a caller of Poll).
	mu sync.Mutex
	// pending are the vouchers pending on the network as the last poll
	// read or wrote them, by id. A resolved voucher's row changes only
	// with its version, so a poll reads again only the rows whose version
	// moved (see Service.pending).
	pending map[string]*ent.Voucher

	// Detection (networks whose chain is a Detector): the watched
	// checkouts by id, their watches in a stable order and by watch, and
	// the last height scanned (and the last one recorded in the database:
	// detection_cursors).
	detector  Detector
	watches   map[string]*watchEntry
	watchList []Watch
	byWatch   map[Watch]string
	scanned   uint64
	saved     uint64
}

// NewService returns the settlement service over db, for the networks of
// reg.
func NewService(db *storage.DB, reg *finance.Registry, o Options) (*Service, error) {
	if db == nil || reg == nil {
		return nil, errors.New("settlement: storage and registry are required")
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Publisher == nil {
		o.Publisher = pubsub.PublisherFunc(func(pubsub.VoucherChange) {})
	}
	now := o.Now
	s := &Service{
		db: db, reg: reg, networks: map[string]*watched{}, window: o.Window, events: o.Events,
		pub: o.Publisher, maxBackoff: o.MaxBackoff, log: o.Log, polled: o.Polled,
		sweepers: o.Sweepers, onSweepFailed: o.SweepFailed,
		now:        func() time.Time { return now().UTC().Truncate(time.Microsecond) },
		updateText: db.Rebind(updateStatement),
	}
	s.countsHead, s.countsRow, s.countsTail = countsStatement()
	for _, n := range o.Networks {
		if err := n.Validate(); err != nil {
			return nil, fmt.Errorf("settlement: network %q: %w", n.Name, err)
		}
		fn, ok := reg.Network(n.Name)
		if !ok {
			return nil, fmt.Errorf("settlement: network %q is not in the finance registry", n.Name)
		}
		if n.PollInterval == 0 {
			n.PollInterval = DefaultPollInterval
		}
		w := &watched{Network: n, typ: fn.Type, wake: make(chan struct{}, 1)}
		// Detection is for networks whose checkouts have something to
		// watch: deposit addresses (a depositFactory) or Solana Pay
		// references; any other network's polls never read watches.
		if d, ok := n.Chain.(Detector); ok && (fn.DepositFactory != "" || fn.Type == chain.TypeSolana) {
			w.detector = d
		}
		s.networks[n.Name] = w
	}
	return s, nil
}

// Verified reports whether network's payments are checked on chain.
func (s *Service) Verified(network string) bool { return s.networks[network] != nil }

// Verifies reports whether v's payment is checked on chain.
func (s *Service) Verifies(v *ent.Voucher) bool {
	d, err := dueOf(s.reg, v)
	return err == nil && s.Verified(d.network)
}

// due is what a voucher's payer owes, in the terms the chain is read in.
type due struct {
	network string
	typ     string // chain.TypeEVM or chain.TypeSolana
	// custom is a CUSTOM voucher's instruction; nil for SIMPLE.
	custom *payment.CustomPayment
	// SIMPLE: the due token (supplied when negotiated), its amount, the
	// payee's wallet and, after negotiation, the sender the payer named.
	token    finance.Token
	amount   decimal.Decimal
	currency string
	payee    string
	sender   string
}

// dueOf reads what v's payer owes. docs/settlement.md: the due payment is
// suppliedPayment when negotiated, else expectedPayment; the payee's wallet
// is always expectedPayment.wallet.address. A CUSTOM voucher settles on its
// first network with its first payment instruction.
func dueOf(reg *finance.Registry, v *ent.Voucher) (due, error) {
	var d due
	switch {
	case v.ExpectedPayment != nil:
		p := v.ExpectedPayment
		d.payee = p.Wallet.Address
		if v.SuppliedPayment != nil {
			p = v.SuppliedPayment
			d.sender = p.Wallet.Address
		}
		tok, ok := reg.Token(p.Network, p.Currency)
		if !ok {
			return d, fmt.Errorf("settlement: voucher %s: %s on %s is not in the registry", v.ID, p.Currency, p.Network)
		}
		amt, err := money.ParseAnyScale(p.Amount)
		if err != nil {
			return d, fmt.Errorf("settlement: voucher %s: amount: %w", v.ID, err)
		}
		d.network, d.token, d.amount, d.currency = p.Network, tok, amt, p.Currency
	case len(v.Payments) > 0 && len(v.Networks) > 0:
		d.network = v.Networks[0].Network
		d.custom = &v.Payments[0]
	default:
		return d, fmt.Errorf("settlement: voucher %s names no payment", v.ID)
	}
	n, ok := reg.Network(d.network)
	if !ok {
		return d, fmt.Errorf("settlement: voucher %s: unknown network %s", v.ID, d.network)
	}
	d.typ = n.Type
	return d, nil
}

// Open is the settlement a resolve with receipts rs starts on v (a
// REDEEMED voucher). On a verified network every receipt needs a
// transactionHash of the network's shape, each at most once; the
// settlement is PENDING and the watcher takes it from there. On any other
// network the receipts are trusted as reported (verified: false): the paid
// sum of their amounts, a receipt without one counting as exact.
func (s *Service) Open(v *ent.Voucher, rs []payment.Receipt, now time.Time) (*payment.Settlement, error) {
	d, err := dueOf(s.reg, v)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	n := s.networks[d.network]
	if n == nil {
		return trusted(d, rs), nil
	}
	var val apperr.Validator
	st := &payment.Settlement{
		Status: payment.SettlementPending, Verified: true, RequiredConfirmations: n.Confirmations,
		Currency: d.currency, Network: d.network, Transactions: make([]payment.SettlementTransaction, 0, len(rs)),
	}
	deadline := now.Add(s.window)
	st.Deadline = &deadline
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		at := fmt.Sprintf("receipts[%d].transactionHash", i)
		h, err := CanonicalHash(n.typ, r.TransactionHash)
		if err != nil {
			val.Add(at, err.Error())
			continue
		}
		if seen[h] {
			val.Add(at, "names a transaction another receipt already names")
			continue
		}
		seen[h] = true
		st.Transactions = append(st.Transactions, payment.SettlementTransaction{TransactionHash: h, Status: payment.TxPending})
	}
	if err := val.Err(); err != nil {
		return nil, err
	}
	return st, nil
}

// trusted is the settlement of an unverified network: what the receipts
// report, as the resolve-time events always judged it.
func trusted(d due, rs []payment.Receipt) *payment.Settlement {
	st := &payment.Settlement{Status: payment.SettlementConfirmed, Currency: d.currency, Transactions: []payment.SettlementTransaction{}}
	var paid decimal.Decimal
	open := false
	for _, r := range rs {
		if r.TransactionHash != "" {
			st.Transactions = append(st.Transactions, payment.SettlementTransaction{
				TransactionHash: r.TransactionHash, Status: payment.TxConfirmed, Amount: r.Amount,
			})
		}
		if r.Amount == "" {
			open = true
			continue
		}
		a, err := money.ParseAnyScale(r.Amount)
		if err != nil {
			open = true
			continue
		}
		paid = paid.Add(a)
	}
	if d.custom != nil {
		return st
	}
	if open && paid.LessThan(d.amount) {
		paid = d.amount
	}
	st.PaidAmount = money.Format(paid)
	st.Status = verdict(paid, d.amount)
	return st
}

// verdict compares a confirmed paid sum with the due amount.
func verdict(paid, owed decimal.Decimal) string {
	switch paid.Cmp(owed) {
	case -1:
		return payment.SettlementUnderpaid
	case 1:
		return payment.SettlementOverpaid
	}
	return payment.SettlementConfirmed
}

// Claim records, in the resolving transaction tx, that v claims its
// settlement's transactions. A transaction another voucher claimed is
// validation_failed, naming the receipt; the unique index on (network,
// transaction_hash) decides a race between two resolves.
func (s *Service) Claim(ctx context.Context, tx *ent.Tx, v *ent.Voucher, rs []payment.Receipt) error {
	st := v.Settlement
	if st == nil || !st.Verified || len(st.Transactions) == 0 {
		return nil
	}
	hashes := make([]string, len(st.Transactions))
	for i, t := range st.Transactions {
		hashes[i] = t.TransactionHash
	}
	taken, err := tx.SettlementClaim.Query().
		Where(settlementclaim.Network(st.Network), settlementclaim.TransactionHashIn(hashes...)).
		Select(settlementclaim.FieldTransactionHash).Strings(ctx)
	if err != nil {
		return apperr.InternalError(err)
	}
	if len(taken) > 0 {
		var val apperr.Validator
		for i, r := range rs {
			h, _ := CanonicalHash(s.networks[st.Network].typ, r.TransactionHash)
			for _, t := range taken {
				if h == t {
					val.Add(fmt.Sprintf("receipts[%d].transactionHash", i), "names a transaction another voucher has claimed")
				}
			}
		}
		return val.Err()
	}
	creates := make([]*ent.SettlementClaimCreate, len(hashes))
	now := s.now()
	for i, h := range hashes {
		creates[i] = tx.SettlementClaim.Create().SetNetwork(st.Network).SetTransactionHash(h).SetVoucherID(v.ID).SetCreatedAt(now)
	}
	if err := tx.SettlementClaim.CreateBulk(creates...).Exec(ctx); err != nil {
		if ent.IsConstraintError(err) {
			return apperr.Invalid("receipts", "names a transaction another voucher has claimed")
		}
		return apperr.InternalError(err)
	}
	return nil
}

// Resolved tells the watcher of v's network that it has new work, so a
// resolve is looked at without waiting for the next poll.
func (s *Service) Resolved(v *ent.Voucher) {
	if v == nil || v.Settlement == nil || !v.Settlement.Verified {
		return
	}
	if n := s.networks[v.Settlement.Network]; n != nil {
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
}

// units turns an amount in an asset's smallest unit into a decimal.
func units(x *big.Int, decimals int32) decimal.Decimal {
	if x == nil {
		return decimal.Zero
	}
	return decimal.NewFromBigInt(x, -decimals)
}
