package main_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/testsupport/testserver"
)

const (
	allowedOrigin = "https://dashboard.example.test"
	otherOrigin   = "https://evil.example.test"
)

// send makes one raw request (no transparent gzip) and returns the answer
// with its body read.
func send(t *testing.T, srv *testserver.Server, method, path string, header map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func corsHeaders(h http.Header) []string {
	var out []string
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out = append(out, k)
		}
	}
	return out
}

func headerList(v string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		m[strings.ToLower(strings.TrimSpace(s))] = true
	}
	return m
}

// The browser contract on the real binary: VOUCHER_CORS_ORIGINS opens
// /api/v1 and /graphql to the listed origins, with the documented
// preflight answer and exposed headers; every other origin gets no CORS
// header; the websocket upgrade checks the same list.
func TestCORS(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{
		"VOUCHER_CORS_ORIGINS": allowedOrigin + ", http://localhost:5173",
	}})
	reqHeaders := "authorization,content-type,idempotency-key,x-client-secret,x-request-id"

	for _, path := range []string{"/api/v1/vouchers/sessions/create-session", "/graphql"} {
		t.Run("preflight "+path, func(t *testing.T) {
			resp, _ := send(t, srv, "OPTIONS", path, map[string]string{
				"Origin": allowedOrigin, "Access-Control-Request-Method": "POST",
				"Access-Control-Request-Headers": reqHeaders,
			}, "")
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("preflight status %d, want 204", resp.StatusCode)
			}
			h := resp.Header
			if got := h.Get("Access-Control-Allow-Origin"); got != allowedOrigin {
				t.Errorf("Allow-Origin %q, want %q", got, allowedOrigin)
			}
			if !headerList(h.Get("Access-Control-Allow-Methods"))["post"] {
				t.Errorf("Allow-Methods %q lacks POST", h.Get("Access-Control-Allow-Methods"))
			}
			allowed := headerList(h.Get("Access-Control-Allow-Headers"))
			for _, want := range strings.Split(reqHeaders, ",") {
				if !allowed[want] {
					t.Errorf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
				}
			}
			if got := h.Get("Access-Control-Max-Age"); got != "600" {
				t.Errorf("Max-Age %q, want 600", got)
			}
			if h.Get("Access-Control-Allow-Credentials") != "" {
				t.Error("credentials allowed; tokens are bearer headers, never cookies")
			}

			// Another origin, or a header outside the list: nothing.
			for _, hdr := range []map[string]string{
				{"Origin": otherOrigin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": reqHeaders},
				{"Origin": allowedOrigin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-secret-sauce"},
				{"Origin": allowedOrigin, "Access-Control-Request-Method": "DELETE"},
			} {
				resp, _ := send(t, srv, "OPTIONS", path, hdr, "")
				if got := corsHeaders(resp.Header); len(got) > 0 {
					t.Errorf("refused preflight %v answered with %v", hdr, got)
				}
			}
		})
	}

	t.Run("actual requests", func(t *testing.T) {
		resp, body := send(t, srv, "GET", "/api/v1/finance/rates", map[string]string{"Origin": allowedOrigin}, "")
		if resp.StatusCode != 200 {
			t.Fatalf("rates: %d %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != allowedOrigin {
			t.Errorf("Allow-Origin %q, want %q", got, allowedOrigin)
		}
		exposed := headerList(resp.Header.Get("Access-Control-Expose-Headers"))
		for _, want := range []string{"idempotent-replayed", "ratelimit", "ratelimit-policy", "retry-after", "x-request-id"} {
			if !exposed[want] {
				t.Errorf("Expose-Headers %q lacks %s", resp.Header.Get("Access-Control-Expose-Headers"), want)
			}
		}
		// An error answer reaches the page too (CORS sits outside auth).
		resp, body = send(t, srv, "GET", "/api/v1/vouchers/vch_x", map[string]string{"Origin": allowedOrigin, "Authorization": "Bearer nope"}, "")
		if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != allowedOrigin {
			t.Errorf("bad token: %d, Allow-Origin %q (%s)", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), body)
		}
		resp, _ = send(t, srv, "POST", "/graphql", map[string]string{"Origin": "http://localhost:5173", "Content-Type": "application/json"}, `{"query":"{__typename}"}`)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" {
			t.Errorf("graphql: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		// Another origin is answered (the server cannot stop the request)
		// but without CORS headers, so the browser hides the answer.
		resp, _ = send(t, srv, "GET", "/api/v1/finance/rates", map[string]string{"Origin": otherOrigin}, "")
		if got := corsHeaders(resp.Header); len(got) > 0 {
			t.Errorf("other origin got %v", got)
		}
		// Paths outside the API are not for cross-origin scripts.
		resp, _ = send(t, srv, "GET", "/healthz", map[string]string{"Origin": allowedOrigin}, "")
		if got := corsHeaders(resp.Header); len(got) > 0 {
			t.Errorf("/healthz got %v", got)
		}
	})

	t.Run("websocket origin", func(t *testing.T) {
		url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
		for _, c := range []struct {
			origin string
			ok     bool
		}{
			{"", true}, // not a browser
			{allowedOrigin, true},
			{srv.URL, true}, // same origin (the GraphiQL page)
			{otherOrigin, false},
		} {
			h := http.Header{}
			if c.origin != "" {
				h.Set("Origin", c.origin)
			}
			d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}
			conn, resp, err := d.Dial(url, h)
			if c.ok {
				if err != nil {
					t.Errorf("origin %q refused: %v", c.origin, err)
					continue
				}
				conn.Close()
				continue
			}
			if err == nil {
				conn.Close()
				t.Errorf("origin %q accepted", c.origin)
				continue
			}
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("origin %q: %v, want 403", c.origin, err)
			}
		}
	})
}

