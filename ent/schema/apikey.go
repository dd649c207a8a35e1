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
)

// APIKey is a business's credential for its own server (internal/apikey):
// a name, the scopes it grants, and the SHA-256 of the key, which is shown
// once at creation and never stored. The GraphQL type is written by hand
// (graph/schema/apikey.graphql): no key is a Relay node.
type APIKey struct{ ent.Schema }

func (APIKey) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.APIKey}}
}

func (APIKey) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable(),
		// The service bounds it to 128 characters; MaxLen counts bytes.
		field.String("name").NotEmpty().MaxLen(4 * 128),
		// text on PostgreSQL for the reason WebhookEndpoint.events gives.
		field.Strings("scopes").SchemaType(map[string]string{dialect.Postgres: "text"}),
		// SHA-256 of the key (hex). Unique: a key names its row.
		field.String("key_hash").Sensitive().Unique().Immutable(),
		// The member who created it.
		field.String("created_by").Immutable(),
		field.Time("created_at").Default(now).Immutable(),
		// Written at most once a minute, however often the key is used.
		field.Time("last_used_at").Optional().Nillable(),
		// A revoked key is kept (it stays in no list and opens nothing).
		field.Time("revoked_at").Optional().Nillable(),
	}
}

func (APIKey) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("business", Business.Type).Ref("api_keys").Field("business_id").
			Unique().Required().Immutable(),
	}
}

func (APIKey) Indexes() []ent.Index {
	return []ent.Index{index.Fields("business_id", "created_at")}
}

func (APIKey) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
