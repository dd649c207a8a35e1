package voucher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/money"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/payment"
)

// Op names a voucher operation that acts on an existing voucher.
type Op string

// Operations on an existing voucher.
const (
	OpRedeem      Op = "redeem"
	OpNegotiate   Op = "negotiate"
	OpResolve     Op = "resolve"
	OpDiscard     Op = "discard"
	OpInteropInit Op = "interop-init"
)

// operation is op's entry in the operations table, whose guard the service
// applies (operation.Caller).
func (op Op) operation() *operation.Op {
	switch op {
	case OpRedeem:
		return operation.RedeemVoucher
	case OpNegotiate:
		return operation.NegotiateVoucher
	case OpResolve:
		return operation.ResolveVoucher
	case OpDiscard:
		return operation.DiscardVoucher
	case OpInteropInit:
		return operation.InteropInit
	}
	// An Op nobody declared gets the strictest guard.
	return strictest
}

var strictest = &operation.Op{Name: "unknown voucher operation", Guard: auth.GuardUser}

// rolesFor is who may perform op (docs/vouchers.md, "Who may do what"); anyone
// else is told the voucher does not exist.
func rolesFor(op Op) role {
	switch op {
	case OpRedeem:
		return rolePayee
	case OpDiscard:
		return rolePayee | rolePayer
	default: // negotiate, resolve, interop-init
		return rolePayer
	}
}

// maxAttempts bounds how often a read-then-write transition re-reads a
// voucher that changed between its read and its write (a concurrent
// negotiate, say). A change that is not a state change is rare, so three
// tries only fail under a pathological storm of them.
const maxAttempts = 3

var (
	errExpired   = apperr.New(apperr.Expired, "the voucher has expired")
	errDiscarded = apperr.New(apperr.Discarded, "the voucher was discarded")
)

// transition is one state change of a voucher.
type transition struct {
	op   Op
	from []entvoucher.Status
	// wrongState is the spec's code for a live voucher in a state outside from.
	wrongState func(entvoucher.Status) error
	// against holds the body against the voucher, after its state.
	against func(v *ent.Voucher) error
	// sets are the columns the change writes (version is always bumped);
	// cur is nil on the fast path.
	sets func(ctx context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error)
	// fast says sets does not depend on the current row, so the change is
	// tried first as one statement without reading the row.
	fast bool
	// inTx says the change must run in a transaction (with after) even
	// for a voucher without a business.
	inTx func(cur *ent.Voucher) bool
	// after runs in the transaction once the row changed.
	after func(ctx context.Context, tx *ent.Tx, next *ent.Voucher) error
	// stable says sets reads only parts of the row that cannot change while
	// the voucher is in a from state (negotiate reads the expected payment,
	// fixed from redeem on), so the write needs no version guard: the WHERE
	// on state already makes it safe, and concurrent callers do not have to
	// retry each other away.
	stable bool
}

// mode selects the extra guard of a transition statement.
type mode int

const (
	// modeFast is the one-statement path: no prior read, and only vouchers
	// without a business (those need their events in a transaction).
	modeFast mode = iota
	// modeVersion follows a read: the row must still be the version read.
	modeVersion
	// modeState follows a read for a stable transition: the state
	// conditions alone guard it.
	modeState
)

// transitionStatement is t's conditional UPDATE for caller on voucher id.
// The WHERE holds everything that decides the transition may happen: the
// caller's role, the starting states and the expiry; so of N concurrent
// callers exactly one changes the row.
func transitionStatement(dialect string, t *transition, callerID, id string, sets []assignment, now time.Time, m mode, version int) (string, []any) {
	args := make([]any, 0, len(sets)+6)
	for _, a := range sets {
		if a.lit == "" {
			args = append(args, a.val)
		}
	}
	args = append(args, id)
	switch rolesFor(t.op) {
	case rolePayee, rolePayer:
		args = append(args, callerID)
	default:
		args = append(args, callerID, callerID)
	}
	args = append(args, now)
	if m == modeVersion {
		args = append(args, version)
	}
	// The text depends only on the statement's shape: the dialect, the
	// operation (its roles), its starting states, the mode and the SET
	// columns with their literals. It is built once per shape: the
	// arguments above are all that changes between requests.
	var kb [192]byte
	key := append(kb[:0], dialect...)
	key = append(key, 0)
	key = append(key, t.op...)
	key = append(key, 0, byte('0'+m))
	for _, f := range t.from {
		key = append(key, 0)
		key = append(key, f...)
	}
	for _, a := range sets {
		key = append(key, 0)
		key = append(key, a.col...)
		key = append(key, '=')
		key = append(key, a.lit...)
	}
	statementTexts.RLock()
	q, ok := statementTexts.m[string(key)]
	statementTexts.RUnlock()
	if !ok {
		q = transitionText(dialect, t, sets, m)
		statementTexts.Lock()
		statementTexts.m[string(key)] = q
		statementTexts.Unlock()
	}
	return q, args
}

