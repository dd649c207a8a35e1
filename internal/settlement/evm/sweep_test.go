package evm_test

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

// TestSweeperAdapter: the settlement.Sweeper of an EVM network refuses an
// order whose deposit address is not the factory's for its payout and
// voucher id (nothing sent), answers ErrSweepBusy while its sweep is in
// flight, and reports what each address moved by lower-case address (the
// native currency as the empty token).
func TestSweeperAdapter(t *testing.T) {
	ctx := context.Background()
	owner, key := testchain.DevAccount(0), testchain.NewAccount()
	sim := testchain.NewSim(owner.Address, key.Address)
	defer sim.Close()
	h, err := testchain.Send(ctx, sim.Client, owner, nil, nil, deposit.FactoryCode, 0)
	if err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	rc, err := sim.Client.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy: %v %v", rc, err)
	}
	factory := rc.ContractAddress
	sw, err := evm.NewSweeper(ctx, evm.New(sim.RPC), factory.Hex(), key.Key)
	if err != nil {
		t.Fatal(err)
	}
	payout := testchain.NewAccount().Address
	dep := deposit.ForVoucher(factory, payout, "vch_adapter")
	if _, err := testchain.Send(ctx, sim.Client, owner, &dep, big.NewInt(777), nil, 0); err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	order := settlement.SweepOrder{VoucherID: "vch_adapter", Deposit: strings.ToLower(dep.Hex()), Payout: payout.Hex()}
	wrong := order
	wrong.VoucherID = "vch_other"
	if _, err := sw.Send(ctx, []settlement.SweepOrder{wrong}); err == nil || !strings.Contains(err.Error(), "not the factory's") {
		t.Fatalf("an order for another voucher's address: %v", err)
	}
	if n, _ := sim.Client.PendingNonceAt(ctx, key.Address); n != 0 {
		t.Fatalf("the refused order sent a transaction (nonce %d)", n)
	}
	tx, err := sw.Send(ctx, []settlement.SweepOrder{order})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Send(ctx, []settlement.SweepOrder{order}); !errors.Is(err, settlement.ErrSweepBusy) {
		t.Fatalf("a second sweep in flight: %v", err)
	}
	if out, err := sw.Outcome(ctx, tx); err != nil || out.Mined {
		t.Fatalf("before its block: %+v %v", out, err)
	}
	var out settlement.SweepOutcome
	for range 50 {
		sim.Commit()
		if out, err = sw.Outcome(ctx, tx); err != nil || out.Mined {
			break
		}
	}
	if err != nil || !out.Mined || len(out.Moved) != 1 || out.Moved[strings.ToLower(dep.Hex())].Int64() != 777 {
		t.Fatalf("outcome %+v %v", out, err)
	}
	if bal, err := sim.Client.BalanceAt(ctx, payout, nil); err != nil || bal.Int64() != 777 {
		t.Fatalf("payout holds %v (%v)", bal, err)
	}
	if _, err := sw.Outcome(ctx, "0x"+strings.Repeat("ab", 32)); !errors.Is(err, settlement.ErrSweepFailed) {
		t.Fatalf("an unknown sweep transaction: %v", err)
	}
}
