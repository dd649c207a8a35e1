package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testanvil"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// TestDeployFactory: `voucherd deploy-factory -rpc-url URL` with the key
// in VOUCHER_DEPLOYER_KEY creates the deposit factory on anvil and prints
// its address as the last line: the address the deployer's nonce gives,
// holding a factory whose depositAddress agrees with the service's. The
// key appears in none of its output; without a key, with a bad key or no
// -rpc-url it fails saying why, and sends nothing.
func TestDeployFactory(t *testing.T) {
	bin := testserver.Binary(t)
	a := testanvil.Start(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deployer := testchain.DevAccount(3)
	keyHex := testchain.DevKeys[3]
	run := func(env []string, args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"deploy-factory"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	for name, c := range map[string]struct {
		env  []string
		args []string
		says string
	}{
		"no key":     {nil, []string{"-rpc-url", a.URL}, "VOUCHER_DEPLOYER_KEY is not set"},
		"bad key":    {[]string{"VOUCHER_DEPLOYER_KEY=0x" + strings.Repeat("zz", 32)}, []string{"-rpc-url", a.URL}, "VOUCHER_DEPLOYER_KEY: not a valid"},
		"no rpc url": {[]string{"VOUCHER_DEPLOYER_KEY=" + keyHex}, nil, "usage"},
	} {
		out, errOut, err := run(append([]string{"VOUCHER_DEPLOYER_KEY="}, c.env...), c.args...)
		if err == nil || !strings.Contains(errOut, c.says) {
			t.Fatalf("%s: %v, stdout %q, stderr %q", name, err, out, errOut)
		}
	}
	if n, err := a.Client.NonceAt(ctx, deployer.Address, nil); err != nil || n != 0 {
		t.Fatalf("a refused deploy-factory sent something: nonce %d %v", n, err)
	}

	out, errOut, err := run([]string{"VOUCHER_DEPLOYER_KEY=0x" + keyHex}, "-rpc-url", a.URL)
	if err != nil {
		t.Fatalf("deploy-factory: %v\n%s%s", err, out, errOut)
	}
	for _, s := range []string{keyHex, strings.ToUpper(keyHex)} {
		if strings.Contains(out+errOut, s) {
			t.Fatal("deploy-factory printed the deployer's key")
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	want := crypto.CreateAddress(deployer.Address, 0)
	if !common.IsHexAddress(last) || common.HexToAddress(last) != want {
		t.Fatalf("last line %q, want the factory's address %s; output:\n%s", last, want.Hex(), out)
	}
	if err := deposit.Verify(ctx, a.Client.Client(), want); err != nil {
		t.Fatal(err)
	}
}
