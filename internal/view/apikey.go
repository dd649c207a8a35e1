package view

import (
	"encoding/json"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
)

// APIKey is a business's API key as REST shows it. Key is set only in the
// answer to create-api-key (OfAPIKeyWithKey); revokedAt only on a revoked
// key (the answer to revoke-api-key).
type APIKey struct {
	ID         string        `json:"id"`
	Name       string        `json:"name"`
	Scopes     []string      `json:"scopes"`
	CreatedAt  apitime.Time  `json:"createdAt"`
	LastUsedAt *apitime.Time `json:"lastUsedAt,omitempty"`
	RevokedAt  *apitime.Time `json:"revokedAt,omitempty"`
	Key        string        `json:"key,omitempty"`
}

// OfAPIKey renders a key without its secret.
func OfAPIKey(k *ent.APIKey) *APIKey {
	scopes := k.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return &APIKey{ID: k.ID, Name: k.Name, Scopes: scopes, CreatedAt: apitime.From(k.CreatedAt),
		LastUsedAt: apitime.Ptr(k.LastUsedAt), RevokedAt: apitime.Ptr(k.RevokedAt)}
}

// OfAPIKeyWithKey renders a key with the secret it was just given, which no
// other answer shows.
func OfAPIKeyWithKey(k *ent.APIKey, key string) *APIKey {
	out := OfAPIKey(k)
	out.Key = key
	return out
}

// Event is an entry of a business's event log: data is the bytes the
// webhook carried as its data, unchanged.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt apitime.Time    `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
}

// OfEvent renders a logged event; data is its payload's data member.
func OfEvent(e *ent.Event, data json.RawMessage) *Event {
	return &Event{ID: e.ID, Type: e.Type, CreatedAt: apitime.From(e.CreatedAt), Data: data}
}

// Replay is the answer to replay: how many deliveries it queued.
type Replay struct {
	Queued int `json:"queued"`
}
