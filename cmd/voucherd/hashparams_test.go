//go:build !testhash

package main

import (
	"testing"

	"github.com/voucherd/voucherd/internal/password"
)

// The service's own build hashes passwords with the production parameters;
// only the end-to-end tests' binary (-tags testhash) uses the test ones.
func TestPasswordParamsAreDefault(t *testing.T) {
	if passwordParams != password.DefaultParams {
		t.Fatalf("passwordParams = %+v, want password.DefaultParams %+v", passwordParams, password.DefaultParams)
	}
}
