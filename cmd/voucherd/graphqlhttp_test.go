package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The GraphQL-over-HTTP spec's audit suite (npm graphql-http's
// auditServer, test/graphql-http) against the real binary: every audit,
// MUST, SHOULD and MAY alike, passes. Among them: a mutation over GET is
// 405, request errors carry no data entry and are 400 under
// application/graphql-response+json, 200 under application/json.
func TestGraphQLOverHTTPAudit(t *testing.T) {
	dir := testserver.NodePackage(t, "test/graphql-http")
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	cmd := exec.Command("node", "audit.mjs")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "URL="+srv.URL+"/graphql")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, stderr.String())
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			ID, Name, Status, Reason string
			ResponseStatus           int    `json:"responseStatus"`
			ResponseBody             string `json:"responseBody"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		n++
		if r.Status != "ok" {
			t.Errorf("%s %s: %s: %s (status %d, body %s)", r.Status, r.ID, r.Name, r.Reason, r.ResponseStatus, r.ResponseBody)
		}
	}
	if n < 40 {
		t.Fatalf("the audit ran %d checks; graphql-http 1.23 has more than 40\n%s", n, stderr.String())
	}
	t.Logf("graphql-http: %d audits, all ok", n)
}

// graphql-js's standard introspection query, every option on, works in
// development: graphql-js builds a client schema from the answer, and it
// is the committed printed schema, which GET /graphql/schema.graphql
// serves. An introspection nested past its bound is still refused; in
// production neither introspection nor the schema file is served.
func TestStandardIntrospection(t *testing.T) {
	dir := testserver.NodePackage(t, "test/graphql-http")
	srv := testserver.Start(t, testserver.Options{Dialect: "sqlite"})
	file, err := filepath.Abs(filepath.Join("..", "..", graph.SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "introspect.mjs")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "URL="+srv.URL+"/graphql", "SCHEMA_FILE="+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("introspection: %v\n%s", err, stderr.String())
	}
	introspected, printed, ok := strings.Cut(string(out), "\n---\n")
	if !ok || len(introspected) < 1000 {
		t.Fatalf("introspect.mjs printed %.500s", out)
	}
	if strings.TrimSpace(introspected) != strings.TrimSpace(printed) {
		t.Errorf("the introspected schema and %s differ:\n%s", graph.SchemaFile, firstDiff(introspected, printed))
	}
	if strings.Contains(introspected, "@go") {
		t.Error("introspection shows gqlgen's code-generation directives")
	}

	committed, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Do(t, "GET", "/graphql/schema.graphql", "", nil)
	if r.Status != 200 || !bytes.Equal(r.Body, committed) {
		t.Errorf("GET /graphql/schema.graphql: %d, %d bytes, want the committed %d", r.Status, len(r.Body), len(committed))
	}

	deep := `{ __type(name: "Voucher") { name ` + strings.Repeat("ofType { ", 25) + "name" + strings.Repeat(" }", 25) + " } }"
	if g := srv.GraphQL(t, "", deep, nil); g.ErrorCode() != "validation_failed" {
		t.Errorf("an introspection nested 27 deep: %+v", g.Errors)
	}

	prod := testserver.Start(t, testserver.Options{Dialect: "sqlite", Env: map[string]string{
		"VOUCHER_ENV": "production", "VOUCHER_JWT_SECRET": strings.Repeat("s", 32),
		"VOUCHER_ENCRYPTION_KEY": "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=", "VOUCHER_WEBHOOK_ALLOW_PRIVATE": "false",
		"VOUCHER_TRUST_RECEIPTS": "true", // the default finance file has no rpcUrl
	}})
	if g := prod.GraphQL(t, "", `{ __schema { queryType { name } } }`, nil); g.ErrorCode() == "" {
		t.Errorf("production answered introspection: %s", g.Data)
	}
	if r := prod.Do(t, "GET", "/graphql/schema.graphql", "", nil); r.Status != 404 {
		t.Errorf("production GET /graphql/schema.graphql: %d", r.Status)
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n  introspected: %s\n  printed:      %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(al), len(bl))
}
