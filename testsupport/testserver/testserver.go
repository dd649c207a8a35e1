// Package testserver runs the real voucherd binary for end-to-end tests: it
// builds cmd/voucherd once per test process, starts it on a free loopback
// port against a fresh SQLite or PostgreSQL database, and gives tests a small
// HTTP/GraphQL client with fixtures for the usual callers (the shared
// testsupport/apiclient, failing the test on error).
package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/rest"
	"github.com/voucherd/voucherd/rest/openapi"
	"github.com/voucherd/voucherd/testsupport/apiclient"
	"github.com/voucherd/voucherd/testsupport/proc"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testnode"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// BinaryEnv names a voucherd binary already built for this run: make test
// (scripts/test.sh) builds cmd/voucherd once (with -tags testhash, as
// Binary does) and sets it, so the packages that run the binary share one
// build instead of linking one each.
const BinaryEnv = "VOUCHERD_TEST_BIN"

// Binary returns the path of the voucherd binary: the one BinaryEnv names,
// or cmd/voucherd built once for this test process.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv(BinaryEnv); p != "" {
			if _, err := os.Stat(p); err != nil {
				buildErr = fmt.Errorf("%s: %v", BinaryEnv, err)
			}
			binPath = p
			return
		}
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = err
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "voucherd-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "voucherd")
		// testhash: password.TestParams instead of the production
		// argon2id parameters (cmd/voucherd/hashparams_testhash.go), as
		// make test builds it; these tests test everything but hashing.
		cmd := exec.Command("go", "build", "-tags", "testhash", "-o", binPath, "./cmd/voucherd")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatalf("testserver: %v", buildErr)
	}
	return binPath
}

var (
	validatorOnce sync.Once
	openapiV      *openapi.Validator
	openapiErr    error
)

// validator is the OpenAPI document's validator: every /api/v1 exchange a
// Server's Client makes is checked against the document (rest/openapi),
// and a mismatch fails the test that made it.
func validator(t testing.TB) *openapi.Validator {
	t.Helper()
	validatorOnce.Do(func() { openapiV, openapiErr = openapi.Load(rest.OpenAPI()) })
	if openapiErr != nil {
		t.Fatalf("testserver: %v", openapiErr)
	}
	return openapiV
}

// Options configure one server.
type Options struct {
	// Dialect is storage.SQLite or storage.Postgres.
	Dialect string
	// DatabaseURL reuses a database (e.g. a second replica); empty makes a fresh one.
	DatabaseURL string
	// Env adds or overrides VOUCHER_* variables.
	Env map[string]string
	// Binary runs this voucherd build instead of Binary's (make run's,
	// built with -tags devchain, in cmd/voucherd's dev chain test).
	Binary string
}

// Server is a running voucherd.
type Server struct {
	URL         string
	Addr        string
	DatabaseURL string
	Client      *http.Client

	proc *proc.Process
}

// Start runs voucherd and waits until it is ready; it is stopped (SIGTERM)
// when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := opts.Binary
	if bin == "" {
		bin = Binary(t)
	}
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = testdb.URL(t, opts.Dialect)
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"VOUCHER_ADDR":                  addr,
		"VOUCHER_DATABASE_URL":          dbURL,
		"VOUCHER_RATE_LIMITS":           "off",
		"VOUCHER_WEBHOOK_ALLOW_PRIVATE": "true",
		"VOUCHER_LOG_LEVEL":             "info",
		// Replicas of one test share secrets through the database.
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	p, err := proc.Start(proc.Options{Name: "voucherd", Bin: bin, Env: env, Addr: addr, ReadyPath: "/readyz", ReadyWithin: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: p.URL, Addr: addr, DatabaseURL: dbURL, proc: p,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &openapi.Transport{Validator: validator(t), Report: t.Errorf}}}
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// Stop sends SIGTERM and waits for a graceful exit.
func (s *Server) Stop(t testing.TB) {
	if !s.proc.Stop() {
		t.Errorf("voucherd did not stop within 30s of SIGTERM")
	}
}

