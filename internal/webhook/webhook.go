// Package webhook sends businesses signed deposit events and never loses
// one: the Outbox writes events and their deliveries in the transaction of
// the voucher change that causes them, the Dispatcher claims due deliveries
// (FOR UPDATE SKIP LOCKED on PostgreSQL, so replicas share the work without
// doubling it), signs them the Standard Webhooks way and records every
// attempt, and the Service manages endpoints and reads the delivery log for
// both doors.
//
// The package does no HTTP itself: a Transport (internal/webhook/sender in
// production) performs one signed POST through the SSRF guard.
package webhook

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/intercept"
	"github.com/voucherd/voucherd/ent/webhookdelivery"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/webhook/signing"
)

// The event types of the voucher's own lifecycle, which the outbox decides
// (a deposit is created on redeem, expires unpaid). The settlement's events
// (pending, and the verdict: confirmed, underpaid, overpaid, failed) are
// declared by internal/settlement, which decides them; a discard after
// redeem is a failed deposit too.
const (
	DepositCreated = "deposit.created"
	DepositExpired = "deposit.expired"
)

// EventTypes lists every event type an endpoint may subscribe to: the
// spec's fixed list.
var EventTypes = []string{
	DepositCreated, settlement.EventPending, settlement.EventConfirmed, DepositExpired,
	settlement.EventFailed, settlement.EventUnderpaid, settlement.EventOverpaid,
}

// Bounds of endpoint fields (docs/webhooks.md).
const (
	MaxEndpointsPerBusiness = 16
	MaxDescriptionLength    = 512
	// RotationGrace is how long a rotated-out secret keeps signing, so
	// receivers can switch to the new one without dropping deliveries.
	RotationGrace = 24 * time.Hour
)

