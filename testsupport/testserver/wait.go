package testserver

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, failing the test once
// d has passed without it (what names the awaited condition).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