// statementTexts memoizes transitionText by shape. The shapes are a small
// fixed set (each operation writes a fixed list of columns), so it is
// never pruned.
var statementTexts = struct {
	sync.RWMutex
	m map[string]string
}{m: map[string]string{}}

// transitionText builds the statement text transitionStatement's arguments
// go with, in the same order.
func transitionText(dialect string, t *transition, sets []assignment, m mode) string {
	st := statement{sets: sets}
	st.where = append(st.where, "id = ?")
	switch rolesFor(t.op) {
	case rolePayee:
		st.where = append(st.where, "payee_id = ?")
	case rolePayer:
		st.where = append(st.where, "payer_id = ?")
	default:
		st.where = append(st.where, "(payee_id = ? OR payer_id = ?)")
	}
	st.where = append(st.where, quoteStatus(t.from...), "expires_at > ?")
	switch m {
	case modeFast:
		st.where = append(st.where, "business_id IS NULL")
	case modeVersion:
		st.where = append(st.where, "version = ?")
	}
	q, _ := st.build(dialect)
	return q
}

// apply runs t on voucher id for p. The fast path is one statement; when
// it changes nothing (or t needs the row first) the row is read once, which
// either explains the failure with the right code or lets the change go
// ahead guarded by the version read: in a transaction with the event sink
// for a business voucher, as one statement otherwise.
func (s *Service) apply(ctx context.Context, p *auth.Principal, id string, t *transition) (*ent.Voucher, error) {
	dialect := s.db.Dialect
	if t.fast {
		now := s.clock()
		sets, err := t.sets(ctx, nil, now)
		if err != nil {
			return nil, err
		}
		q, args := transitionStatement(dialect, t, p.ID, id, sets, now, modeFast, 0)
		v, err := queryVoucher(ctx, s.db.Prepared, dialect, q, args...)
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		if v != nil {
			s.published(v)
			return v, nil
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, err := s.load(ctx, s.db.Prepared, id, false)
		if err != nil {
			return nil, err
		}
		now := s.clock()
		if err := s.decide(ctx, s.db.Client, p, t, cur, now); err != nil {
			return nil, err
		}
		var next *ent.Voucher
		if cur.BusinessID != nil || (t.inTx != nil && t.inTx(cur)) {
			next, err = s.applyInTx(ctx, p, id, t)
		} else {
			next, err = s.applyGuarded(ctx, s.db.Prepared, p, id, t, cur, now)
		}
		if err != nil {
			return nil, err
		}
		if next != nil {
			s.published(next)
			return next, nil
		}
		// The row changed between the read and the write: read it again.
	}
	return nil, apperr.InternalError(fmt.Errorf("voucher %s kept changing during %s", id, t.op))
}

// applyGuarded writes t's change if the voucher is still at cur's version
// (or, for a stable transition, still in a state it starts from). It
// returns nil (and no error) when it is not.
func (s *Service) applyGuarded(ctx context.Context, q querier, p *auth.Principal, id string, t *transition, cur *ent.Voucher, now time.Time) (*ent.Voucher, error) {
	sets, err := t.sets(ctx, cur, now)
	if err != nil {
		return nil, err
	}
	m := modeVersion
	if t.stable {
		m = modeState
	}
	stmt, args := transitionStatement(s.db.Dialect, t, p.ID, id, sets, now, m, cur.Version)
	next, err := queryVoucher(ctx, q, s.db.Dialect, stmt, args...)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return next, nil
}

// applyInTx changes a business voucher: the row is locked, checked again,
// changed and handed to the event sink in one transaction, so the deposit
// events commit exactly when the change does.
func (s *Service) applyInTx(ctx context.Context, p *auth.Principal, id string, t *transition) (*ent.Voucher, error) {
	var next *ent.Voucher
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		prev, err := s.load(ctx, tx, id, true)
		if err != nil {
			return err
		}
		now := s.clock()
		if err := s.decide(ctx, tx.Client(), p, t, prev, now); err != nil {
			return err
		}
		next, err = s.applyGuarded(ctx, tx, p, id, t, prev, now)
		if err != nil || next == nil {
			return err
		}
		if t.after != nil {
			if err := t.after(ctx, tx, next); err != nil {
				return err
			}
		}
		if next.BusinessID == nil {
			return nil
		}
		if err := s.events.VoucherChanged(ctx, tx, prev, next); err != nil {
			return apperr.From(err)
		}
		return nil
	})
	if err != nil {
		return nil, apperr.From(err)
	}
	return next, nil
}

