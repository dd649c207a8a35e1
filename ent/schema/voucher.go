package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
)

// VoucherSession is a payer's context: the 6-character code a payee signs in with.
type VoucherSession struct{ ent.Schema }

func (VoucherSession) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.Session}, timeMixin{}}
}

func (VoucherSession) Fields() []ent.Field {
	return []ent.Field{
		field.String("code").MaxLen(6).Immutable(),
		// live_code repeats code while the session is usable and is cleared
		// when it closes or expires: a unique index on it keeps codes unique
		// among live sessions on every database, with no partial index.
		field.String("live_code").MaxLen(6).Optional().Nillable().Unique().Annotations(entgql.Skip()),
		// owner_id is the payer: a usr_ or dev_ id.
		field.String("owner_id").Immutable().Annotations(entgql.Skip()),
		field.Enum("status").Values("ACTIVE", "CLOSED", "EXPIRED").Default("ACTIVE"),
		field.Time("expires_at"),
		field.Time("closed_at").Optional().Nillable(),
	}
}

func (VoucherSession) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("vouchers", Voucher.Type).Annotations(entgql.Skip()),
	}
}

func (VoucherSession) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("owner_id", "created_at"),
		index.Fields("code"),
		index.Fields("expires_at"),
	}
}

func (VoucherSession) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// Voucher is one payment request between a payee and a payer.
type Voucher struct{ ent.Schema }

func (Voucher) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.Voucher}, timeMixin{}}
}

