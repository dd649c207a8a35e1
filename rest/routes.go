package rest

import (
	_ "embed"
	"net/http"

	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
)

// Route is one /api/v1 route as registered: what the OpenAPI document is
// generated from and checked against (rest/openapi.yaml, rest/openapi).
type Route struct {
	Method string
	// Path is the OpenAPI path: the pattern's path without a trailing {$}.
	Path string
	// Pattern is the ServeMux pattern.
	Pattern string
	// Group is the rate-limit group ("" for none).
	Group string
	// Token is the guard: "none", "any", "registered" or "user".
	Token string
}

// Routes lists every route Register adds, in registration order.
func Routes() []Route {
	s := &server{mux: http.NewServeMux()}
	s.routes()
	return s.table
}

// guardName names a guard for Routes; an unknown guard panics at start, so
// a new guard cannot slip into the document unnamed.
func guardName(g auth.Guard) string {
	switch g {
	case auth.GuardOpen:
		return "none"
	case auth.GuardAny:
		return "any"
	case auth.GuardRegistered:
		return "registered"
	case auth.GuardUser:
		return "user"
	case auth.GuardWidgetClient:
		return "widget-client"
	}
	panic("rest: guard " + g.String() + " has no name in the OpenAPI route table")
}

// openapiJSON is the committed OpenAPI document (generated from
// openapi.yaml and the route table by `make generate`).
//
//go:embed openapi.json
var openapiJSON []byte

// OpenAPI returns the OpenAPI document served at /api/v1/openapi.json.
func OpenAPI() []byte { return openapiJSON }

func (s *server) openAPI(w http.ResponseWriter, r *http.Request) error {
	httpx.WriteRawJSON(w, http.StatusOK, openapiJSON)
	return nil
}
