//go:build tools

// Package tools pins the code generators `make generate` runs.
package tools

import (
	_ "github.com/99designs/gqlgen"
)
