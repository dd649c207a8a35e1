//go:build testhash

package main

import "github.com/voucherd/voucherd/internal/password"

// passwordParams, in a binary built with -tags testhash: password.TestParams.
// scripts/test.sh and testsupport/testserver build the voucherd that the
// end-to-end tests run this way. Those tests sign up and sign in hundreds of
// callers to test everything but hashing, and under the race detector each
// hash with the production parameters (19 MiB, 2 passes) cost about 60 ms of
// CPU, a third of the binaries' CPU in rest's tests (docs/testing.md).
// internal/password tests the hashing itself with both sets of parameters.
// Never ship a binary built with this tag.
var passwordParams = password.TestParams
