package view

import (
	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
)

// Endpoint is a webhook endpoint as REST shows it. SigningSecret is set
// only in the answers to create-endpoint and rotate-secret
// (OfEndpointWithSecret).
type Endpoint struct {
	ID            string       `json:"id"`
	URL           string       `json:"url"`
	Description   string       `json:"description"`
	Events        []string     `json:"events"`
	Enabled       bool         `json:"enabled"`
	CreatedAt     apitime.Time `json:"createdAt"`
	SigningSecret string       `json:"signingSecret,omitempty"`
}

// OfEndpoint renders an endpoint without its secret.
func OfEndpoint(e *ent.WebhookEndpoint) *Endpoint {
	events := e.Events
	if events == nil {
		events = []string{}
	}
	return &Endpoint{ID: e.ID, URL: e.URL, Description: e.Description, Events: events, Enabled: e.Enabled, CreatedAt: apitime.From(e.CreatedAt)}
}

// OfEndpointWithSecret renders an endpoint with the signing secret it was
// just given, which no other answer shows.
func OfEndpointWithSecret(e *ent.WebhookEndpoint, secret string) *Endpoint {
	out := OfEndpoint(e)
	out.SigningSecret = secret
	return out
}

// Delivery is a webhook delivery as the delivery list shows it.
type Delivery struct {
	ID                 string        `json:"id"`
	EndpointID         string        `json:"endpointId"`
	EventID            string        `json:"eventId"`
	EventType          string        `json:"eventType"`
	Status             string        `json:"status"`
	Attempts           int           `json:"attempts"`
	LastAttemptAt      *apitime.Time `json:"lastAttemptAt,omitempty"`
	LastResponseStatus *int          `json:"lastResponseStatus,omitempty"`
	NextAttemptAt      *apitime.Time `json:"nextAttemptAt,omitempty"`
	CreatedAt          apitime.Time  `json:"createdAt"`
}

// DeliveryWithLog is a delivery as get-delivery shows it: with every
// attempt made, oldest first (an empty list before the first).
type DeliveryWithLog struct {
	*Delivery
	AttemptLog []*Attempt `json:"attemptLog"`
}

// Attempt is one recorded delivery attempt.
type Attempt struct {
	ID             string       `json:"id"`
	Manual         bool         `json:"manual"`
	AttemptedAt    apitime.Time `json:"attemptedAt"`
	DurationMs     int          `json:"durationMs"`
	ResponseStatus *int         `json:"responseStatus,omitempty"`
	Error          *string      `json:"error,omitempty"`
}

// OfDelivery renders a delivery without its attempts.
func OfDelivery(d *ent.WebhookDelivery) *Delivery {
	return &Delivery{
		ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, EventType: d.EventType,
		Status: string(d.Status), Attempts: d.Attempts,
		LastAttemptAt: apitime.Ptr(d.LastAttemptAt), LastResponseStatus: d.LastResponseStatus,
		NextAttemptAt: apitime.Ptr(d.NextAttemptAt), CreatedAt: apitime.From(d.CreatedAt),
	}
}

// OfDeliveryWithLog renders a delivery with its attempts.
func OfDeliveryWithLog(d *ent.WebhookDelivery, attempts []*ent.DeliveryAttempt) DeliveryWithLog {
	log := make([]*Attempt, len(attempts))
	for i, a := range attempts {
		log[i] = &Attempt{ID: a.ID, Manual: a.Manual, AttemptedAt: apitime.From(a.AttemptedAt),
			DurationMs: a.DurationMs, ResponseStatus: a.ResponseStatus, Error: a.Error}
	}
	return DeliveryWithLog{Delivery: OfDelivery(d), AttemptLog: log}
}