// load reads the stored row (without the read model: transitions judge
// expiry themselves). A missing voucher is not_found.
func (s *Service) load(ctx context.Context, q querier, id string, lock bool) (*ent.Voucher, error) {
	v, err := queryVoucher(ctx, q, s.db.Dialect, selectStatement(s.db.Dialect, lock), id)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if v == nil {
		return nil, errNotFound
	}
	return v, nil
}

// decide says whether t may change cur for p, in the order docs/vouchers.md gives ("Order of errors"):
// visibility, then state (expired/discarded, then the spec's state codes),
// then the body against the voucher. The body's own shape was checked
// before (and a body that failed it never reaches here).
func (s *Service) decide(ctx context.Context, c *ent.Client, p *auth.Principal, t *transition, cur *ent.Voucher, now time.Time) error {
	r, err := rolesIn(ctx, c, p, cur)
	if err != nil {
		return err
	}
	if r&rolesFor(t.op) == 0 {
		return errNotFound
	}
	if err := businessActiveFor(ctx, c, t.op, cur); err != nil {
		return err
	}
	if err := stateErr(cur, now, t.from, t.wrongState); err != nil {
		return err
	}
	if t.against != nil {
		return t.against(cur)
	}
	return nil
}

// stateErr judges v's state for a transition allowed from the from states.
func stateErr(v *ent.Voucher, now time.Time, from []entvoucher.Status, wrong func(entvoucher.Status) error) error {
	if isExpired(v, now) {
		return errExpired
	}
	if v.Status == entvoucher.StatusDISCARDED {
		if v.DiscardReason != nil && *v.DiscardReason == ReasonExpired {
			return errExpired
		}
		return errDiscarded
	}
	for _, f := range from {
		if v.Status == f {
			return nil
		}
	}
	return wrong(v.Status)
}

// needsRedeemed is the state rule of operations on a redeemed voucher.
func needsRedeemed(st entvoucher.Status) error {
	if st == entvoucher.StatusRESERVED {
		return apperr.New(apperr.NotRedeemed, "the voucher is not redeemed yet")
	}
	return apperr.New(apperr.AlreadyResolved, "the voucher is already resolved")
}

// reject answers a request whose body failed its own checks: a caller who
// may not act on the voucher still learns only that it does not exist.
func (s *Service) reject(ctx context.Context, p *auth.Principal, op Op, id string, bodyErr error) error {
	v, err := s.load(ctx, s.db.Prepared, id, false)
	if err != nil {
		return err
	}
	r, err := rolesIn(ctx, s.db.Client, p, v)
	if err != nil {
		return err
	}
	if r&rolesFor(op) == 0 {
		return errNotFound
	}
	return bodyErr
}

// businessActiveFor refuses redeem and negotiate of an INACTIVE business's
// voucher (business_inactive); resolve and discard stay allowed, since the
// payer may have paid (docs/hardening.md).
func businessActiveFor(ctx context.Context, c *ent.Client, op Op, v *ent.Voucher) error {
	if v.BusinessID == nil || (op != OpRedeem && op != OpNegotiate) {
		return nil
	}
	b, err := c.Business.Get(ctx, *v.BusinessID)
	if err != nil {
		return apperr.InternalError(err)
	}
	return business.RequireActive(b)
}

// Reject is for a door that could not decode a request body for op on
// voucher id: it returns the error the caller should see, which is
// not_found when the caller may not act on the voucher (visibility comes
// before the body), and bodyErr otherwise.
func (s *Service) Reject(ctx context.Context, op Op, id string, bodyErr error) error {
	p, err := operation.Caller(ctx, op.operation())
	if err != nil {
		return err
	}
	return s.reject(ctx, p, op, id, bodyErr)
}

// Redeem sets the payment terms of a RESERVED voucher (payee only), making
// it SIMPLE or CUSTOM.
func (s *Service) Redeem(ctx context.Context, id string, in RedeemInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpRedeem.operation())
	if err != nil {
		return nil, err
	}
	r, err := parseRedeem(s.reg, in)
	if err != nil {
		return nil, s.reject(ctx, p, OpRedeem, id, err)
	}
	return s.apply(ctx, p, id, redeemTransition(s.db.Dialect, r))
}

