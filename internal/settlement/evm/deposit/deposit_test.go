package deposit_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

// TestAddressMatchesFactory: the CREATE2 address the service computes is
// the one the deployed factory's depositAddress returns, and the one where
// flush deploys the forwarder.
func TestAddressMatchesFactory(t *testing.T) {
	ctx := context.Background()
	deployer := testchain.DevAccount(0)
	sim := testchain.NewSim(deployer.Address)
	defer sim.Close()
	c := sim.Client
	h, err := testchain.Send(ctx, c, deployer, nil, nil, deposit.FactoryCode, 0)
	if err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	r, err := c.TransactionReceipt(ctx, h)
	if err != nil || r.Status != 1 {
		t.Fatalf("deploy: %v %+v", err, r)
	}
	factory := r.ContractAddress
	for _, id := range []string{"vch_01", "vch_02", "ünïcode-id"} {
		payout := testchain.NewAccount().Address
		want := deposit.ForVoucher(factory, payout, id)
		out, err := c.CallContract(ctx, ethereum.CallMsg{To: &factory, Data: deposit.DepositAddressData(payout, deposit.Salt(id))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := common.BytesToAddress(out); got != want {
			t.Fatalf("%s: factory says %s, service computes %s", id, got, want)
		}
		// flush deploys the forwarder exactly there.
		if _, err := testchain.Send(ctx, c, deployer, &factory, new(big.Int), deposit.FlushData(deposit.Flush{Payout: payout, Salt: deposit.Salt(id)}), 0); err != nil {
			t.Fatal(err)
		}
		sim.Commit()
		code, err := c.CodeAt(ctx, want, nil)
		if err != nil || len(code) == 0 {
			t.Fatalf("%s: no forwarder at %s after flush (%v)", id, want, err)
		}
	}
}
