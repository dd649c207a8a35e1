package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/payment"
)

// Widget lets a business take payments from its own customers: its server
// holds the client secret and creates checkouts (internal/widget).
type Widget struct{ ent.Schema }

func (Widget) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.Widget}, timeMixin{}}
}

func (Widget) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable().Annotations(entgql.MapsTo("businessId")),
		// The service bounds it to 128 characters; MaxLen counts bytes.
		field.String("name").NotEmpty().MaxLen(4 * 128).Annotations(entgql.OrderField("NAME")),
		field.Enum("status").Values("ACTIVE", "INACTIVE").Default("ACTIVE"),
		// text on PostgreSQL for the reason WebhookEndpoint.events gives.
		field.JSON("accepts", []payment.Accept{}).
			SchemaType(map[string]string{dialect.Postgres: "text"}).
			Annotations(entgql.Type("[WidgetAccept!]"), entgql.Skip(entgql.SkipWhereInput)),
		field.JSON("wallets", []payment.NetworkWallet{}).
			SchemaType(map[string]string{dialect.Postgres: "text"}).
			Annotations(entgql.Type("[WidgetWallet!]"), entgql.Skip(entgql.SkipWhereInput)),
		// SHA-256 of the client secret (hex); the secret itself is never
		// stored. Unique: a secret names its widget.
		field.String("secret_hash").Sensitive().Unique().Annotations(entgql.Skip()),
		// The widget's checkout context: every checkout voucher belongs to
		// this voucher session, which is never live (no code to reserve on).
		field.String("session_id").Immutable().Annotations(entgql.Skip()),
	}
}

func (Widget) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("business", Business.Type).Ref("widgets").Field("business_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
	}
}

func (Widget) Indexes() []ent.Index {
	return []ent.Index{index.Fields("business_id", "created_at")}
}

func (Widget) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
