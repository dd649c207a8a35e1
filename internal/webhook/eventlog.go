package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/deliveryattempt"
	entevent "github.com/voucherd/voucherd/ent/event"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/operation"
)

// The event log: every deposit event the outbox wrote, kept EventRetention
// (the sweeper prunes older ones with their deliveries), listed oldest
// first, and replayable to an endpoint.
const (
	EventRetention = 30 * 24 * time.Hour
	// MaxReplay bounds the events one replay call queues.
	MaxReplay = 10000
	// pruneBatch is how many events one prune statement removes.
	pruneBatch = 500
)

// ListEventsInput filters the event log. Since and Until are unix
// milliseconds: events created strictly after Since and strictly before
// Until (as the endpoint list takes them).
type ListEventsInput struct {
	Type   *string
	Since  *int64
	Until  *int64
	Limit  *int
	Offset *int
}

// eventsQuery is the business's event log as a query, oldest first, after
// the caller (an ACTIVE member, or a key of the business) and the filter
// were checked.
func (s *Service) eventsQuery(ctx context.Context, businessID string, in ListEventsInput) (*ent.EventQuery, int, int, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.ListEvents, businessID); err != nil {
		return nil, 0, 0, err
	}
	var v apperr.Validator
	limit, offset := pageBounds(&v, in.Limit, in.Offset)
	q := s.db.Event.Query().Where(entevent.BusinessID(businessID))
	if in.Type != nil {
		if v.Check(slices.Contains(EventTypes, *in.Type), "type", "must be one of the event types") {
			q = q.Where(entevent.Type(*in.Type))
		}
	}
	if in.Since != nil {
		if v.Check(*in.Since >= 0, "since", "must be a non-negative unix time in milliseconds") {
			q = q.Where(entevent.CreatedAtGT(time.UnixMilli(*in.Since).UTC()))
		}
	}
	if in.Until != nil {
		if v.Check(*in.Until >= 0, "until", "must be a non-negative unix time in milliseconds") {
			q = q.Where(entevent.CreatedAtLT(time.UnixMilli(*in.Until).UTC()))
		}
	}
	if err := v.Err(); err != nil {
		return nil, 0, 0, err
	}
	return q.Order(ent.Asc(entevent.FieldCreatedAt), ent.Asc(entevent.FieldID)), limit, offset, nil
}

// ListEvents lists the business's event log, oldest first.
func (s *Service) ListEvents(ctx context.Context, businessID string, in ListEventsInput) ([]*ent.Event, error) {
	q, limit, offset, err := s.eventsQuery(ctx, businessID, in)
	if err != nil {
		return nil, err
	}
	rows, err := q.Limit(limit).Offset(offset).All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}

// EventData is an event's data as its webhook carried it: the bytes of the
// stored payload's "data" member, unchanged.
func EventData(e *ent.Event) (json.RawMessage, error) {
	var p struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil || len(p.Data) == 0 {
		return nil, apperr.InternalError(fmt.Errorf("webhook: event %s has no readable data: %v", e.ID, err))
	}
	// The payload was written compact; keep it so, whatever the decoder did.
	return bytes.Clone(p.Data), nil
}

// ReplayInput is the replay body: the window (unix milliseconds, since
// required, until optional) and, optionally, which of the endpoint's event
// types to send.
type ReplayInput struct {
	Since *int64   `json:"since"`
	Until *int64   `json:"until,omitempty"`
	Types []string `json:"types,omitempty"`
}

// Validate checks the body's own shape.
func (in ReplayInput) Validate() error {
	var v apperr.Validator
	if v.Check(in.Since != nil, "since", "is required") {
		v.Check(*in.Since >= 0, "since", "must be a non-negative unix time in milliseconds")
	}
	if in.Until != nil && v.Check(*in.Until >= 0, "until", "must be a non-negative unix time in milliseconds") && in.Since != nil {
		v.Check(*in.Until > *in.Since, "until", "must be after since")
	}
	if in.Types != nil {
		v.Check(len(in.Types) > 0, "types", "must name at least one event type when given")
		seen := map[string]bool{}
		for i, t := range in.Types {
			f := fmt.Sprintf("types[%d]", i)
			switch {
			case !slices.Contains(EventTypes, t):
				v.Add(f, "must be one of the event types")
			case seen[t]:
				v.Add(f, "is repeated")
			}
			seen[t] = true
		}
	}
	return v.Err()
}

