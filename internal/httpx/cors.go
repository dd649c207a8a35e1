package httpx

import (
	"net/http"
	"strings"

	"github.com/rs/cors"
)

// The browser contract (docs/api.md, "Browsers: CORS"): what a page on a
// listed origin may send and read.
var (
	// CORSAllowedHeaders are the request headers a cross-origin page may
	// send beyond the CORS-safelisted ones.
	CORSAllowedHeaders = []string{"Authorization", "Content-Type", "Idempotency-Key", "X-Client-Secret", "X-Request-Id"}
	// CORSExposedHeaders are the response headers such a page may read
	// (Idempotent-Replayed tells a retrying page its answer is a replay).
	CORSExposedHeaders = []string{"Idempotent-Replayed", "RateLimit", "RateLimit-Policy", "Retry-After", "X-Request-Id"}
	// CORSAllowedMethods are the methods the API serves.
	CORSAllowedMethods = []string{http.MethodGet, http.MethodPost}
)

// CORSMaxAge is how long (seconds) a browser may cache a preflight answer.
const CORSMaxAge = 600

// CORS answers cross-origin requests from the configured origins on the API
// paths (/api/v1/..., /graphql and below). It is github.com/rs/cors with the
// contract above: a preflight from a listed origin gets 204 with
// Access-Control-Allow-Origin (that origin), -Methods, -Headers and
// -Max-Age; an answer to a listed origin exposes the rate-limit headers and
// the request id. Any other origin gets no CORS header at all, so the browser
// keeps the answer from the page. No credentials: callers authenticate with
// bearer tokens or client secrets, never cookies.
type CORS struct {
	origins map[string]bool
	c       *cors.Cors
}

// NewCORS allows the given origins (already normalised, see
// config.ParseOrigins). With none, it adds nothing and answers no preflight.
func NewCORS(origins []string) *CORS {
	c := &CORS{origins: map[string]bool{}}
	for _, o := range origins {
		c.origins[strings.ToLower(o)] = true
	}
	if len(c.origins) > 0 {
		c.c = cors.New(cors.Options{
			AllowedOrigins:       origins,
			AllowedMethods:       CORSAllowedMethods,
			AllowedHeaders:       CORSAllowedHeaders,
			ExposedHeaders:       CORSExposedHeaders,
			MaxAge:               CORSMaxAge,
			OptionsSuccessStatus: http.StatusNoContent,
		})
	}
	return c
}

// Enabled reports whether any origin is allowed.
func (c *CORS) Enabled() bool { return c != nil && len(c.origins) > 0 }

// Wrap applies the policy to the API paths of h; other paths (health,
// metrics, the GraphiQL page, the hosted checkout page) are not for
// cross-origin scripts and pass through untouched.
func (c *CORS) Wrap(h http.Handler) http.Handler {
	if !c.Enabled() {
		return h
	}
	api := c.c.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if CORSPath(r.URL.Path) {
			api.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// CORSPath reports whether path is one the CORS policy covers.
func CORSPath(path string) bool {
	return path == "/api/v1" || strings.HasPrefix(path, "/api/v1/") ||
		path == "/graphql" || strings.HasPrefix(path, "/graphql/")
}

// CheckOrigin is the websocket upgrade's origin check: a request without
// Origin (not a browser) or from the server's own origin passes; with a
// list configured, any other origin must be on it. With no list, the
// upgrade accepts any origin as it always did: tokens, not cookies,
// authenticate a socket, so a foreign page gains nothing from one.
func (c *CORS) CheckOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !c.Enabled() {
		return true
	}
	o := strings.ToLower(origin)
	if c.origins[o] {
		return true
	}
	// Same origin (e.g. the development GraphiQL page): compare the host
	// the browser connected to.
	if i := strings.Index(o, "://"); i >= 0 && strings.EqualFold(o[i+3:], r.Host) {
		return true
	}
	return false
}