// Kill stops the process at once (SIGKILL), as a crash would.
func (s *Server) Kill() { s.proc.Kill() }

// Exited reports whether the process has ended, and its exit code.
func (s *Server) Exited() (bool, int) { return s.proc.Exited() }

// Logs returns everything the process has written so far.
func (s *Server) Logs() string { return s.proc.Output() }

// Response is a finished HTTP exchange (apiclient's, with decoding that
// fails the test).
type Response struct{ *apiclient.Response }

// JSON decodes the body into v, failing t on error.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Map decodes the body as a JSON object.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// API is the shared client (testsupport/apiclient) of this server, through
// Client: every /api/v1 exchange is checked against the OpenAPI document.
func (s *Server) API() *apiclient.Client { return apiclient.New(s.URL, s.Client) }

// Do sends a request; body is marshalled unless it is a string or []byte.
func (s *Server) Do(t testing.TB, method, path, token string, body any) *Response {
	t.Helper()
	return s.DoWith(t, method, path, token, body, nil)
}

// DoWith is Do with extra request headers.
func (s *Server) DoWith(t testing.TB, method, path, token string, body any, header http.Header) *Response {
	t.Helper()
	r, err := s.API().Send(context.Background(), method, path, token, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return &Response{r}
}

// GraphQLResult is a GraphQL response.
type GraphQLResult = apiclient.GraphQLResult

// GraphQL posts a document to /graphql.
func (s *Server) GraphQL(t testing.TB, token, query string, vars map[string]any) *GraphQLResult {
	t.Helper()
	g, err := s.API().GraphQL(context.Background(), token, query, vars)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// RandomHex returns n random bytes as hex, for unique test identities.
func RandomHex(n int) string { return apiclient.RandomHex(n) }

// Identity is a signed-in caller.
type Identity = apiclient.Identity

// must fails t on err, or returns v.
func must[T any](t testing.TB, what string, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Device signs up a new mobile device (a payer's wallet).
func (s *Server) Device(t testing.TB) Identity {
	t.Helper()
	id, err := s.API().Device(context.Background())
	return must(t, "sign-up", id, err)
}

// User signs up a new email-password user.
func (s *Server) User(t testing.TB) Identity {
	t.Helper()
	id, err := s.API().User(context.Background())
	return must(t, "sign-up", id, err)
}

// Session opens a voucher session for payer and returns its id and code.
func (s *Server) Session(t testing.TB, payer Identity) (id, code string) {
	t.Helper()
	ses, err := s.API().Session(context.Background(), payer.Token)
	ses = must(t, "create-session", ses, err)
	return ses.ID, ses.Code
}

// Resource signs in as a payee with a context code.
func (s *Server) Resource(t testing.TB, code string) Identity {
	t.Helper()
	id, err := s.API().Resource(context.Background(), code)
	return must(t, "resource sign-in", id, err)
}

// Reserve reserves a voucher (POST /api/v1/vouchers/reserve-voucher with
// body: the session's code, and a businessId for a business voucher) as
// token, fails the test unless it is answered 200, and returns its id.
func (s *Server) Reserve(t testing.TB, token string, body map[string]any) string {
	t.Helper()
	r := s.Do(t, "POST", "/api/v1/vouchers/reserve-voucher", token, body)
	if r.Status != 200 {
		t.Fatalf("reserve-voucher: %d %s", r.Status, r.Body)
	}
	id, _ := r.Map(t)["id"].(string)
	if id == "" {
		t.Fatalf("reserve-voucher: no id in %s", r.Body)
	}
	return id
}

// NodePackage is testnode.Package: dir (relative to the module root) with
// its npm dependencies installed.
func NodePackage(t testing.TB, dir string) string {
	t.Helper()
	return testnode.Package(t, dir)
}
