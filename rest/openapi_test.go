package rest_test

import (
	"bytes"
	"testing"

	"github.com/voucherd/voucherd/rest"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The binary serves the committed document (every exchange of the suite
// through testserver is validated against it: rest/openapi.Transport).
func TestServesOpenAPIDocument(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite3"})
	r := srv.Do(t, "GET", "/api/v1/openapi.json", "", nil)
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("openapi.json: %d %v", r.Status, r.Header)
	}
	if !bytes.Equal(r.Body, rest.OpenAPI()) || !bytes.Contains(r.Body, []byte(`"openapi": "3.1.0"`)) {
		t.Fatalf("the served document is not the committed 3.1 one")
	}
	if r := srv.Do(t, "POST", "/api/v1/openapi.json", "", "{}"); r.Status != 405 || r.Code() != "method_not_allowed" {
		t.Fatalf("POST openapi.json: %d %s", r.Status, r.Body)
	}
}
