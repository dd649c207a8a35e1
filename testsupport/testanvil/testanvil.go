// Package testanvil starts anvil (Foundry's independent EVM node, from the
// npm package @foundry-rs/anvil pinned by test/anvil/package-lock.json; it
// ships the binary and runs offline) for a test: chain id 1337, the
// well-known dev accounts prefunded (testchain.DevKeys).
package testanvil

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/voucherd/voucherd/testsupport/testnode"
)

// Anvil is a running node.
type Anvil struct {
	URL    string
	Client *ethclient.Client
}

// Start starts anvil on a free port and stops it when the test ends.
// blockTime 0 mines a block for each transaction as it arrives; otherwise
// a block every blockTime (whole seconds).
func Start(t testing.TB, blockTime time.Duration) *Anvil {
	t.Helper()
	dir := testnode.Package(t, "test/anvil")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"--port", fmt.Sprint(port), "--chain-id", "1337", "--silent"}
	if blockTime > 0 {
		args = append(args, "--block-time", fmt.Sprint(int(blockTime.Seconds())))
	}
	cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", "anvil"), args...)
	// node_modules/.bin/anvil is npm's Node.js launcher, which starts the
	// platform's anvil binary as its child: the whole process group is
	// killed, or that child outlives the test on its port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	a := &Anvil{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if a.Client, err = ethclient.DialContext(ctx, a.URL); err == nil {
			if _, err = a.Client.ChainID(ctx); err == nil {
				break
			}
			a.Client.Close()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("anvil did not answer: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Cleanup(a.Client.Close)
	return a
}

// Call is one JSON-RPC call (anvil_mine, evm_snapshot, …); an error fails
// the test.
func (a *Anvil) Call(t testing.TB, method string, args ...any) json.RawMessage {
	t.Helper()
	var out json.RawMessage
	if err := a.Client.Client().CallContext(context.Background(), &out, method, args...); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return out
}