func (Voucher) Fields() []ent.Field {
	return []ent.Field{
		field.String("code").MaxLen(6).Immutable(),
		// Set while the voucher is RESERVED or REDEEMED; unique among those.
		field.String("live_code").MaxLen(6).Optional().Nillable().Unique().Annotations(entgql.Skip()),
		field.Enum("status").
			Values("RESERVED", "REDEEMED", "RESOLVED", "DISCARDED").
			Default("RESERVED").
			Annotations(entgql.OrderField("STATUS")),
		field.Enum("type").Values(payment.TypeSimple, payment.TypeCustom).Optional().Nillable(),
		// version increases by one with every change; clients order updates by it.
		field.Int("version").Default(1),
		field.String("session_id").Immutable().Annotations(entgql.MapsTo("sessionId")),
		// payer_id owns the session (usr_ or dev_); payee_id reserved the
		// voucher (ses_ for a resource token, else usr_ or dev_).
		field.String("payer_id").Immutable().Annotations(entgql.Skip()),
		field.String("payee_id").Immutable().Annotations(entgql.Skip()),
		field.String("business_id").Optional().Nillable().Immutable().Annotations(entgql.MapsTo("businessId")),
		field.JSON("expected_payment", &payment.Payment{}).Optional().
			Annotations(entgql.Type("Payment"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("supplied_payment", &payment.Payment{}).Optional().
			Annotations(entgql.Type("Payment"), entgql.Skip(entgql.SkipWhereInput)),
		field.String("exchange_rate").Optional().Nillable().
			Annotations(entgql.Type("Decimal"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("networks", []payment.Network{}).Optional().
			Annotations(entgql.Type("[Network!]"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("payments", []payment.CustomPayment{}).Optional().
			Annotations(entgql.Type("[CustomPayment!]"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("extras", []payment.Extra{}).Optional().
			Annotations(entgql.Type("[JSON!]"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("payee_info", payment.PayeeInfo{}).Optional().
			Annotations(entgql.Type("JSON"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("receipts", []payment.Receipt{}).Optional().
			Annotations(entgql.Type("[Receipt!]"), entgql.Skip(entgql.SkipWhereInput)),
		field.String("discard_reason").Optional().Nillable(),
		// A checkout (internal/widget) is a business voucher made by a
		// widget: widget_id names it, reference is the merchant's order id,
		// and checkout_token_hash (SHA-256, hex) is the hash of the
		// capability its hosted page and the customer hold.
		field.String("widget_id").Optional().Nillable().Immutable().Annotations(entgql.MapsTo("widgetId")),
		field.String("reference").Optional().Nillable().Immutable().MaxLen(4 * 128),
		field.String("checkout_token_hash").Optional().Nillable().Immutable().Unique().Sensitive().Annotations(entgql.Skip()),
		field.Time("expires_at").Annotations(entgql.OrderField("EXPIRES_AT")),
		// settlement is what the chain showed about the payment of a
		// resolved voucher (internal/settlement moves it); NULL before
		// resolve and for vouchers resolved before settlement existed.
		field.JSON("settlement", &payment.Settlement{}).Optional().
			Annotations(entgql.Type("Settlement"), entgql.Skip(entgql.SkipWhereInput)),
		// settlement_network names the network while the settlement is
		// PENDING on a verified network, and is NULL otherwise: the
		// settlement watcher's work list is an index range on it.
		field.String("settlement_network").Optional().Nillable().Annotations(entgql.Skip()),
		// deposit is a checkout's deposit address, its payout wallet and
		// its sweep (payment.Deposit); NULL for every other voucher.
		field.JSON("deposit", &payment.Deposit{}).Optional().
			Annotations(entgql.Type("Deposit"), entgql.Skip(entgql.SkipWhereInput)),
		// watch_network names the network of a checkout with a deposit
		// address for as long as the watcher looks for payments to it
		// (until expires_at + the settlement window, whatever the
		// voucher's status): the detection work list is an index range on
		// (watch_network, expires_at).
		field.String("watch_network").Optional().Nillable().Immutable().Annotations(entgql.Skip()),
		// sweep_network names the network while a checkout's deposit
		// address has funds the service still has to sweep (a verdict, or a
		// later payment, not yet flushed): the sweeper's work list.
		field.String("sweep_network").Optional().Nillable().Annotations(entgql.Skip()),
		// solana_pay_reference is a Solana checkout's Solana Pay reference
		// (the base58 public key of a fresh key pair; nothing secret): its
		// paymentUri carries it, the payer's wallet adds it to the
		// transfer, and the settlement watcher finds the payment by it.
		// NULL for every other voucher.
		field.String("solana_pay_reference").Optional().Nillable().Immutable().Unique().MaxLen(44).
			Annotations(entgql.Skip(entgql.SkipWhereInput)),
	}
}

func (Voucher) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("session", VoucherSession.Type).Ref("vouchers").Field("session_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
		edge.From("business", Business.Type).Ref("vouchers").Field("business_id").
			Unique().Immutable().Annotations(entgql.Skip()),
	}
}

func (Voucher) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("code"),
		index.Fields("session_id", "created_at"),
		index.Fields("payer_id", "created_at"),
		index.Fields("payee_id", "created_at"),
		index.Fields("business_id", "created_at"),
		// The sweeper finds live vouchers past their expiry.
		index.Fields("status", "expires_at"),
		// The settlement watcher finds the vouchers pending on a network.
		index.Fields("settlement_network"),
		// The watcher finds the deposit addresses it watches on a network.
		index.Fields("watch_network", "expires_at"),
		// The sweeper finds the deposit addresses it has to flush.
		index.Fields("sweep_network"),
	}
}

// SettlementClaim records that a voucher's receipt claimed a transaction:
// the unique index on (network, transaction_hash) lets one transaction pay
// one voucher at most, on every database.
type SettlementClaim struct{ ent.Schema }

func (SettlementClaim) Fields() []ent.Field {
	return []ent.Field{
		field.String("network").NotEmpty().Immutable(),
		// transaction_hash is canonical: lower-case hex for evm, the
		// base58 signature as given for solana.
		field.String("transaction_hash").NotEmpty().Immutable(),
		field.String("voucher_id").NotEmpty().Immutable(),
		field.Time("created_at").Default(now).Immutable(),
	}
}

func (SettlementClaim) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("network", "transaction_hash").Unique(),
		index.Fields("voucher_id"),
	}
}

func (SettlementClaim) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}

func (Voucher) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// InteropSubmission is a payer's signature for one payment of a voucher
// needing signatures on several networks (interop-init).
type InteropSubmission struct{ ent.Schema }

func (InteropSubmission) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.InteropSubmission}}
}

func (InteropSubmission) Fields() []ent.Field {
	return []ent.Field{
		// submission_id is the caller's id (the route's ?id=).
		field.String("submission_id").NotEmpty().MaxLen(128).Immutable(),
		field.String("voucher_id").Immutable(),
		field.String("caller_id").Immutable(),
		field.Int("payment_index").Default(0).Immutable(),
		field.String("signature").Optional().Nillable().MaxLen(256).Immutable(),
		field.Time("created_at").Default(now).Immutable(),
	}
}

func (InteropSubmission) Indexes() []ent.Index {
	return []ent.Index{index.Fields("voucher_id", "submission_id").Unique()}
}

func (InteropSubmission) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}

// DetectionCursor is how far a network's detection has scanned (the last
// block or slot whose payments to watched addresses are recorded): a
// restart, or another replica taking the network's poll over, scans on
// from there, so a payment made while the service was down is still found.
type DetectionCursor struct{ ent.Schema }

func (DetectionCursor) Fields() []ent.Field {
	return []ent.Field{
		// id is the finance file's network name.
		field.String("id").NotEmpty().Immutable(),
		field.Int64("height").NonNegative(),
		field.Time("updated_at"),
	}
}

func (DetectionCursor) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}
