package graph_test

import (
	"testing"

	"github.com/voucherd/voucherd/testsupport/testdb"
)

// TestMain stops the shared PostgreSQL cluster the tests of this package
// (through testserver) start.
func TestMain(m *testing.M) { testdb.Main(m) }
