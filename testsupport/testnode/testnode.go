// Package testnode installs the npm packages tests drive (anvil,
// graphql-http's audit) from their committed package-lock.json.
package testnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	npmMu   sync.Mutex
	npmDone = map[string]error{}
)

// Package returns the absolute path of dir (relative to the module root,
// e.g. "test/graphql-http") with its npm dependencies installed from its
// package-lock.json (npm ci, once per directory and test process). Without
// Node.js the test is skipped, except under CI=true, where it fails.
func Package(t testing.TB, dir string) string {
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
