package harness

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/voucherd/voucherd/testsupport/proc"
)

// Process is a child the bench started (the service or the floor), with
// the tail of its output kept for error messages.
type Process = proc.Process

// FreeAddr returns a free loopback address.
func FreeAddr() (string, error) { return proc.FreeAddr() }

// StartProcess runs bin with args and env added to the bench's own
// environment, and waits (up to 60 s) until GET readyPath answers 200.
func StartProcess(name, bin string, args []string, env map[string]string, addr, readyPath string) (*Process, error) {
	return proc.Start(proc.Options{Name: name, Bin: bin, Args: args, Env: env, Addr: addr,
		ReadyPath: readyPath, ReadyWithin: 60 * time.Second, Tail: 64 << 10})
}

// OpenFiles counts pid's open file descriptors.
func OpenFiles(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
