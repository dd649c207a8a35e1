// Package testserver runs the real voucherd binary for end-to-end tests: it
// builds cmd/voucherd once per test process, starts it on a free loopback
// port against a fresh SQLite or PostgreSQL database, and gives tests a small
// HTTP/GraphQL client with fixtures for the usual callers.
package testserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/voucherd/voucherd/rest"
	"github.com/voucherd/voucherd/rest/openapi"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/voucherd once and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
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
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/voucherd")
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
}

// Server is a running voucherd.
type Server struct {
	URL         string
	Addr        string
	DatabaseURL string
	Client      *http.Client

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs voucherd and waits until it is ready; it is stopped (SIGTERM)
// when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = testdb.URL(t, opts.Dialect)
	}
	addr := freeAddr(t)
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
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start voucherd: %v", err)
	}
	s := &Server{URL: "http://" + addr, Addr: addr, DatabaseURL: dbURL, cmd: cmd, logs: logs, done: make(chan struct{}),
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &openapi.Transport{Validator: validator(t), Report: t.Errorf}}}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.Stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("voucherd exited during start:\n%s", logs.String())
		default:
		}
		resp, err := http.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("voucherd not ready after 30s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits for a graceful exit.
func (s *Server) Stop(t testing.TB) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("voucherd did not stop within 30s of SIGTERM")
	}
}

// Kill stops the process at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Exited reports whether the process has ended, and its exit code.
func (s *Server) Exited() (bool, int) {
	select {
	case <-s.done:
		return true, s.cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}

// Logs returns everything the process has written so far.
func (s *Server) Logs() string { return s.logs.String() }

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

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

// Code returns the error body's code ("" when absent).
func (r *Response) Code() string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Code
}

// Do sends a request; body is marshalled unless it is a string or []byte.
func (s *Server) Do(t testing.TB, method, path, token string, body any) *Response {
	t.Helper()
	return s.DoWith(t, method, path, token, body, nil)
}

// DoWith is Do with extra request headers.
func (s *Server) DoWith(t testing.TB, method, path, token string, body any, header http.Header) *Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// GraphQLResult is a GraphQL response.
type GraphQLResult struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Path       []any          `json:"path"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
}

// ErrorCode returns the first error's extensions.code ("" when none).
func (g *GraphQLResult) ErrorCode() string {
	if len(g.Errors) == 0 {
		return ""
	}
	c, _ := g.Errors[0].Extensions["code"].(string)
	return c
}

// GraphQL posts a document to /graphql.
func (s *Server) GraphQL(t testing.TB, token, query string, vars map[string]any) *GraphQLResult {
	t.Helper()
	r := s.Do(t, http.MethodPost, "/graphql", token, map[string]any{"query": query, "variables": vars})
	var g GraphQLResult
	if err := json.Unmarshal(r.Body, &g); err != nil {
		t.Fatalf("graphql response %d %s: %v", r.Status, r.Body, err)
	}
	return &g
}

// RandomHex returns n random bytes as hex, for unique test identities.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Identity is a signed-in caller.
type Identity struct {
	ID    string
	Token string
	// Email and Password for email-password users; InstallationID for devices.
	Email, Password, InstallationID string
}

func (s *Server) signUp(t testing.TB, body map[string]any) Identity {
	t.Helper()
	r := s.Do(t, http.MethodPost, "/api/v1/auth/sign-up", "", body)
	if r.Status != 200 {
		t.Fatalf("sign-up: %d %s", r.Status, r.Body)
	}
	var out struct {
		Authorization struct{ Token string } `json:"authorization"`
		User          struct{ ID string }    `json:"user"`
	}
	r.JSON(t, &out)
	return Identity{ID: out.User.ID, Token: out.Authorization.Token}
}

// Device signs up a new mobile device (a payer's wallet).
func (s *Server) Device(t testing.TB) Identity {
	t.Helper()
	inst, pw := RandomHex(16), RandomHex(20)
	id := s.signUp(t, map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": inst, "password": pw}})
	id.InstallationID, id.Password = inst, pw
	return id
}

// User signs up a new email-password user.
func (s *Server) User(t testing.TB) Identity {
	t.Helper()
	email, pw := "u"+RandomHex(6)+"@example.com", "pw-"+RandomHex(8)
	id := s.signUp(t, map[string]any{"type": "email-password", "data": map[string]any{"email": email, "password": pw}})
	id.Email, id.Password = email, pw
	return id
}

// Session opens a voucher session for payer and returns its id and code.
func (s *Server) Session(t testing.TB, payer Identity) (id, code string) {
	t.Helper()
	r := s.Do(t, http.MethodPost, "/api/v1/vouchers/sessions/create-session", payer.Token, nil)
	if r.Status != 200 {
		t.Fatalf("create-session: %d %s", r.Status, r.Body)
	}
	var out struct{ ID, Code string }
	r.JSON(t, &out)
	return out.ID, out.Code
}

// Resource signs in as a payee with a context code.
func (s *Server) Resource(t testing.TB, code string) Identity {
	t.Helper()
	r := s.Do(t, http.MethodPost, "/api/v1/auth/sign-in", "", map[string]any{"type": "resource", "data": map[string]any{"resource": "voucher::context::code::" + code}})
	if r.Status != 200 {
		t.Fatalf("resource sign-in: %d %s", r.Status, r.Body)
	}
	var out struct {
		Authorization struct{ Token string } `json:"authorization"`
	}
	r.JSON(t, &out)
	return Identity{Token: out.Authorization.Token}
}

var (
	npmMu   sync.Mutex
	npmDone = map[string]error{}
)

// NodePackage returns the absolute path of dir (relative to the module
// root, e.g. "test/graphql-http") with its npm dependencies installed from
// its package-lock.json (npm ci, once per directory and test process).
// Without Node.js the test is skipped, except under CI=true, where it fails.
func NodePackage(t testing.TB, dir string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required in CI for the tests driven by %s", tool, dir)
			}
			t.Skipf("%s not found: %s needs Node.js 20 or later", tool, dir)
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), dir)
	npmMu.Lock()
	defer npmMu.Unlock()
	err, done := npmDone[abs]
	if !done {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = abs
		if b, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("npm ci in %s: %v\n%s", abs, cerr, b)
		}
		npmDone[abs] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
