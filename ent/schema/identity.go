package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/voucherd/voucherd/internal/ids"
)

// User is an email-password account.
type User struct{ ent.Schema }

func (User) Mixin() []ent.Mixin { return []ent.Mixin{idMixin{prefix: ids.User}, timeMixin{}} }

func (User) Fields() []ent.Field {
	return []ent.Field{
		// Stored lower-cased; unique.
		field.String("email").MaxLen(512).Unique().NotEmpty(),
		field.String("password_hash").Sensitive().Annotations(entgql.Skip()),
	}
}

func (User) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("memberships", BusinessUser.Type).Annotations(entgql.Skip()),
	}
}

func (User) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput)}
}

// Device is a mobile device (a payer's wallet) registered with an installation id.
type Device struct{ ent.Schema }

func (Device) Mixin() []ent.Mixin { return []ent.Mixin{idMixin{prefix: ids.Device}, timeMixin{}} }

func (Device) Fields() []ent.Field {
	return []ent.Field{
		field.String("installation_id").MaxLen(512).Unique().NotEmpty().Annotations(entgql.Skip()),
		field.String("password_hash").Sensitive().Annotations(entgql.Skip()),
	}
}

func (Device) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput)}
}

// Setting is a small key-value store for values the service generates once
// and replicas share (the development JWT key and encryption key).
type Setting struct{ ent.Schema }

func (Setting) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").NotEmpty().MaxLen(64).Immutable(),
		field.String("value").Sensitive(),
		field.Time("created_at").Default(now).Immutable(),
	}
}

func (Setting) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}

// RateLimitBucket is one caller's counter for one rate-limit group and
// window; PostgreSQL replicas share budgets through it.
type RateLimitBucket struct{ ent.Schema }

func (RateLimitBucket) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").NotEmpty().MaxLen(256).Immutable(),
		field.Time("window_start"),
		field.Int("count").Default(0),
		field.Time("expires_at"),
	}
}

func (RateLimitBucket) Indexes() []ent.Index {
	return []ent.Index{index.Fields("expires_at")}
}

func (RateLimitBucket) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip()}
}
