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

// WebhookEndpoint is a business's URL for signed deposit events.
type WebhookEndpoint struct{ ent.Schema }

func (WebhookEndpoint) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.WebhookEndpoint}, timeMixin{}}
}

func (WebhookEndpoint) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable().Annotations(entgql.Skip()),
		field.String("url").MaxLen(2048),
		// The service bounds it to 512 characters; MaxLen counts bytes, and
		// a character takes up to 4.
		field.String("description").Default("").MaxLen(4 * 512),
		// text on PostgreSQL: with lib/pq's binary_parameters, ent's JSON
		// bytes reach the server in binary form, which jsonb reads as its
		// versioned binary encoding and refuses (json would take them, but
		// has no equality operator for ent's SELECT DISTINCT). Nothing
		// queries inside the list.
		field.Strings("events").SchemaType(map[string]string{dialect.Postgres: "text"}),
		field.Bool("enabled").Default(true),
		// The signing secret, sealed with the encryption key (internal/secretbox).
		field.String("secret_ciphertext").Sensitive().Annotations(entgql.Skip()),
		// During a rotation's grace the previous secret still signs.
		field.String("previous_secret_ciphertext").Optional().Nillable().Sensitive().Annotations(entgql.Skip()),
		field.Time("previous_secret_expires_at").Optional().Nillable().Annotations(entgql.Skip()),
		// Deleted endpoints are kept (tombstoned) so the delivery log stays whole.
		field.Time("deleted_at").Optional().Nillable().Annotations(entgql.Skip()),
	}
}

func (WebhookEndpoint) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("business", Business.Type).Ref("webhook_endpoints").Field("business_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
		edge.To("deliveries", WebhookDelivery.Type).Annotations(entgql.Skip()),
	}
}

func (WebhookEndpoint) Indexes() []ent.Index {
	return []ent.Index{index.Fields("business_id", "created_at")}
}

func (WebhookEndpoint) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// Event is a deposit event in the transactional outbox: written in the same
// transaction as the voucher change that causes it, with its payload
// serialized once.
type Event struct{ ent.Schema }

func (Event) Mixin() []ent.Mixin { return []ent.Mixin{idMixin{prefix: ids.Event}} }

func (Event) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable().Annotations(entgql.MapsTo("businessId")),
		field.String("voucher_id").Immutable().Annotations(entgql.MapsTo("voucherId")),
		field.Int("voucher_version").Immutable(),
		field.String("type").Immutable(),
		field.Bytes("payload").Immutable().Annotations(entgql.Skip()),
		field.Time("created_at").Default(now).Immutable().Annotations(entgql.OrderField("CREATED_AT")),
	}
}

func (Event) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("deliveries", WebhookDelivery.Type).Annotations(entgql.Skip()),
	}
}

func (Event) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("business_id", "created_at"),
		index.Fields("voucher_id"),
		// The sweeper prunes events past the log's retention by age.
		index.Fields("created_at"),
	}
}

func (Event) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// WebhookDelivery is one event's delivery to one endpoint.
type WebhookDelivery struct{ ent.Schema }

func (WebhookDelivery) Mixin() []ent.Mixin {
	return []ent.Mixin{idMixin{prefix: ids.Delivery}, timeMixin{}}
}

func (WebhookDelivery) Fields() []ent.Field {
	return []ent.Field{
		field.String("business_id").Immutable().Annotations(entgql.Skip()),
		field.String("endpoint_id").Immutable().Annotations(entgql.MapsTo("endpointId")),
		field.String("event_id").Immutable().Annotations(entgql.MapsTo("eventId")),
		field.String("event_type").Immutable(),
		field.Enum("status").Values("PENDING", "SUCCEEDED", "FAILED").Default("PENDING"),
		field.Int("attempts").Default(0),
		// Automatic attempts made so far (the first try plus retries).
		field.Int("auto_attempts").Default(0).Annotations(entgql.Skip()),
		field.Time("last_attempt_at").Optional().Nillable(),
		field.Int("last_response_status").Optional().Nillable(),
		// When the next automatic attempt is due; nil once the schedule ends.
		field.Time("next_attempt_at").Optional().Nillable(),
		// A worker's claim on an attempt in flight; an expired lease is
		// claimable again, so a crash mid-attempt loses nothing.
		field.Time("leased_until").Optional().Nillable().Annotations(entgql.Skip()),
	}
}

func (WebhookDelivery) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("endpoint", WebhookEndpoint.Type).Ref("deliveries").Field("endpoint_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
		edge.From("event", Event.Type).Ref("deliveries").Field("event_id").
			Unique().Required().Immutable().Annotations(entgql.Skip()),
		edge.To("attempt_log", DeliveryAttempt.Type).Annotations(entgql.Skip()),
	}
}

func (WebhookDelivery) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("status", "next_attempt_at"),
		index.Fields("business_id", "created_at"),
		index.Fields("endpoint_id", "created_at"),
		// Not unique: a replay queues an event again to an endpoint that
		// had it (receivers deduplicate on the event id).
		index.Fields("event_id", "endpoint_id"),
	}
}

func (WebhookDelivery) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}

// DeliveryAttempt records one HTTP attempt of a delivery.
type DeliveryAttempt struct{ ent.Schema }

func (DeliveryAttempt) Mixin() []ent.Mixin { return []ent.Mixin{idMixin{prefix: ids.DeliveryAttempt}} }

func (DeliveryAttempt) Fields() []ent.Field {
	return []ent.Field{
		field.String("delivery_id").Immutable().Annotations(entgql.MapsTo("deliveryId")),
		field.Bool("manual").Default(false).Immutable(),
		field.Time("attempted_at").Immutable(),
		field.Int("duration_ms").Immutable(),
		field.Int("response_status").Optional().Nillable().Immutable(),
		field.String("error").Optional().Nillable().MaxLen(1024).Immutable(),
	}
}

func (DeliveryAttempt) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("delivery", WebhookDelivery.Type).Ref("attempt_log").Field("delivery_id").
			Unique().Required().Immutable(),
	}
}

func (DeliveryAttempt) Indexes() []ent.Index {
	return []ent.Index{index.Fields("delivery_id", "attempted_at")}
}

func (DeliveryAttempt) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.Skip(entgql.SkipWhereInput, entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
