package voucher

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/jsonx"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/storage"
)

// The transitions are written by hand rather than with ent's update
// builder: each must be exactly one conditional statement whose WHERE holds
// the caller's role, the starting state and the expiry, and whose RETURNING
// hands back the new row, so the winner of a race learns it won and the
// losers change nothing.

// columns are the vouchers columns every hand-written statement returns,
// in the order scanVoucher reads them.
var columns = []string{
	entvoucher.FieldID, entvoucher.FieldCreatedAt, entvoucher.FieldUpdatedAt, entvoucher.FieldCode,
	entvoucher.FieldLiveCode, entvoucher.FieldStatus, entvoucher.FieldType, entvoucher.FieldVersion,
	entvoucher.FieldSessionID, entvoucher.FieldPayerID, entvoucher.FieldPayeeID, entvoucher.FieldBusinessID,
	entvoucher.FieldExpectedPayment, entvoucher.FieldSuppliedPayment, entvoucher.FieldExchangeRate,
	entvoucher.FieldNetworks, entvoucher.FieldPayments, entvoucher.FieldExtras, entvoucher.FieldPayeeInfo,
	entvoucher.FieldReceipts, entvoucher.FieldDiscardReason, entvoucher.FieldExpiresAt,
	entvoucher.FieldSettlement, entvoucher.FieldSettlementNetwork,
	entvoucher.FieldWidgetID, entvoucher.FieldReference, entvoucher.FieldDeposit, entvoucher.FieldSolanaPayReference,
}

var columnList = strings.Join(columns, ", ")

// querier is what a statement runs on: the pool or an ent transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// assignment is one "column = ?" of a SET clause (a nil value writes
// NULL), or "column = lit" for a constant of the statement's own text.
type assignment struct {
	col string
	val any
	lit string
}

// statement is a transition's conditional UPDATE.
type statement struct {
	sets []assignment
	// where holds extra conditions (each with its own ? args) after the id.
	where []string
	args  []any
}

// build renders the statement for dialect: one UPDATE ... RETURNING the
// new row. It does not notify other replicas: the change commits alone
// (so concurrent transitions share WAL flushes) and the service publishes
// it after commit, which on PostgreSQL includes pubsub.Notifier's
// notification to every replica (why it is not in the statement: see
// there).
func (st statement) build(dialect string) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, len(st.sets)+len(st.args))
	b.WriteString("UPDATE vouchers SET ")
	for i, a := range st.sets {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.col)
		if a.lit != "" {
			b.WriteString(" = " + a.lit)
			continue
		}
		b.WriteString(" = ?")
		args = append(args, a.val)
	}
	b.WriteString(", version = version + 1")
	if len(st.where) > 0 {
		b.WriteString(" WHERE ")
		b.WriteString(strings.Join(st.where, " AND "))
	}
	args = append(args, st.args...)
	return returning(dialect, b.String()), args
}

// returning adds RETURNING the voucher's columns to a data-changing
// statement on vouchers.
func returning(dialect, stmt string) string {
	return rebind(dialect, stmt+" RETURNING "+columnList)
}

// rebind is storage.DB.Rebind for a dialect, so statement texts can be
// built (and exported) without a connection.
func rebind(dialect, q string) string {
	if dialect != storage.Postgres {
		return q
	}
	b := make([]byte, 0, len(q)+16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b = strconv.AppendInt(append(b, '$'), int64(n), 10)
			continue
		}
		b = append(b, q[i])
	}
	return string(b)
}

// selectStatement loads one voucher; lock takes the row lock on PostgreSQL
// (an immediate SQLite transaction already holds the database's write lock).
// The texts are built once: this is every read's and transition's path.
func selectStatement(dialect string, lock bool) string {
	if dialect == storage.Postgres {
		if lock {
			return selectPGLock
		}
		return selectPG
	}
	return selectOther
}

var (
	selectOther  = "SELECT " + columnList + " FROM vouchers WHERE id = ?"
	selectPG     = rebind(storage.Postgres, selectOther)
	selectPGLock = selectPG + " FOR UPDATE"
)