// Options configure the Service.
type Options struct {
	// Box seals signing secrets at rest.
	Box secretbox.Key
	// AllowPrivate accepts http:// and non-public endpoint URLs (local
	// development and tests only).
	AllowPrivate bool
	// Dispatcher makes manual retry attempts; nil refuses manual retries
	// with an internal error (tests that do not deliver).
	Dispatcher *Dispatcher
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Service manages webhook endpoints and reads the delivery log. Every
// method authorizes the caller: a user token of an ACTIVE member of the
// business reads; OWNER or ADMIN writes.
type Service struct {
	db           *storage.DB
	box          secretbox.Key
	allowPrivate bool
	dispatcher   *Dispatcher
	now          func() time.Time
	log          *slog.Logger
}

// NewService returns the webhook service. It installs the endpoints' read
// model on db's client (deleted endpoints are hidden from every query that
// does not ask for them, the GraphQL Business.webhookEndpoints edge
// included), so build one per client.
func NewService(db *storage.DB, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	db.WebhookEndpoint.Intercept(hideDeleted())
	return &Service{db: db, box: opts.Box, allowPrivate: opts.AllowPrivate, dispatcher: opts.Dispatcher, now: opts.Now, log: opts.Log}
}

type withDeletedKey struct{}

// withDeleted lets a query see tombstoned endpoints (the dispatcher, which
// must tell "deleted" from "never existed").
func withDeleted(ctx context.Context) context.Context {
	return context.WithValue(ctx, withDeletedKey{}, true)
}

// hideDeleted is ent's soft-delete pattern: a deleted endpoint is kept so
// the delivery log stays whole, but no read shows it.
func hideDeleted() ent.Interceptor {
	return intercept.TraverseWebhookEndpoint(func(ctx context.Context, q *ent.WebhookEndpointQuery) error {
		if v, _ := ctx.Value(withDeletedKey{}).(bool); !v {
			q.Where(webhookendpoint.DeletedAtIsNil())
		}
		return nil
	})
}

// EndpointWithSecret is an endpoint with the signing secret it was just
// given: the answer to create-endpoint and rotate-secret, the only time the
// secret is shown (REST renders it with view.OfEndpointWithSecret;
// GraphQL's WebhookEndpointWithSecret binds to it).
type EndpointWithSecret struct {
	*ent.WebhookEndpoint
	SigningSecret string
}

// CreateEndpointInput is the create-endpoint body.
type CreateEndpointInput struct {
	URL         string   `json:"url"`
	Description *string  `json:"description,omitempty"`
	Events      []string `json:"events"`
}

// UpdateEndpointInput is the update-endpoint body; absent (or null) fields
// stay as they are.
type UpdateEndpointInput struct {
	URL         *string  `json:"url,omitempty"`
	Description *string  `json:"description,omitempty"`
	Events      []string `json:"events,omitempty"`
	Enabled     *bool    `json:"enabled,omitempty"`
}

// ListEndpointsInput filters the endpoint list. Since and Until are unix
// milliseconds: endpoints created strictly after Since and strictly before
// Until.
type ListEndpointsInput struct {
	Limit  *int
	Offset *int
	Since  *int64
	Until  *int64
}

func (s *Service) validateURL(v *apperr.Validator, field, raw string) {
	if err := netguard.ValidateURL(raw, s.allowPrivate); err != nil {
		// URLError's reason never echoes the URL.
		v.Add(field, err.Error())
	}
}

func validateDescription(v *apperr.Validator, d string) {
	v.Check(utf8.ValidString(d), "description", "must be valid UTF-8")
	v.Check(utf8.RuneCountInString(d) <= MaxDescriptionLength, "description", "must be at most 512 characters")
}

func validateEvents(v *apperr.Validator, events []string) {
	if len(events) == 0 {
		v.Add("events", "must name at least one event type")
		return
	}
	seen := make(map[string]bool, len(events))
	for _, e := range events {
		switch {
		case !slices.Contains(EventTypes, e):
			v.Add("events", "unknown event type; use one of "+strings.Join(EventTypes, ", "))
			return
		case seen[e]:
			v.Add("events", "must not repeat an event type")
			return
		}
		seen[e] = true
	}
}

// CreateEndpoint registers an endpoint. The signing secret is in the
// answer and nowhere else, ever: it is stored sealed.
func (s *Service) CreateEndpoint(ctx context.Context, businessID string, in CreateEndpointInput) (*EndpointWithSecret, error) {
	if _, err := business.Manager(ctx, s.db.Client, operation.CreateEndpoint, businessID); err != nil {
		return nil, err
	}
	var v apperr.Validator
	if v.Check(in.URL != "", "url", "is required") {
		s.validateURL(&v, "url", in.URL)
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
		validateDescription(&v, desc)
	}
	validateEvents(&v, in.Events)
	if err := v.Err(); err != nil {
		return nil, err
	}
	id := ids.New(ids.WebhookEndpoint)
	secret, sealed, err := s.newSecret(id)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var created *ent.WebhookEndpoint
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		// The business row is the lock that makes the endpoint limit exact
		// under concurrent creates (SQLite transactions are serial already).
		b, err := s.lockBusiness(ctx, tx, businessID)
		if err != nil {
			return err
		}
		if err := business.RequireActive(b); err != nil {
			return err
		}
		n, err := tx.WebhookEndpoint.Query().Where(webhookendpoint.BusinessID(businessID)).Count(ctx)
		if err != nil {
			return err
		}
		if n >= MaxEndpointsPerBusiness {
			return apperr.Newf(apperr.LimitExceeded, "a business may have at most %d webhook endpoints", MaxEndpointsPerBusiness)
		}
		created, err = tx.WebhookEndpoint.Create().
			SetID(id).SetBusinessID(businessID).SetURL(in.URL).SetDescription(desc).
			SetEvents(slices.Clone(in.Events)).SetEnabled(true).SetSecretCiphertext(sealed).
			SetCreatedAt(now).SetUpdatedAt(now).
			Save(ctx)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	s.log.InfoContext(ctx, "webhook endpoint created", "business_id", businessID, "endpoint_id", id)
	return &EndpointWithSecret{WebhookEndpoint: created, SigningSecret: secret}, nil
}

func (s *Service) newSecret(endpointID string) (secret, sealed string, err error) {
	secret, err = signing.NewSecret()
	if err != nil {
		return "", "", apperr.InternalError(err)
	}
	sealed, err = s.box.Seal([]byte(secret), []byte(endpointID))
	if err != nil {
		return "", "", apperr.InternalError(err)
	}
	return secret, sealed, nil
}

func (s *Service) lockBusiness(ctx context.Context, tx *ent.Tx, id string) (*ent.Business, error) {
	q := tx.Business.Query().Where(entbusiness.ID(id))
	if s.db.IsPostgres() {
		q = q.ForUpdate()
	}
	b, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "business not found")
	}
	return b, err
}

