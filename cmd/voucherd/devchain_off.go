//go:build !devchain

package main

import "errors"

// devchain without the devchain build tag: the dev chain (devchain.go) is
// compiled into the binary make run builds, not into the service's own
// build, which then says so rather than serving.
func devchain([]string) error {
	return errors.New("this binary was built without the dev chain; make run builds one with it (go build -tags devchain ./cmd/voucherd)")
}
