package layering_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/voucherd/voucherd"

// doors are the packages that speak to clients. Each is a tree: a door's
// subpackages (graph/wstransport, rest/openapi) belong to it.
var doors = []string{"graph", "rest", "checkoutpage"}

// engines are the door's execution machinery that replaces parts of
// gqlgen (docs/architecture.md, "The engine next to the door"): generic
// GraphQL execution, parameterised by what the door passes in. They
// depend on no package of the service: nothing under internal/, not the
// data model (ent), not the door itself; their tests import nothing
// under internal/ (they may drive the generated schema).
var engines = []string{"graph/engine", "graph/wstransport"}

func engineOf(path string) string {
	for _, e := range engines {
		if under(path, e) {
			return e
		}
	}
	return ""
}

// serviceCode reports whether path, one of the module's packages (mine),
// is the service's own code outside the engines: what an engine must not
// depend on. (The standard library's internal/ packages are not mine.)
func serviceCode(mine map[string]bool, path string) bool {
	if !mine[path] || engineOf(path) != "" {
		return false
	}
	return under(path, "internal") || under(path, "ent") || doorOf(path) != ""
}

// httpAllowed are the internal/ packages that may import net/http (or
// net/http/...), each with the reason. Every other internal/ package is
// domain or plumbing that a door calls with plain Go values. An entry whose
// package no longer imports net/http fails the test, so the list stays tight.
var httpAllowed = map[string]string{
	"internal/apperr":                   "the one table from error kinds to HTTP status codes, which both doors read",
	"internal/auth":                     "the bearer-token middleware that puts the principal in the request context",
	"internal/httpx":                    "the HTTP middleware (CORS, gzip, JSON bodies, limits) the doors mount",
	"internal/idempotency":              "the Idempotency-Key middleware: it records and replays whole HTTP answers",
	"internal/netguard":                 "the outbound HTTP client that refuses private addresses (webhooks, chain RPC)",
	"internal/ratelimit":                "the gate charges requests by client address and writes RateLimit-* headers",
	"internal/settlement/evm":           "the EVM chain adapter speaks JSON-RPC over HTTP",
	"internal/settlement/evm/testchain": "the dev and test chain serves JSON-RPC over HTTP (voucherd devchain, tests)",
	"internal/settlement/solana":        "the Solana chain adapter speaks JSON-RPC over HTTP",
	"internal/webhook/sender":           "the webhook sender POSTs signed deliveries",
	"internal/webhook/signing":          "the signature is a set of HTTP headers (webhook-id, -timestamp, -signature)",
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	// ForTest is set on a test variant: the package whose tests it
	// builds (go list -test).
	ForTest string
	// test marks a test variant, its test binary or an external test
	// package; their ImportPath carries no " [x.test]" suffix here.
	test bool
}

// list is `go list -test -json` over the module: each package's direct
// imports and its transitive dependencies, and the same for its tests
// (the package compiled with its _test.go files, the external _test
// package and the test binary). A dependency compiled for a test
// ("p [q.test]") counts as p.
func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-e", "-test", "-json=ImportPath,Imports,Deps,ForTest", module+"/...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		p.test = p.ForTest != "" || strings.HasSuffix(p.ImportPath, ".test")
		p.ImportPath = strings.TrimSuffix(strings.TrimSuffix(clean(p.ImportPath), ".test"), "_test")
		for i := range p.Imports {
			p.Imports[i] = clean(p.Imports[i])
		}
		for i := range p.Deps {
			p.Deps[i] = clean(p.Deps[i])
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// clean drops the module prefix and the " [x.test]" of a package compiled
// for a test.
func clean(path string) string {
	path, _, _ = strings.Cut(path, " [")
	return strings.TrimPrefix(path, module+"/")
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

func doorOf(path string) string {
	for _, d := range doors {
		if under(path, d) {
			return d
		}
	}
	return ""
}

func isHTTP(path string) bool { return under(path, "net/http") }

func TestLayering(t *testing.T) {
	pkgs := list(t)
	mine := map[string]bool{}
	for _, p := range pkgs {
		mine[p.ImportPath] = true
	}
	seen := map[string]bool{}
	usesHTTP := map[string]bool{}
	for _, p := range pkgs {
		seen[p.ImportPath] = true
		door := doorOf(p.ImportPath)
		// Doors never import each other, directly or through anything. A
		// door's tests may reach another door only through the top-level
		// testsupport (the real binary, whose answers a parity test holds
		// side by side), never by importing it.
		if door != "" {
			deps := p.Deps
			if p.test {
				deps = p.Imports
			}
			for _, d := range deps {
				if other := doorOf(d); other != "" && other != door {
					t.Errorf("%s (door %s) depends on %s (door %s): doors meet only in internal/", p.ImportPath, door, d, other)
				}
			}
		}
		if engine := engineOf(p.ImportPath); engine != "" {
			if p.test {
				for _, d := range p.Imports {
					if mine[d] && under(d, "internal") {
						t.Errorf("%s (its tests) imports %s: the engine's tests stand without internal/ packages", p.ImportPath, d)
					}
				}
			} else {
				for _, d := range p.Deps {
					if serviceCode(mine, d) {
						t.Errorf("%s depends on %s: the engine is generic; what is about the service lives in the door (graph), which passes it in", p.ImportPath, d)
					}
				}
			}
		}
		if !under(p.ImportPath, "internal") {
			continue
		}
		// internal/ never depends on a door, its tests included: no
		// exceptions. Code that needs a door (test support driving the REST
		// door's OpenAPI document, an end-to-end test through the binary)
		// lives outside internal/ (testsupport/, cmd/voucherd's tests).
		for _, d := range p.Deps {
			if doorOf(d) != "" {
				t.Errorf("%s%s depends on the door package %s: move the code that needs it into the door, or the composition root (cmd/voucherd and its tests)", p.ImportPath, testNote(p), d)
			}
		}
		// Only the named infrastructure imports net/http (tests may: they
		// stand up HTTP servers to call or be called).
		if p.test {
			continue
		}
		for _, imp := range p.Imports {
			if isHTTP(imp) {
				usesHTTP[p.ImportPath] = true
				if _, ok := httpAllowed[p.ImportPath]; !ok {
					t.Errorf("%s imports %s: only infrastructure may (httpAllowed in this test, with a reason); a domain package takes and returns plain values", p.ImportPath, imp)
				}
			}
		}
	}
	// The service binary carries no test support.
	for _, p := range pkgs {
		if p.ImportPath != "cmd/voucherd" || p.test {
			continue
		}
		for _, d := range p.Deps {
			if under(d, "testsupport") {
				t.Errorf("cmd/voucherd depends on %s: test support stays out of the service binary", d)
			}
		}
	}
	if !seen["graph"] || !seen["rest"] || !seen["cmd/voucherd"] {
		t.Fatalf("go list did not report graph, rest and cmd/voucherd: %v", sortedKeys(seen))
	}
	// The allow-lists name only packages that still need them.
	for path := range httpAllowed {
		if !usesHTTP[path] {
			t.Errorf("httpAllowed names %s, which does not import net/http (any more): drop it", path)
		}
	}
}

func testNote(p pkg) string {
	if p.test {
		return " (its tests)"
	}
	return ""
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