// ListEndpoints lists the business's endpoints, oldest first (as the
// business's other lists).
func (s *Service) ListEndpoints(ctx context.Context, businessID string, in ListEndpointsInput) ([]*ent.WebhookEndpoint, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.ListEndpoints, businessID); err != nil {
		return nil, err
	}
	var v apperr.Validator
	limit, offset := pageBounds(&v, in.Limit, in.Offset)
	q := s.db.WebhookEndpoint.Query().Where(webhookendpoint.BusinessID(businessID))
	if in.Since != nil {
		if v.Check(*in.Since >= 0, "since", "must be a non-negative unix time in milliseconds") {
			q = q.Where(webhookendpoint.CreatedAtGT(time.UnixMilli(*in.Since).UTC()))
		}
	}
	if in.Until != nil {
		if v.Check(*in.Until >= 0, "until", "must be a non-negative unix time in milliseconds") {
			q = q.Where(webhookendpoint.CreatedAtLT(time.UnixMilli(*in.Until).UTC()))
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	rows, err := q.Order(ent.Asc(webhookendpoint.FieldCreatedAt), ent.Asc(webhookendpoint.FieldID)).
		Limit(limit).Offset(offset).All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}

// pageBounds checks the webhook lists' limit and offset
// (paging.WebhookRows).
func pageBounds(v *apperr.Validator, limit, offset *int) (int, int) {
	w := paging.WebhookRows.Check(v, limit, offset)
	return w.Limit, w.Offset
}

// GetEndpoint returns one endpoint of the business.
func (s *Service) GetEndpoint(ctx context.Context, businessID, id string) (*ent.WebhookEndpoint, error) {
	if _, _, err := business.Member(ctx, s.db.Client, operation.GetEndpoint, businessID); err != nil {
		return nil, err
	}
	return s.endpoint(ctx, s.db.Client, businessID, id)
}

// EndpointByID returns an endpoint to an ACTIVE member of its business
// (node(id:)); to anyone else it does not exist.
func (s *Service) EndpointByID(ctx context.Context, id string) (*ent.WebhookEndpoint, error) {
	p, err := operation.Caller(ctx, operation.GetEndpoint)
	if err != nil {
		return nil, err
	}
	e, err := s.db.WebhookEndpoint.Query().Where(webhookendpoint.ID(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "webhook endpoint not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if _, _, err := business.Membership(ctx, s.db.Client, e.BusinessID, p.ID); err != nil {
		return nil, apperr.New(apperr.NotFound, "webhook endpoint not found")
	}
	return e, nil
}

// managedEndpoint is endpoint id of businessID for a manager of it
// (business.Manager for op): not_found first, then business_inactive for
// an INACTIVE business.
func (s *Service) managedEndpoint(ctx context.Context, op *operation.Op, businessID, id string) (*ent.WebhookEndpoint, error) {
	b, err := business.Manager(ctx, s.db.Client, op, businessID)
	if err != nil {
		return nil, err
	}
	e, err := s.endpoint(ctx, s.db.Client, businessID, id)
	if err != nil {
		return nil, err
	}
	if err := business.RequireActive(b); err != nil {
		return nil, err
	}
	return e, nil
}

func (s *Service) endpoint(ctx context.Context, c *ent.Client, businessID, id string) (*ent.WebhookEndpoint, error) {
	e, err := c.WebhookEndpoint.Query().
		Where(webhookendpoint.ID(id), webhookendpoint.BusinessID(businessID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "webhook endpoint not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return e, nil
}

// UpdateEndpoint changes an endpoint's url, description, events or enabled
// flag. Disabling stops deliveries at once: nothing new is queued for it and
// queued deliveries end FAILED without an attempt (they can be retried by
// hand once it is enabled again).
func (s *Service) UpdateEndpoint(ctx context.Context, businessID, id string, in UpdateEndpointInput) (*ent.WebhookEndpoint, error) {
	b, err := business.Manager(ctx, s.db.Client, operation.UpdateEndpoint, businessID)
	if err != nil {
		return nil, err
	}
	if _, err := s.endpoint(ctx, s.db.Client, businessID, id); err != nil {
		return nil, err
	}
	var v apperr.Validator
	if in.URL != nil {
		s.validateURL(&v, "url", *in.URL)
	}
	if in.Description != nil {
		validateDescription(&v, *in.Description)
	}
	if in.Events != nil {
		validateEvents(&v, in.Events)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := business.RequireActive(b); err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var e *ent.WebhookEndpoint
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		upd := tx.WebhookEndpoint.UpdateOneID(id).
			Where(webhookendpoint.BusinessID(businessID), webhookendpoint.DeletedAtIsNil()).
			SetUpdatedAt(now)
		if in.URL != nil {
			upd.SetURL(*in.URL)
		}
		if in.Description != nil {
			upd.SetDescription(*in.Description)
		}
		if in.Events != nil {
			upd.SetEvents(slices.Clone(in.Events))
		}
		if in.Enabled != nil {
			upd.SetEnabled(*in.Enabled)
		}
		var err error
		if e, err = upd.Save(ctx); err != nil {
			return err
		}
		if !e.Enabled {
			return cancelQueued(ctx, tx, id, now)
		}
		return nil
	})
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "webhook endpoint not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return e, nil
}

// cancelQueued ends the automatic schedule of an endpoint's queued
// deliveries (FAILED, retryable by hand) when it stops receiving. An
// attempt already in flight still records its outcome.
func cancelQueued(ctx context.Context, tx *ent.Tx, endpointID string, now time.Time) error {
	return tx.WebhookDelivery.Update().
		Where(webhookdelivery.EndpointID(endpointID), webhookdelivery.StatusEQ(webhookdelivery.StatusPENDING)).
		SetStatus(webhookdelivery.StatusFAILED).ClearNextAttemptAt().SetUpdatedAt(now).
		Exec(ctx)
}

// DeleteEndpoint tombstones an endpoint: it disappears from every read and
// receives nothing more, but its deliveries stay in the log.
func (s *Service) DeleteEndpoint(ctx context.Context, businessID, id string) (*ent.WebhookEndpoint, error) {
	e, err := s.managedEndpoint(ctx, operation.DeleteEndpoint, businessID, id)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		n, err := tx.WebhookEndpoint.Update().
			Where(webhookendpoint.ID(id), webhookendpoint.BusinessID(businessID), webhookendpoint.DeletedAtIsNil()).
			SetDeletedAt(now).SetEnabled(false).SetUpdatedAt(now).
			Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 { // deleted meanwhile
			return apperr.New(apperr.NotFound, "webhook endpoint not found")
		}
		return cancelQueued(ctx, tx, id, now)
	})
	if err != nil {
		return nil, wrap(err)
	}
	s.log.InfoContext(ctx, "webhook endpoint deleted", "business_id", businessID, "endpoint_id", id)
	e.Enabled, e.DeletedAt = false, &now
	return e, nil
}

// RotateSecret gives the endpoint a new signing secret, returned once. The
// previous secret keeps signing (a second signature in the header) for
// RotationGrace; rotating again within the grace drops the oldest.
func (s *Service) RotateSecret(ctx context.Context, businessID, id string) (*EndpointWithSecret, error) {
	e, err := s.managedEndpoint(ctx, operation.RotateSecret, businessID, id)
	if err != nil {
		return nil, err
	}
	secret, sealed, err := s.newSecret(id)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		// Locked so two concurrent rotations chain (the second demotes the
		// first's new secret) instead of both demoting the same one.
		q := tx.WebhookEndpoint.Query().Where(webhookendpoint.ID(id))
		if s.db.IsPostgres() {
			q = q.ForUpdate()
		}
		cur, err := q.Only(ctx)
		if ent.IsNotFound(err) {
			return apperr.New(apperr.NotFound, "webhook endpoint not found")
		}
		if err != nil {
			return err
		}
		// The sealed current secret moves as is: it is bound to the
		// endpoint id, which does not change.
		return tx.WebhookEndpoint.UpdateOne(cur).
			SetSecretCiphertext(sealed).
			SetPreviousSecretCiphertext(cur.SecretCiphertext).
			SetPreviousSecretExpiresAt(now.Add(RotationGrace)).
			SetUpdatedAt(now).
			Exec(ctx)
	})
	if err != nil {
		return nil, wrap(err)
	}
	s.log.InfoContext(ctx, "webhook signing secret rotated", "business_id", businessID, "endpoint_id", id)
	return &EndpointWithSecret{WebhookEndpoint: e, SigningSecret: secret}, nil
}

// wrap keeps an *apperr.Error as is and makes anything else internal.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	return apperr.From(err)
}