func redeemTransition(dialect string, r *redemption) *transition {
	return &transition{
		op:   OpRedeem,
		from: []entvoucher.Status{entvoucher.StatusRESERVED},
		wrongState: func(entvoucher.Status) error {
			return apperr.New(apperr.AlreadyRedeemed, "the voucher is already redeemed")
		},
		fast: true,
		sets: func(_ context.Context, _ *ent.Voucher, now time.Time) ([]assignment, error) {
			return redeemSets(dialect, r, now)
		},
	}
}

// redeemSets are the columns of a redeem, in RedeemStatement's order.
func redeemSets(dialect string, r *redemption, now time.Time) ([]assignment, error) {
	var vals [5]any
	var err error
	var payeeInfo any
	for i, x := range []any{r.expected, nilIfEmpty(r.networks), nilIfEmpty(r.payments), r.extrasValue()} {
		if vals[i], err = jsonArg(dialect, x); err != nil {
			return nil, err
		}
	}
	if payeeInfo, err = jsonArg(dialect, r.payeeInfo); err != nil {
		return nil, err
	}
	return []assignment{
		{col: "status", lit: "'" + string(entvoucher.StatusREDEEMED) + "'"},
		{col: "type", val: r.typ},
		{col: "expected_payment", val: vals[0]},
		{col: "networks", val: vals[1]},
		{col: "payments", val: vals[2]},
		{col: "extras", val: vals[3]},
		{col: "payee_info", val: payeeInfo},
		{col: "updated_at", val: now},
	}, nil
}

// nilIfEmpty keeps a SIMPLE voucher's CUSTOM columns NULL.
func nilIfEmpty[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

// extrasValue is what the extras column holds: a CUSTOM voucher always has
// a list (possibly empty, so it renders as []); a SIMPLE one has none.
func (r *redemption) extrasValue() any {
	if r.typ != payment.TypeCustom {
		return nil
	}
	if r.extras == nil {
		return []any{}
	}
	return r.extras
}

// Negotiate prices a SIMPLE voucher's expected payment in another currency
// on the same network (payer only). expectedPayment stays as it is; the
// computed suppliedPayment and exchangeRate replace any earlier ones.
func (s *Service) Negotiate(ctx context.Context, id string, in NegotiateInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpNegotiate.operation())
	if err != nil {
		return nil, err
	}
	sup, err := parseSupplied(s.reg, in)
	if err != nil {
		return nil, s.reject(ctx, p, OpNegotiate, id, err)
	}
	dialect := s.db.Dialect
	t := &transition{
		op:         OpNegotiate,
		from:       []entvoucher.Status{entvoucher.StatusREDEEMED},
		wrongState: needsRedeemed,
		stable:     true,
		against: func(v *ent.Voucher) error {
			if v.Type == nil || *v.Type != entvoucher.TypeSIMPLE || v.ExpectedPayment == nil {
				return apperr.New(apperr.NotSimple, "only a SIMPLE voucher can be negotiated")
			}
			if v.ExpectedPayment.Network != sup.Network {
				return apperr.New(apperr.DifferentNetwork, "supplied currency is on a different network than the expected currency")
			}
			return nil
		},
		sets: func(ctx context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error) {
			exp := cur.ExpectedPayment
			q, err := s.fin.Quote(ctx, finance.Payment{
				Network: exp.Network, Currency: exp.Currency, CurrencyAddress: exp.CurrencyAddress,
				Amount: exp.Amount, WalletAddress: exp.Wallet.Address,
			}, sup.Network, sup.Currency)
			if err != nil {
				return nil, err
			}
			supplied := &payment.Payment{
				ID: exp.ID, Network: q.Network, Currency: q.Currency, CurrencyAddress: q.CurrencyAddress,
				Amount: q.Amount, Wallet: sup.Wallet,
			}
			val, err := jsonArg(dialect, supplied)
			if err != nil {
				return nil, err
			}
			return []assignment{
				{col: "supplied_payment", val: val},
				{col: "exchange_rate", val: q.ExchangeRate},
				{col: "updated_at", val: now},
			}, nil
		},
	}
	return s.apply(ctx, p, id, t)
}

// Resolve completes a REDEEMED voucher with the payer's receipts (payer
// only, registered users).
func (s *Service) Resolve(ctx context.Context, id string, in ResolveInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, operation.ResolveVoucher)
	if err != nil {
		return nil, err
	}
	return s.resolve(ctx, p, id, in)
}

