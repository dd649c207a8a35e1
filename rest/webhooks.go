package rest

import (
	"net/http"
	"strconv"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/webhook"
)

// webhookRoutes are the endpoint and delivery routes (guards and rate
// groups: internal/operation).
func (s *server) webhookRoutes() {
	s.route(operation.CreateEndpoint, s.createEndpoint)
	s.route(operation.ListEndpoints, s.listEndpoints)
	s.route(operation.GetEndpoint, s.getEndpoint)
	s.route(operation.UpdateEndpoint, s.updateEndpoint)
	s.route(operation.DeleteEndpoint, s.deleteEndpoint)
	s.route(operation.RotateSecret, s.rotateSecret)
	s.route(operation.ListDeliveries, s.listDeliveries)
	s.route(operation.GetDelivery, s.getDelivery)
	s.route(operation.RetryDelivery, s.retryDelivery)
}

func (s *server) createEndpoint(w http.ResponseWriter, r *http.Request) error {
	var in webhook.CreateEndpointInput
	if err := decode(r, &in); err != nil {
		return err
	}
	e, err := s.Webhooks.CreateEndpoint(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfEndpointWithSecret(e.WebhookEndpoint, e.SigningSecret))
}

func (s *server) listEndpoints(w http.ResponseWriter, r *http.Request) error {
	var in webhook.ListEndpointsInput
	var v apperr.Validator
	in.Limit = queryIntParam(&v, r, "limit")
	in.Offset = queryIntParam(&v, r, "offset")
	in.Since = queryInt64Param(&v, r, "since")
	in.Until = queryInt64Param(&v, r, "until")
	if err := v.Err(); err != nil {
		return err
	}
	rows, err := s.Webhooks.ListEndpoints(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.List(rows, view.OfEndpoint))
}

func (s *server) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	e, err := s.Webhooks.GetEndpoint(r.Context(), r.PathValue("businessId"), r.PathValue("endpointId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfEndpoint(e))
}

func (s *server) updateEndpoint(w http.ResponseWriter, r *http.Request) error {
	var in webhook.UpdateEndpointInput
	if err := decode(r, &in); err != nil {
		return err
	}
	e, err := s.Webhooks.UpdateEndpoint(r.Context(), r.PathValue("businessId"), r.PathValue("endpointId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfEndpoint(e))
}

func (s *server) deleteEndpoint(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	if _, err := s.Webhooks.DeleteEndpoint(r.Context(), r.PathValue("businessId"), r.PathValue("endpointId")); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}

func (s *server) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	e, err := s.Webhooks.RotateSecret(r.Context(), r.PathValue("businessId"), r.PathValue("endpointId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfEndpointWithSecret(e.WebhookEndpoint, e.SigningSecret))
}

func (s *server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	var f webhook.DeliveryFilter
	var v apperr.Validator
	limit := queryIntParam(&v, r, "limit")
	offset := queryIntParam(&v, r, "offset")
	if q := r.URL.Query(); q.Has("endpointId") {
		id := q.Get("endpointId")
		f.EndpointID = &id
	}
	if q := r.URL.Query(); q.Has("status") {
		st := q.Get("status")
		f.Status = &st
	}
	if err := v.Err(); err != nil {
		return err
	}
	list, err := s.Webhooks.ListDeliveries(r.Context(), r.PathValue("businessId"), f)
	if err != nil {
		return err
	}
	page := paging.WebhookRows.Check(&v, limit, offset)
	if err := v.Err(); err != nil {
		return err
	}
	rows, err := paging.Rows(r.Context(), list.Order(webhook.NewestFirst...), page)
	if err != nil {
		return err
	}
	return ok(w, view.List(rows, view.OfDelivery))
}

func (s *server) getDelivery(w http.ResponseWriter, r *http.Request) error {
	d, err := s.Webhooks.GetDelivery(r.Context(), r.PathValue("businessId"), r.PathValue("deliveryId"))
	if err != nil {
		return err
	}
	attempts, err := s.Webhooks.Attempts(r.Context(), d)
	if err != nil {
		return err
	}
	return ok(w, view.OfDeliveryWithLog(d, attempts))
}

func (s *server) retryDelivery(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	if _, err := s.Webhooks.RetryDelivery(r.Context(), r.PathValue("businessId"), r.PathValue("deliveryId")); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}

// queryIntParam reads an optional integer query parameter; a malformed one
// is recorded in v.
func queryIntParam(v *apperr.Validator, r *http.Request, name string) *int {
	q := r.URL.Query()
	if !q.Has(name) {
		return nil
	}
	n, err := strconv.Atoi(q.Get(name))
	if !v.Check(err == nil, name, "must be an integer") {
		return nil
	}
	return &n
}

// queryInt64Param is queryIntParam for 64-bit values (unix milliseconds).
func queryInt64Param(v *apperr.Validator, r *http.Request, name string) *int64 {
	q := r.URL.Query()
	if !q.Has(name) {
		return nil
	}
	n, err := strconv.ParseInt(q.Get(name), 10, 64)
	if !v.Check(err == nil, name, "must be an integer") {
		return nil
	}
	return &n
}