// Replay queues a new delivery to the endpoint of every logged event in the
// window that the endpoint subscribes to (and that types names, when
// given), oldest first: the same event, so the same webhook-id and body,
// signed with the endpoint's secret when each attempt is made, retried and
// logged as any delivery. OWNER or ADMIN of an ACTIVE business; the
// endpoint must be enabled. More than MaxReplay matching events is
// validation_failed (narrow the window). It returns how many it queued.
func (s *Service) Replay(ctx context.Context, businessID, endpointID string, in ReplayInput) (int, error) {
	b, err := business.Manager(ctx, s.db.Client, operation.Replay, businessID)
	if err != nil {
		return 0, err
	}
	ep, err := s.endpoint(ctx, s.db.Client, businessID, endpointID)
	if err != nil {
		return 0, err
	}
	if err := in.Validate(); err != nil {
		return 0, err
	}
	if err := business.RequireActive(b); err != nil {
		return 0, err
	}
	if !ep.Enabled {
		return 0, apperr.New(apperr.NotRetryable, "the endpoint is disabled; enable it first")
	}
	types := ep.Events
	if in.Types != nil {
		types = slices.DeleteFunc(slices.Clone(in.Types), func(t string) bool { return !slices.Contains(ep.Events, t) })
	}
	if len(types) == 0 {
		return 0, nil
	}
	q := s.db.Event.Query().Where(entevent.BusinessID(businessID), entevent.TypeIn(types...),
		entevent.CreatedAtGT(time.UnixMilli(*in.Since).UTC()))
	if in.Until != nil {
		q = q.Where(entevent.CreatedAtLT(time.UnixMilli(*in.Until).UTC()))
	}
	var events []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	err = q.Order(ent.Asc(entevent.FieldCreatedAt), ent.Asc(entevent.FieldID)).Limit(MaxReplay+1).
		Select(entevent.FieldID, entevent.FieldType).Scan(ctx, &events)
	if err != nil {
		return 0, apperr.InternalError(err)
	}
	if len(events) > MaxReplay {
		return 0, apperr.Invalid("since", fmt.Sprintf("the window holds more than %d events; replay it in parts", MaxReplay))
	}
	if len(events) == 0 {
		return 0, nil
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		// The endpoint must still be there and enabled when the rows land.
		ok, err := tx.WebhookEndpoint.Query().Where(webhookendpoint.ID(ep.ID), webhookendpoint.Enabled(true)).Exist(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return apperr.New(apperr.NotRetryable, "the endpoint is disabled; enable it first")
		}
		// One statement for the whole replay: the rows travel as one JSON
		// parameter (ent's bulk create would take a statement per few
		// hundred rows, with 14 parameters a row).
		type row struct {
			ID    string `json:"id"`
			Event string `json:"e"`
			Type  string `json:"t"`
		}
		rows := make([]row, len(events))
		for i, e := range events {
			rows[i] = row{ID: ids.New(ids.Delivery), Event: e.ID, Type: e.Type}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		from := `(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.e') AS e, json_extract(value, '$.t') AS t FROM json_each(?)) x`
		if s.db.IsPostgres() {
			from = `json_to_recordset(?::json) AS x(id text, e text, t text)`
		}
		_, err = tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO webhook_deliveries
  (id, created_at, updated_at, business_id, event_type, status, attempts, auto_attempts, next_attempt_at, event_id, endpoint_id)
  SELECT x.id, ?, ?, ?, x.t, 'PENDING', 0, 0, ?, x.e, ? FROM `+from), now, now, businessID, now, ep.ID, string(b))
		if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, apperr.From(err)
	}
	if s.dispatcher != nil {
		s.dispatcher.Wake()
	}
	return len(events), nil
}

// PruneEvents deletes the events older than EventRetention, with their
// deliveries and the deliveries' attempts, a batch at a time; it returns
// how many events it removed. The sweeper runs it.
func (s *Service) PruneEvents(ctx context.Context) (int, error) {
	cutoff := s.now().UTC().Add(-EventRetention)
	total := 0
	for {
		old, err := s.db.Event.Query().Where(entevent.CreatedAtLT(cutoff)).
			Order(ent.Asc(entevent.FieldCreatedAt)).Limit(pruneBatch).IDs(ctx)
		if err != nil {
			return total, fmt.Errorf("webhook: prune events: %w", err)
		}
		if len(old) == 0 {
			return total, nil
		}
		err = s.db.Tx(ctx, func(tx *ent.Tx) error {
			if _, err := tx.DeliveryAttempt.Delete().
				Where(deliveryattempt.HasDeliveryWith(webhookdelivery.EventIDIn(old...))).Exec(ctx); err != nil {
				return err
			}
			if _, err := tx.WebhookDelivery.Delete().Where(webhookdelivery.EventIDIn(old...)).Exec(ctx); err != nil {
				return err
			}
			_, err := tx.Event.Delete().Where(entevent.IDIn(old...)).Exec(ctx)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("webhook: prune events: %w", err)
		}
		total += len(old)
		if len(old) < pruneBatch {
			return total, nil
		}
	}
}
