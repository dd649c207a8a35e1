package engine

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Get serves GraphQL over GET (queries only) as the GraphQL-over-HTTP spec
// says: parameters query, operationName, variables and extensions in the
// URL; a mutation is 405 with Allow: POST (a link or a prefetch must never
// change anything; the door refuses it with an error its Refusals.Status
// turns into the 405). It replaces gqlgen's transport.GET, which answers
// 200 or 422 and writes "data": null on request errors, which the spec's
// audit (graphql-http) flags.
type Get struct {
	Refusals
}

// Refusals are what the door says of requests that do not run: the code
// of a request that is not GraphQL at all, the HTTP status its errors ask
// for, and who counts them.
type Refusals struct {
	// MalformedCode is extensions.code of a request that is not a GraphQL
	// request (no query, a body or parameter that is not JSON).
	MalformedCode string
	// Status returns the status a request error asks for (0: the spec's,
	// see WriteRequestErrors) and sets any header that goes with it on h.
	// Nil: every error takes the spec's.
	Status func(err error, h http.Header) int
	// Rejected counts a document refused before it ran (nil: not counted).
	Rejected func()
}

func (f Refusals) rejected() {
	if f.Rejected != nil {
		f.Rejected()
	}
}

var _ graphql.Transport = Get{}

// Supports takes a GET that is not a websocket upgrade.
func (Get) Supports(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Upgrade") == ""
}

// Do runs the query in the request's URL (see Get).
func (t Get) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ct := ResponseType(r.Header.Get("Accept"))
	start := graphql.Now()
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		t.WriteMalformed(w, ct, "the query string is malformed")
		return
	}
	params := &graphql.RawParams{
		Query:         q.Get("query"),
		OperationName: q.Get("operationName"),
		Headers:       r.Header,
	}
	if params.Query == "" {
		t.WriteMalformed(w, ct, "the request has no query parameter")
		return
	}
	for _, p := range []struct {
		name string
		into *map[string]any
	}{{"variables", &params.Variables}, {"extensions", &params.Extensions}} {
		if v := q.Get(p.name); v != "" {
			dec := json.NewDecoder(strings.NewReader(v))
			dec.UseNumber()
			if err := dec.Decode(p.into); err != nil {
				t.WriteMalformed(w, ct, "the "+p.name+" parameter is not a JSON object")
				return
			}
		}
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	rc, errs := exec.CreateOperationContext(r.Context(), params)
	if errs != nil {
		t.rejected()
		t.WriteRequestErrors(w, r, exec, rc, errs, ct)
		return
	}
	responses, ctx := exec.DispatchOperation(r.Context(), rc)
	w.Header()["Content-Type"] = ct
	b, err := json.Marshal(responses(ctx))
	if err != nil {
		panic(err)
	}
	_, _ = w.Write(b)
}

// WriteMalformed answers a request that is not a GraphQL request at all
// (no query, a body or parameter that is not JSON): 400 under either media
// type, {"errors": [...]} without data.
func (f Refusals) WriteMalformed(w http.ResponseWriter, ct []string, msg string) {
	w.Header()["Content-Type"] = ct
	w.WriteHeader(http.StatusBadRequest)
	writeErrorsBody(w, gqlerror.List{{Message: msg, Extensions: map[string]any{"code": f.MalformedCode}}}, nil)
}

// WriteRequestErrors answers a GraphQL request that could not start
// executing (a parse or validation error, a variable that does not coerce,
// a limit, an operation on the wrong transport): the errors without a data
// entry, with 400 under application/graphql-response+json and 200 under
// application/json (the spec's rule for legacy clients that look only at
// the body), except where f.Status asks for another (405 and Allow: POST
// for a mutation over GET, whatever the media type; the last error asking
// wins).
func (f Refusals) WriteRequestErrors(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor, rc *graphql.OperationContext, errs gqlerror.List, ct []string) {
	status := http.StatusOK
	if ct[0] == contentTypeGraphQLResponse[0] {
		status = http.StatusBadRequest
	}
	if f.Status != nil {
		for _, e := range errs {
			if s := f.Status(e, w.Header()); s != 0 {
				status = s
			}
		}
	}
	resp := exec.DispatchError(graphql.WithOperationContext(r.Context(), rc), errs)
	w.Header()["Content-Type"] = ct
	w.WriteHeader(status)
	writeErrorsBody(w, resp.Errors, resp.Extensions)
}

func writeErrorsBody(w http.ResponseWriter, errs gqlerror.List, ext map[string]any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{errs, ext})
	_, _ = w.Write(bytes.TrimRight(buf.Bytes(), "\n"))
}
