package webhook

import (
	"context"

	"entgo.io/ent/dialect/sql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/deliveryattempt"
	"github.com/voucherd/voucherd/ent/event"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
)

// DeliveryFilter narrows the delivery log.
type DeliveryFilter struct {
	EndpointID *string
	Status     *string
}

// NewestFirst is the delivery log's order: newest first, ties by id.
// REST lists in it; the GraphQL connection pages in the same.
var NewestFirst = []webhookdelivery.OrderOption{webhookdelivery.ByCreatedAt(sql.OrderDesc()), webhookdelivery.ByID(sql.OrderDesc())}

// ListDeliveries is the one list of the delivery log: the business's
// deliveries matching f, for an ACTIVE member. It is not ordered or paged:
// each door does that (both newest first).
func (s *Service) ListDeliveries(ctx context.Context, businessID string, f DeliveryFilter) (*ent.WebhookDeliveryQuery, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.ListDeliveries, businessID); err != nil {
		return nil, err
	}
	var v apperr.Validator
	q := s.db.WebhookDelivery.Query().Where(webhookdelivery.BusinessID(businessID))
	if f.EndpointID != nil {
		q = q.Where(webhookdelivery.EndpointID(*f.EndpointID))
	}
	if f.Status != nil {
		st := webhookdelivery.Status(*f.Status)
		if v.Check(webhookdelivery.StatusValidator(st) == nil, "status", "must be PENDING, SUCCEEDED or FAILED") {
			q = q.Where(webhookdelivery.StatusEQ(st))
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return q, nil
}

// GetDelivery returns one of the business's deliveries.
func (s *Service) GetDelivery(ctx context.Context, businessID, id string) (*ent.WebhookDelivery, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.GetDelivery, businessID); err != nil {
		return nil, err
	}
	return s.delivery(ctx, businessID, id)
}

func (s *Service) delivery(ctx context.Context, businessID, id string) (*ent.WebhookDelivery, error) {
	d, err := s.db.WebhookDelivery.Query().
		Where(webhookdelivery.ID(id), webhookdelivery.BusinessID(businessID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "webhook delivery not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return d, nil
}

// Attempts returns a delivery's attempts, oldest first. The caller has
// already been shown the delivery.
func (s *Service) Attempts(ctx context.Context, d *ent.WebhookDelivery) ([]*ent.DeliveryAttempt, error) {
	rows, err := s.db.DeliveryAttempt.Query().Where(deliveryattempt.DeliveryID(d.ID)).
		Order(ent.Asc(deliveryattempt.FieldAttemptedAt), ent.Asc(deliveryattempt.FieldID)).All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}

// DeliveryByID returns a delivery to an ACTIVE member of its business
// (node(id:)).
func (s *Service) DeliveryByID(ctx context.Context, id string) (*ent.WebhookDelivery, error) {
	p, err := operation.Caller(ctx, operation.GetDelivery)
	if err != nil {
		return nil, err
	}
	d, err := s.db.WebhookDelivery.Get(ctx, id)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "webhook delivery not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if _, _, err := business.Membership(ctx, s.db.Client, d.BusinessID, p.ID); err != nil {
		return nil, apperr.New(apperr.NotFound, "webhook delivery not found")
	}
	return d, nil
}

// EventByID returns an event to an ACTIVE member of its business
// (node(id:)).
func (s *Service) EventByID(ctx context.Context, id string) (*ent.Event, error) {
	p, err := operation.Caller(ctx, operation.GetDelivery)
	if err != nil {
		return nil, err
	}
	e, err := s.db.Event.Query().Where(event.ID(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "event not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if _, _, err := business.Membership(ctx, s.db.Client, e.BusinessID, p.ID); err != nil {
		return nil, apperr.New(apperr.NotFound, "event not found")
	}
	return e, nil
}

// RetryDelivery makes an attempt of a delivery now, while the caller
// waits, and returns the delivery as that attempt left it. It is allowed
// while the delivery has not SUCCEEDED (not_retryable after); it does not
// cancel the automatic schedule, but a success ends it. The endpoint must
// still exist and be enabled, and the business be ACTIVE.
func (s *Service) RetryDelivery(ctx context.Context, businessID, id string) (*ent.WebhookDelivery, error) {
	b, err := business.Manager(ctx, s.db.Client, operation.RetryDelivery, businessID)
	if err != nil {
		return nil, err
	}
	d, err := s.delivery(ctx, businessID, id)
	if err != nil {
		return nil, err
	}
	if d.Status == webhookdelivery.StatusSUCCEEDED {
		return nil, apperr.New(apperr.NotRetryable, "the delivery has already succeeded")
	}
	if err := business.RequireActive(b); err != nil {
		return nil, err
	}
	ep, err := s.db.WebhookEndpoint.Query().Where(webhookendpoint.ID(d.EndpointID)).Only(withDeleted(ctx))
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	switch {
	case ep.DeletedAt != nil:
		return nil, apperr.New(apperr.NotRetryable, "the endpoint has been deleted")
	case !ep.Enabled:
		return nil, apperr.New(apperr.NotRetryable, "the endpoint is disabled; enable it first")
	}
	if s.dispatcher == nil {
		return nil, apperr.New(apperr.Unavailable, "webhook delivery is not running")
	}
	if err := s.dispatcher.attemptNow(ctx, d.ID); err != nil {
		return nil, apperr.InternalError(err)
	}
	return s.delivery(ctx, businessID, id)
}
