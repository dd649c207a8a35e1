package engine

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
)

// Post serves GraphQL over POST with a JSON body. It is gqlgen's
// transport.POST with the common case made lean, because the GraphQL door
// pays gqlgen's per-request costs on top of REST's for the same read
// (docs/performance.md): it decodes the bytes the door already read
// (NewReadBody; gqlgen reads the body again into a new buffer), with
// decodeParams rather than encoding/json when the door checked them, sets its
// one header without building header maps, and writes a response that
// holds only data as {"data":...} around the bytes the executor produced
// (gqlgen passes them through json.Marshal, which validates, compacts and
// copies them once more). A request that cannot run is answered as the
// GraphQL-over-HTTP spec says (Refusals.WriteRequestErrors, WriteMalformed).
type Post struct {
	Refusals
	gqlgen transport.POST // only its Supports: a POST with a JSON body
}

var _ graphql.Transport = Post{}

// Supports is gqlgen's: a POST with a JSON body, not an upgrade. The
// common Content-Type, exactly application/json, is recognised without
// gqlgen's mime.ParseMediaType (which builds a parameter map per call).
func (t Post) Supports(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if ct := r.Header["Content-Type"]; len(ct) > 0 && ct[0] == "application/json" && r.Header.Get("Upgrade") == "" {
		return true
	}
	return t.gqlgen.Supports(r)
}

// Response media types, as gqlgen names them; each header value is shared
// by every response (net/http only reads it).
var (
	contentTypeJSON            = []string{"application/json"}
	contentTypeGraphQLResponse = []string{"application/graphql-response+json"}
)

// Do runs the request's operation (see Post).
func (t Post) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ct := ResponseType(r.Header.Get("Accept"))
	body, ok := r.Body.(*readBody)
	if !ok {
		t.WriteMalformed(w, ct, "the request has no body: POST a JSON object with query, variables, operationName")
		return
	}
	start := graphql.Now()
	params := &graphql.RawParams{}
	if !body.checked || !decodeParams(body.b, params) {
		dec := json.NewDecoder(bytes.NewReader(body.b))
		dec.UseNumber()
		if err := dec.Decode(params); err != nil {
			t.WriteMalformed(w, ct, NotGraphQLRequest)
			return
		}
	}
	if params.Query == "" {
		t.WriteMalformed(w, ct, "the request has no query")
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	ctx := r.Context()
	rc, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		t.rejected()
		t.WriteRequestErrors(w, r, exec, rc, errs, ct)
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, rc)
	resp := responses(ctx)
	w.Header()["Content-Type"] = ct
	if len(resp.Errors) > 0 || len(resp.Extensions) > 0 || resp.Label != "" || resp.Path != nil || resp.HasNext != nil {
		b, err := json.Marshal(resp)
		if err != nil {
			panic(err) // as gqlgen: the executor produced invalid JSON
		}
		_, _ = w.Write(b)
		return
	}
	data := []byte(resp.Data)
	if data == nil {
		data = []byte("null")
	}
	_, _ = io.WriteString(w, `{"data":`)
	_, _ = w.Write(data)
	_, _ = io.WriteString(w, "}")
}

// NotGraphQLRequest is what a body that is not a GraphQL request is told.
const NotGraphQLRequest = "the request body is not a valid GraphQL request (JSON with query, variables, operationName)"

// ResponseType is the Content-Type gqlgen's POST answers an Accept header
// with: the first of application/json, application/graphql-response+json
// or a wildcard it names (a wildcard, or no header, meaning
// application/json); application/graphql-response+json when it names
// none of them.
func ResponseType(accept string) []string {
	if accept == "" || accept == "application/json" {
		return contentTypeJSON
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "*/*", "application/*", "application/json":
			return contentTypeJSON
		case "application/graphql-response+json":
			return contentTypeGraphQLResponse
		}
	}
	return contentTypeGraphQLResponse
}

// readBody is a request body the door has read whole: b, read again
// through the embedded reader by whoever reads the request body. checked
// says httpx.CheckJSON accepted b (decodeParams may read it).
type readBody struct {
	bytes.Reader // held, not pointed to: one allocation per body
	b            []byte
	checked      bool
}

// NewReadBody is a request body holding b, which the door has read whole:
// Post decodes b itself instead of reading the body again. checked says
// httpx.CheckJSON accepted b.
func NewReadBody(b []byte, checked bool) io.ReadCloser {
	rb := &readBody{b: b, checked: checked}
	rb.Reset(b)
	return rb
}

func (*readBody) Close() error { return nil }
