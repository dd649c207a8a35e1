package graph_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
)

// POST answers: a response holding only data is exactly {"data":...}, in
// the media type the Accept header asks for; errors keep gqlgen's status
// codes and bodies (the transport hands them to gqlgen's POST).
func TestPostAnswers(t *testing.T) {
	h := newHarness(t, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	v := h.reserve(payee, ses.Code, nil)
	query := `query($id: ID!) { voucher(id: $id) { id status expectedPayment { amount } } }`
	send := func(body, accept string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/graphql", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+payee.token)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	body := func(q string, vars map[string]any) string {
		b, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
		return string(b)
	}

	want := `{"data":{"voucher":{"id":"` + v.ID + `","status":"RESERVED","expectedPayment":null}}}`
	for _, tc := range []struct{ accept, contentType string }{
		{"", "application/json"},
		{"application/json", "application/json"},
		{"*/*", "application/json"},
		{"application/graphql-response+json, application/json;q=0.9", "application/graphql-response+json"},
		{"text/html", "application/graphql-response+json"},
	} {
		status, ct, b := send(body(query, map[string]any{"id": v.ID}), tc.accept)
		if status != http.StatusOK || ct != tc.contentType || string(b) != want {
			t.Fatalf("Accept %q: %d %q %s\nwant 200 %q %s", tc.accept, status, ct, b, tc.contentType, want)
		}
	}

	// A field error: data and errors, through the whole encoder.
	status, _, b := send(body(`{ vouchers(first: -1) { edges { cursor } } }`, nil), "")
	if status != http.StatusOK || !bytes.Contains(b, []byte(`"errors"`)) || !bytes.Contains(b, []byte(`"data"`)) {
		t.Fatalf("field error: %d %s", status, b)
	}

	// Not a GraphQL request, and an operation that cannot run: gqlgen's
	// answers.
	for _, tc := range []struct {
		name, body, accept string
		status             int
		says               string
	}{
		{"not JSON", `{"query":`, "", http.StatusBadRequest, "not a valid GraphQL request"},
		{"unknown field", body(`{ nope }`, nil), "", http.StatusOK, "Cannot query field"},
		{"unknown field, graphql-response", body(`{ nope }`, nil), "application/graphql-response+json", http.StatusBadRequest, "Cannot query field"},
		{"no such operation", `{"query":"query a { viewer { __typename } }","operationName":"b"}`, "", http.StatusOK, "operation b not found"},
	} {
		status, _, b := send(tc.body, tc.accept)
		if status != tc.status || !bytes.Contains(b, []byte(tc.says)) {
			t.Fatalf("%s: %d %s, want %d saying %q", tc.name, status, b, tc.status, tc.says)
		}
	}
}
