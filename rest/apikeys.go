package rest

import (
	"net/http"

	"github.com/voucherd/voucherd/internal/apikey"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/webhook"
)

// apiKeyRoutes are a business's API key routes, and the event log's: the
// listing and the replay to an endpoint.
func (s *server) apiKeyRoutes() {
	s.route(operation.CreateAPIKey, s.createAPIKey)
	s.route(operation.ListAPIKeys, s.listAPIKeys)
	s.route(operation.RevokeAPIKey, s.revokeAPIKey)
}

func (s *server) eventRoutes() {
	s.route(operation.ListEvents, s.listEvents)
	s.route(operation.Replay, s.replay)
}

func (s *server) createAPIKey(w http.ResponseWriter, r *http.Request) error {
	var in apikey.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	k, err := s.APIKeys.Create(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfAPIKeyWithKey(k.APIKey, k.Key))
}

func (s *server) listAPIKeys(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.APIKeys.List(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	return ok(w, view.List(rows, view.OfAPIKey))
}

func (s *server) revokeAPIKey(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	k, err := s.APIKeys.Revoke(r.Context(), r.PathValue("businessId"), r.PathValue("keyId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfAPIKey(k))
}

func (s *server) listEvents(w http.ResponseWriter, r *http.Request) error {
	var in webhook.ListEventsInput
	var v apperr.Validator
	in.Limit = queryIntParam(&v, r, "limit")
	in.Offset = queryIntParam(&v, r, "offset")
	in.Since = queryInt64Param(&v, r, "since")
	in.Until = queryInt64Param(&v, r, "until")
	if q := r.URL.Query(); q.Has("type") {
		t := q.Get("type")
		in.Type = &t
	}
	if err := v.Err(); err != nil {
		return err
	}
	rows, err := s.Webhooks.ListEvents(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	out := make([]*view.Event, len(rows))
	for i, e := range rows {
		data, err := webhook.EventData(e)
		if err != nil {
			return err
		}
		out[i] = view.OfEvent(e, data)
	}
	return ok(w, out)
}

func (s *server) replay(w http.ResponseWriter, r *http.Request) error {
	var in webhook.ReplayInput
	if err := decode(r, &in); err != nil {
		return err
	}
	n, err := s.Webhooks.Replay(r.Context(), r.PathValue("businessId"), r.PathValue("endpointId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.Replay{Queued: n})
}
