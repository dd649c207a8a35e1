//go:build !testhash

package main

import "github.com/voucherd/voucherd/internal/password"

// passwordParams are the argon2id parameters sign-up and sign-in hash with:
// password.DefaultParams in every build of the service. Only the binary the
// end-to-end tests run is built otherwise (hashparams_testhash.go).
var passwordParams = password.DefaultParams