// queryVouchers runs q and scans every returned voucher.
func queryVouchers(ctx context.Context, db querier, dialect, q string, args ...any) ([]*ent.Voucher, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*ent.Voucher
	for rows.Next() {
		v, err := scanVoucher(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryVoucher is queryVouchers for at most one row; nil when none.
func queryVoucher(ctx context.Context, db querier, dialect, q string, args ...any) (*ent.Voucher, error) {
	vs, err := queryVouchers(ctx, db, dialect, q, args...)
	if err != nil || len(vs) == 0 {
		return nil, err
	}
	return vs[0], nil
}

// voucherRow holds what a voucher row is scanned into before it becomes
// an *ent.Voucher: the columns that need converting (nullable text, the
// state, the version) and the JSON columns, read as sql.RawBytes (the
// driver's bytes, not a copy) because they are decoded into the voucher's
// own values before the row is left. payeeInfo is kept as it is stored,
// so it is copied. Rows are pooled with their destinations, so scanning
// allocates the voucher and what it keeps, not the scaffolding.
type voucherRow struct {
	status                              string
	liveCode, typ, businessID, exchange sql.NullString
	discardReason, widgetID, reference  sql.NullString
	settlementNetwork, solanaPayRef     sql.NullString
	version                             int64
	expected, supplied, networks        sql.RawBytes
	payments, extras, recpts            sql.RawBytes
	settlement, deposit                 sql.RawBytes
	payeeInfo                           []byte
	createdAt, updatedAt, expiresAt     time.Time
	dest                                []any
}

var voucherRows = sync.Pool{New: func() any {
	r := &voucherRow{}
	r.dest = []any{
		nil, timeCol{&r.createdAt}, timeCol{&r.updatedAt}, nil,
		&r.liveCode, &r.status, &r.typ, &r.version,
		nil, nil, nil, &r.businessID,
		&r.expected, &r.supplied, &r.exchange,
		&r.networks, &r.payments, &r.extras, &r.payeeInfo,
		&r.recpts, &r.discardReason, timeCol{&r.expiresAt},
		&r.settlement, &r.settlementNetwork,
		&r.widgetID, &r.reference, &r.deposit, &r.solanaPayRef,
	}
	return r
}}

func scanVoucher(rows *sql.Rows) (*ent.Voucher, error) {
	r := voucherRows.Get().(*voucherRow)
	defer func() {
		dest := r.dest
		dest[0], dest[3], dest[8], dest[9], dest[10] = nil, nil, nil, nil, nil
		*r = voucherRow{dest: dest}
		voucherRows.Put(r)
	}()
	v := &ent.Voucher{}
	// The columns scanned straight into the voucher (its strings).
	r.dest[0], r.dest[3], r.dest[8], r.dest[9], r.dest[10] = &v.ID, &v.Code, &v.SessionID, &v.PayerID, &v.PayeeID
	if err := rows.Scan(r.dest...); err != nil {
		return nil, fmt.Errorf("voucher: scan: %w", err)
	}
	v.CreatedAt, v.UpdatedAt, v.ExpiresAt = r.createdAt, r.updatedAt, r.expiresAt
	v.Status = entvoucher.Status(r.status)
	v.Version = int(r.version)
	v.LiveCode = nullString(r.liveCode)
	v.BusinessID = nullString(r.businessID)
	v.ExchangeRate = nullString(r.exchange)
	v.DiscardReason = nullString(r.discardReason)
	v.SettlementNetwork = nullString(r.settlementNetwork)
	v.WidgetID = nullString(r.widgetID)
	v.Reference = nullString(r.reference)
	v.SolanaPayReference = nullString(r.solanaPayRef)
	if r.typ.Valid {
		t := entvoucher.Type(r.typ.String)
		v.Type = &t
	}
	for _, j := range [...]struct {
		src []byte
		dst any
	}{
		{r.expected, &v.ExpectedPayment}, {r.supplied, &v.SuppliedPayment}, {r.networks, &v.Networks},
		{r.payments, &v.Payments}, {r.extras, &v.Extras}, {r.recpts, &v.Receipts}, {r.settlement, &v.Settlement},
		{r.deposit, &v.Deposit},
	} {
		if err := unmarshalCol(j.src, j.dst); err != nil {
			return nil, err
		}
	}
	if len(r.payeeInfo) > 0 && string(r.payeeInfo) != "null" {
		v.PayeeInfo = json.RawMessage(r.payeeInfo)
	}
	compactOpaque(v)
	return v, nil
}

func unmarshalCol(src []byte, dst any) error {
	if len(src) == 0 || string(src) == "null" {
		return nil
	}
	if err := jsonx.Unmarshal(src, dst); err != nil {
		return fmt.Errorf("voucher: decode stored JSON: %w", err)
	}
	return nil
}

func nullString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	v := s.String
	return &v
}

// timeCol scans a timestamp whichever way the driver returns it: time.Time
// (lib/pq, and modernc for declared datetime columns) or text.
type timeCol struct{ t *time.Time }

var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999",
}

func (c timeCol) Scan(src any) error {
	var s string
	switch v := src.(type) {
	case time.Time:
		*c.t = v.UTC()
		return nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Errorf("voucher: cannot scan %T as a time", src)
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			*c.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("voucher: unparsable time %q", s)
}

// jsonArg encodes a JSON column's value: nil stays NULL. PostgreSQL gets
// text, because lib/pq sends []byte parameters in binary form, which jsonb
// would read as its versioned binary format; SQLite gets bytes, as ent
// writes them.
func jsonArg(dialect string, v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case *payment.Payment:
		if x == nil {
			return nil, nil
		}
	case *payment.Settlement:
		if x == nil {
			return nil, nil
		}
	case json.RawMessage:
		if x == nil {
			return nil, nil
		}
	}
	b, err := jsonx.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("voucher: encode JSON column: %w", err)
	}
	if dialect == storage.Postgres {
		return string(b), nil
	}
	return b, nil
}

// status literals for statements (enum values, never user input).
func quoteStatus(ss ...entvoucher.Status) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + string(s) + "'"
	}
	if len(q) == 1 {
		return "status = " + q[0]
	}
	return "status IN (" + strings.Join(q, ", ") + ")"
}

// RedeemStatement is the exact statement a redeem runs on its hot path (a
// voucher without a business), for benchmarks that must measure the very
// same SQL. Parameters, in order:
//
//	1 type ("SIMPLE" or "CUSTOM")   2 expected_payment (JSON text or NULL)
//	3 networks (JSON or NULL)        4 payments (JSON or NULL)
//	5 extras (JSON or NULL)          6 payee_info (JSON or NULL)
//	7 updated_at (now)               8 voucher id
//	9 payee id (the caller)         10 now (the expiry check)
//
// It returns the voucher's columns (see the package's columns list). No
// row means the redeem
// did not happen (wrong caller, state, expiry, or a business voucher, which
// takes the transactional path).
func RedeemStatement(dialect string) string {
	r := &redemption{typ: payment.TypeSimple}
	sets, _ := redeemSets(dialect, r, time.Time{})
	q, _ := transitionStatement(dialect, redeemTransition(dialect, r), "", "", sets, time.Time{}, modeFast, 0)
	return q
}

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
