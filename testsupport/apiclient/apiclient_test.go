package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/voucherd/voucherd/testsupport/apiclient"
)

// The client sends what the doors expect (a JSON body, the bearer token,
// extra headers), returns any status from Send, and turns a status other
// than 200 into a *StatusError in Call; the fixtures read the doors'
// answers.
func TestClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			_ = json.NewEncoder(w).Encode(map[string]any{"auth": r.Header.Get("Authorization"), "ct": r.Header.Get("Content-Type"), "x": r.Header.Get("X-Client-Secret"), "body": body})
		case "/api/v1/auth/sign-up":
			_, _ = w.Write([]byte(`{"authorization":{"token":"tok"},"user":{"id":"dev_1"}}`))
		case "/graphql":
			_, _ = w.Write([]byte(`{"errors":[{"message":"no","extensions":{"code":"forbidden"}}]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"not_found"}`))
		}
	}))
	defer srv.Close()
	c := apiclient.New(srv.URL, nil)
	ctx := context.Background()

	r, err := c.Send(ctx, http.MethodPost, "/echo", "abc", map[string]any{"a": 1}, http.Header{"X-Client-Secret": {"s"}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Auth, Ct, X string
		Body        map[string]any
	}
	if err := json.Unmarshal(r.Body, &got); err != nil || got.Auth != "Bearer abc" || got.Ct != "application/json" || got.X != "s" || got.Body["a"] != 1.0 {
		t.Fatalf("echo %s (%v)", r.Body, err)
	}

	r, err = c.Send(ctx, http.MethodGet, "/missing", "", nil, nil)
	if err != nil || r.Status != http.StatusNotFound || r.Code() != "not_found" {
		t.Fatalf("missing: %+v %v", r, err)
	}
	var se *apiclient.StatusError
	if err := c.Call(ctx, http.MethodGet, "/missing", "", nil, nil); !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Code != "not_found" {
		t.Fatalf("Call on a 404: %v", err)
	}

	id, err := c.Device(ctx)
	if err != nil || id.ID != "dev_1" || id.Token != "tok" || id.InstallationID == "" || id.Password == "" {
		t.Fatalf("device %+v %v", id, err)
	}
	g, err := c.GraphQL(ctx, "tok", "{ viewer { id } }", nil)
	if err != nil || g.ErrorCode() != "forbidden" || g.Err() == nil {
		t.Fatalf("graphql %+v %v", g, err)
	}
}

// WaitReady returns once the service answers 200, says when the process
// ended first, and gives up after its timeout.
func TestWaitReady(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready {
			ready = true
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := apiclient.WaitReady(srv.URL, "/readyz", nil, 5*time.Second); err != nil || !ready {
		t.Fatalf("ready: %v", err)
	}
	exited := make(chan struct{})
	close(exited)
	if err := apiclient.WaitReady(srv.URL, "/readyz", exited, 5*time.Second); !errors.Is(err, apiclient.ErrExited) {
		t.Fatalf("exited: %v", err)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer down.Close()
	if err := apiclient.WaitReady(down.URL, "/readyz", nil, 100*time.Millisecond); err == nil {
		t.Fatal("a service that never gets ready")
	}
}
