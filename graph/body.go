package graph

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/httpx"
)

type methodKey struct{}

// limitBody enforces the 1 MiB body limit with the REST door's status
// (413 payload_too_large), also for bodies sent without a length; refuses
// a body or URL breaking the text rules (NUL, invalid UTF-8, a repeated
// JSON key: 400 validation_failed, charged as a refused document); gives
// the request its time budget; and notes the request method for
// transportRules (all but POST: a request without a note is a POST).
func limitBody(next http.Handler, lim *limits, pacer *refusalPacer, budget time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			// Its messages are bounded by the transport's read limit, and
			// the upgrade's GET says nothing about the operations on it;
			// they are paced one by one (guardedExec).
			next.ServeHTTP(w, pacer.socket(r))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), budget)
		defer cancel()
		if r.Method != http.MethodPost {
			ctx = context.WithValue(ctx, methodKey{}, r.Method)
		}
		// An address whose documents were refused waits its turn before
		// anything of its request is read (pacing.go). The request gets
		// its context once (each WithContext copies the request).
		ctx, err := pacer.admit(ctx, r)
		r = r.WithContext(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				// The time budget ran out while waiting (a budget shorter
				// than the owed wait): answered as a field out of time is.
				writeRefusal(w, errOutOfTime())
			}
			return // otherwise the client is gone
		}
		if err := checkURL(r); err != nil {
			refuseRequest(w, r, lim, err)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		tooBig := func() error { return apperr.New(apperr.PayloadTooLarge, "request body exceeds 1 MiB") }
		if r.ContentLength > httpx.MaxBodyBytes {
			httpx.WriteError(w, r, nil, tooBig())
			return
		}
		// gqlgen reads the whole body anyway; reading it here lets an
		// oversized chunked body get the same 413.
		body, release, err := readRequestBody(r)
		defer release()
		if err != nil {
			httpx.WriteError(w, r, nil, apperr.New(apperr.ValidationFailed, "could not read the request body"))
			return
		}
		if int64(len(body)) > httpx.MaxBodyBytes {
			httpx.WriteError(w, r, nil, tooBig())
			return
		}
		checked := false
		if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
			if err := httpx.CheckJSON(body); err != nil {
				if ae := apperr.From(err); len(ae.Details) == 0 {
					// Not JSON at all: said as gqlgen's POST says it.
					err = apperr.New(apperr.ValidationFailed, engine.NotGraphQLRequest)
				}
				refuseRequest(w, r, lim, err)
				return
			}
			checked = true
		}
		r.Body = engine.NewReadBody(body, checked)
		next.ServeHTTP(w, r)
	})
}

// bodyBuffers hold request bodies of up to pooledBody bytes while they
// are served: what a GraphQL document is read into is not garbage each
// time (a hostile client's 60 KiB bodies back to back were a steady
// source of collections, each taking a core from everyone else).
// Nothing keeps a body's bytes past its request: the transports decode
// copies (strings, maps) from them.
const pooledBody = 64 << 10

var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, pooledBody); return &b }}

// readRequestBody reads r's body whole, at most httpx.MaxBodyBytes+1
// bytes (one more says it is over). A body whose length is declared is
// read into a buffer of that size, from bodyBuffers when it fits one;
// release gives the buffer back once the request is answered.
func readRequestBody(r *http.Request) (body []byte, release func(), err error) {
	n := r.ContentLength
	if n < 0 || n > httpx.MaxBodyBytes {
		b, err := io.ReadAll(io.LimitReader(r.Body, httpx.MaxBodyBytes+1))
		return b, func() {}, err
	}
	release = func() {}
	var buf []byte
	if n <= pooledBody {
		p := bodyBuffers.Get().(*[]byte)
		buf = (*p)[:n]
		release = func() { bodyBuffers.Put(p) }
	} else {
		buf = make([]byte, n)
	}
	// net/http's body ends at the declared length (a short one is an
	// error), so nothing more can follow.
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		return nil, release, err
	}
	return buf, release, nil
}

// checkURL keeps the text rules for a GET's query, variables and
// extensions parameters (and anything else in the URL).
func checkURL(r *http.Request) error {
	if err := httpx.CheckRequestText(r); err != nil {
		return err
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q := r.URL.Query()
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			if err := httpx.CheckJSON([]byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "application/json" || mt == "application/graphql+json" || strings.HasSuffix(mt, "+json")
}

// refuseRequest answers a request refused before GraphQL read it, as a
// GraphQL request error (400, no data), after charging it as a refused
// document.
func refuseRequest(w http.ResponseWriter, r *http.Request, lim *limits, err error) {
	refusedPaced(r.Context())
	if rl := lim.refused(r.Context()); rl != nil {
		err = rl.Err
	}
	writeRefusal(w, err)
}

// writeRefusal answers err as a GraphQL request error (no data), with
// its code's HTTP status.
func writeRefusal(w http.ResponseWriter, err error) {
	ae := apperr.From(err)
	ext := map[string]any{"code": string(ae.Code)}
	if len(ae.Details) > 0 {
		ext["details"] = ae.Details
	}
	if ae.RetryAfterSeconds > 0 {
		ext["retryAfter"] = ae.RetryAfterSeconds
		w.Header().Set("Retry-After", strconv.Itoa(ae.RetryAfterSeconds))
	}
	msg := ae.Message
	if msg == "" {
		msg = string(ae.Code)
	}
	b, _ := json.Marshal(graphql.Response{Errors: gqlerror.List{{Message: msg, Extensions: ext}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Code.HTTPStatus())
	_, _ = w.Write(b)
}
