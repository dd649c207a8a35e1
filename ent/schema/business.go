package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/internal/ids"
)

// Business groups member users; its vouchers are deposits.
type Business struct{ ent.Schema }

func (Business) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.Business}, timeMixin{}}
}

func (Business) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").NotEmpty().MaxLen(512).Annotations(entgql.OrderField("NAME")),
		field.Enum("status").Values("ACTIVE", "INACTIVE").Default("ACTIVE"),
	}
}

func (Business) Edges() []ent.Edge {
	return []ent.Edge{
		// members gets a resolver of its own (not ent's generated method)
		// so the business service checks membership on every path to it.
		edge.To("members", BusinessUser.Type).Annotations(entgql.RelayConnection(), forceResolver()),
		edge.To("webhook_endpoints", WebhookEndpoint.Type).Annotations(entgql.RelayConnection()),
		edge.To("widgets", Widget.Type).Annotations(entgql.RelayConnection()),
		edge.To("vouchers", Voucher.Type).Annotations(entgql.Skip()),
		edge.To("api_keys", APIKey.Type).Annotations(entgql.Skip()),
	}
}

func (Business) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// forceResolver makes gqlgen call a hand-written resolver for a field
// instead of binding ent's generated method.
func forceResolver() entgql.Annotation {
	return entgql.Directives(entgql.NewDirective("goField",
		&ast.Argument{Name: "forceResolver", Value: &ast.Value{Kind: ast.BooleanValue, Raw: "true"}}))
}

// BusinessUser is a user's membership in a business.
type BusinessUser struct{ ent.Schema }

func (BusinessUser) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.BusinessUser}, timeMixin{}}
}

func (BusinessUser) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable().Annotations(entgql.MapsTo("businessId")),
		field.String("user_id").Immutable().Annotations(entgql.MapsTo("userId")),
		field.Enum("role").Values("OWNER", "ADMIN", "MEMBER").Annotations(entgql.OrderField("ROLE")),
		field.Enum("status").Values("ACTIVE", "INACTIVE").Default("ACTIVE"),
	}
}

func (BusinessUser) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("business", Business.Type).Ref("members").Field("business_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
		edge.From("user", User.Type).Ref("memberships").Field("user_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
	}
}

func (BusinessUser) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("business_id", "user_id").Unique(),
		index.Fields("user_id", "status"),
	}
}

func (BusinessUser) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