// resolve is Resolve for principal p: a registered user, or a checkout's
// customer (SubmitCheckoutPayment).
func (s *Service) resolve(ctx context.Context, p *auth.Principal, id string, in ResolveInput) (*ent.Voucher, error) {
	if err := checkReceiptsShape(in); err != nil {
		return nil, s.reject(ctx, p, OpResolve, id, err)
	}
	dialect := s.db.Dialect
	var rs []payment.Receipt
	t := &transition{
		op:         OpResolve,
		from:       []entvoucher.Status{entvoucher.StatusREDEEMED},
		wrongState: needsRedeemed,
		against: func(v *ent.Voucher) error {
			rs, err := s.receipts(v, in)
			if err != nil || s.settler == nil {
				return err
			}
			_, err = s.settler.Open(v, rs, s.clock())
			return err
		},
		sets: func(_ context.Context, cur *ent.Voucher, now time.Time) ([]assignment, error) {
			var err error
			rs, err = s.receipts(cur, in)
			if err != nil {
				return nil, err
			}
			val, err := jsonArg(dialect, rs)
			if err != nil {
				return nil, err
			}
			sets := []assignment{
				{col: "status", lit: "'" + string(entvoucher.StatusRESOLVED) + "'"},
				{col: "receipts", val: val},
				{col: "live_code", lit: "NULL"},
				{col: "updated_at", val: now},
			}
			if s.settler == nil {
				return sets, nil
			}
			st, err := s.settler.Open(cur, rs, now)
			if err != nil {
				return nil, err
			}
			sval, err := jsonArg(dialect, st)
			if err != nil {
				return nil, err
			}
			var network any
			if st.Verified && !st.Final() {
				network = st.Network
			}
			return append(sets, assignment{col: "settlement", val: sval}, assignment{col: "settlement_network", val: network}), nil
		},
	}
	if s.settler != nil {
		// A verified settlement claims its transactions in the resolving
		// transaction; the claims' unique index is what refuses a
		// transaction another voucher claimed, even in a race.
		t.inTx = s.settler.Verifies
		t.after = func(ctx context.Context, tx *ent.Tx, next *ent.Voucher) error {
			return s.settler.Claim(ctx, tx, next, rs)
		}
	}
	v, err := s.apply(ctx, p, id, t)
	if err == nil && s.settler != nil {
		s.settler.Resolved(v)
	}
	return v, err
}

// receipts holds a resolve body against voucher v: every receipt names v's
// payment, and an amount has no more fraction digits than the token paid in
// (the supplied one when negotiated). It returns the receipts as stored.
func (s *Service) receipts(v *ent.Voucher, in ResolveInput) ([]payment.Receipt, error) {
	var want string
	var decimals int32 = -1 // -1: no token to hold the amount to (CUSTOM)
	switch {
	case v.ExpectedPayment != nil:
		want = v.ExpectedPayment.ID
		paid := v.ExpectedPayment
		if v.SuppliedPayment != nil {
			paid = v.SuppliedPayment
		}
		if tok, ok := s.reg.Token(paid.Network, paid.Currency); ok {
			decimals = tok.Decimals
		}
	case len(v.Payments) > 0:
		want = v.Payments[0].ID
	}
	var val apperr.Validator
	out := make([]payment.Receipt, 0, len(in.Receipts))
	for i, r := range in.Receipts {
		at := fmt.Sprintf("receipts[%d]", i)
		if r.PaymentID != want {
			val.Add(at+".paymentId", "names no payment of this voucher")
		}
		rec := payment.Receipt{PaymentID: r.PaymentID}
		if r.TransactionHash != nil {
			rec.TransactionHash = *r.TransactionHash
		}
		if r.Amount != nil {
			var d decimal.Decimal
			var err error
			if decimals >= 0 {
				d, err = money.Parse(*r.Amount, decimals)
			} else {
				d, err = money.ParseAnyScale(*r.Amount)
			}
			if err != nil {
				val.Add(at+".amount", err.Error())
			} else {
				rec.Amount = money.Format(d)
			}
		}
		out = append(out, rec)
	}
	if err := val.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Discard ends a RESERVED or REDEEMED voucher (payee or payer).
func (s *Service) Discard(ctx context.Context, id string) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, OpDiscard.operation())
	if err != nil {
		return nil, err
	}
	t := &transition{
		op:   OpDiscard,
		from: []entvoucher.Status{entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED},
		wrongState: func(entvoucher.Status) error {
			return apperr.New(apperr.AlreadyResolved, "the voucher is already resolved")
		},
		fast: true,
		sets: func(_ context.Context, _ *ent.Voucher, now time.Time) ([]assignment, error) {
			return []assignment{
				{col: "status", lit: "'" + string(entvoucher.StatusDISCARDED) + "'"},
				{col: "discard_reason", lit: "'" + ReasonDiscarded + "'"},
				{col: "live_code", lit: "NULL"},
				{col: "updated_at", val: now},
			}, nil
		},
	}
	return s.apply(ctx, p, id, t)
}