// Without VOUCHER_CORS_ORIGINS no origin gets CORS headers, and the
// websocket takes any origin as before.
func TestCORSOffByDefault(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	resp, _ := send(t, srv, "OPTIONS", "/graphql", map[string]string{"Origin": allowedOrigin, "Access-Control-Request-Method": "POST"}, "")
	if got := corsHeaders(resp.Header); len(got) > 0 {
		t.Errorf("preflight got %v", got)
	}
	resp, _ = send(t, srv, "GET", "/api/v1/finance/rates", map[string]string{"Origin": allowedOrigin}, "")
	if got := corsHeaders(resp.Header); len(got) > 0 {
		t.Errorf("GET got %v", got)
	}
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
	conn, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Origin": {otherOrigin}})
	if err != nil {
		t.Fatalf("websocket without a list refused an origin: %v", err)
	}
	conn.Close()
}

// Answers of 1 KiB and more are gzip-compressed when the client accepts
// gzip, and decompress to the same bytes; smaller ones, and clients that do
// not accept it, get identity.
func TestGzip(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	plainResp, plain := send(t, srv, "GET", "/api/v1/finance/currencies", nil, "")
	if plainResp.StatusCode != 200 || plainResp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("without Accept-Encoding: %d, Content-Encoding %q", plainResp.StatusCode, plainResp.Header.Get("Content-Encoding"))
	}
	if len(plain) < 1024 {
		t.Fatalf("the currency list is %d bytes; the test needs one of 1 KiB or more", len(plain))
	}
	resp, body := send(t, srv, "GET", "/api/v1/finance/currencies", map[string]string{"Accept-Encoding": "gzip"}, "")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
	}
	if !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
		t.Errorf("Vary %q lacks Accept-Encoding", resp.Header.Get("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	unz, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unz, plain) {
		t.Fatalf("gzip body differs from the plain one")
	}
	if len(body) >= len(plain) {
		t.Errorf("compressed %d bytes into %d", len(plain), len(body))
	}
	if !json.Valid(unz) {
		t.Errorf("decompressed body is not JSON")
	}

	// Small answers stay identity.
	resp, body = send(t, srv, "GET", "/healthz", map[string]string{"Accept-Encoding": "gzip"}, "")
	if resp.Header.Get("Content-Encoding") != "" || !json.Valid(body) {
		t.Errorf("small answer: Content-Encoding %q, body %q", resp.Header.Get("Content-Encoding"), body)
	}
	// GraphQL answers too.
	q := `{"query":"{ a: __schema { types { name description } } }"}`
	resp, body = send(t, srv, "POST", "/graphql", map[string]string{"Accept-Encoding": "gzip", "Content-Type": "application/json"}, q)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("graphql introspection: %d, Content-Encoding %q (%d bytes)", resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body))
	}
	// A websocket upgrade is not compressed away.
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/graphql"
	conn, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Accept-Encoding": {"gzip"}})
	if err != nil {
		t.Fatalf("websocket with Accept-Encoding: gzip: %v", err)
	}
	conn.Close()
}
