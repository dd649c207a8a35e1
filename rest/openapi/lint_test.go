package openapi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Redocly CLI (test/openapi-lint, pinned in its package-lock.json) lints the
// committed document with its recommended-strict rules: every finding is
// an error, and the few kept on purpose are listed with their reasons in
// test/openapi-lint/.redocly.lint-ignore.yaml. Without Node the test is
// skipped, except in CI, where it must run.
func TestRedoclyLint(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required in CI to lint the OpenAPI document", tool)
			}
			t.Skipf("%s not found: linting the OpenAPI document needs Node.js 20.19 or later", tool)
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "test", "openapi-lint"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	ci := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	ci.Dir, ci.Env = dir, env
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	lint := exec.Command(filepath.Join("node_modules", ".bin", "redocly"), "lint", "--format=stylish", filepath.Join("..", "..", "rest", "openapi.json"))
	lint.Dir, lint.Env = dir, env
	out, err := lint.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint rest/openapi.json: %v\n%s", err, out)
	}
}
