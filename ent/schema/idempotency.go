package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// IdempotencyKey is one caller's Idempotency-Key on a POST under /api/v1
// (internal/idempotency): the request it was first used with and, once
// that request finished, its answer, kept for 24 hours so a retry replays
// it. Replicas share keys through this table. The rows are written and read
// by hand-written statements (one round trip each); the schema is here so
// migrations know the table.
type IdempotencyKey struct{ ent.Schema }

func (IdempotencyKey) Fields() []ent.Field {
	return []ent.Field{
		// Hex SHA-256 of the caller and the key: fixed length whatever the
		// key, and the associated data the sealed answer is bound to.
		field.String("id").NotEmpty().MaxLen(64).Immutable(),
		// Hex SHA-256 of the request: method, path and query, body.
		field.String("request_hash").MaxLen(64),
		// The answer's HTTP status; 0 while the first request is in flight.
		field.Int("status").Default(0),
		// A random token naming the request that holds the key; finishing
		// or abandoning it is conditional on it, so a request that lost
		// the key (its lease ran out) cannot overwrite its successor's.
		field.String("lease").MaxLen(64),
		// While in flight: when the holder counts as gone (a crashed
		// replica), after which a retry may take the key over.
		field.Time("locked_until").Optional().Nillable(),
		field.String("content_type").Default("").MaxLen(255),
		// The answer's body, sealed with the encryption key
		// (internal/secretbox): answers carry tokens and signing secrets.
		field.Text("body").Optional().Nillable().Sensitive(),
		field.Time("created_at").Default(now).Immutable(),
		field.Time("expires_at"),
	}
}

func (IdempotencyKey) Indexes() []ent.Index {
	return []ent.Index{index.Fields("expires_at")}
}

func (IdempotencyKey) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}
