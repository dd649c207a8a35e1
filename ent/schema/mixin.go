// Package schema is the service's data model. Ids are prefixed strings
// (internal/ids); money lives in decimal strings; every lookup the services
// make has an index here.
package schema

import (
	"time"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"

	"github.com/voucherd/voucherd/internal/ids"
)

// idMixin gives an entity a prefixed, time-ordered string id.
type idMixin struct {
	mixin.Schema
	prefix string
}

func (m idMixin) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").
			DefaultFunc(ids.Generator(m.prefix)).
			NotEmpty().
			MaxLen(64).
			Immutable(),
	}
}

// timeMixin records creation and last change. Times are stored in UTC.
type timeMixin struct{ mixin.Schema }

func now() time.Time { return time.Now().UTC() }

func (timeMixin) Fields() []ent.Field {
	return []ent.Field{
		field.Time("created_at").
			Default(now).
			Immutable().
			Annotations(entgql.OrderField("CREATED_AT")),
		field.Time("updated_at").
			Default(now).
			UpdateDefault(now).
			Annotations(entgql.OrderField("UPDATED_AT")),
	}
}
