package deposit_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testanvil"
)

// node is what the tests read and send through: the simulated chain's
// client and ethclient (anvil) both have it.
type node interface {
	testchain.Backend
	BalanceAt(ctx context.Context, a common.Address, block *big.Int) (*big.Int, error)
	CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error)
	CodeAt(ctx context.Context, a common.Address, block *big.Int) ([]byte, error)
}

// world is one chain with the factory and a token deployed; owner (a dev
// account) holds the token and ether and pays the deposits.
type world struct {
	t       *testing.T
	ctx     context.Context
	c       node
	rpc     *rpc.Client
	mineFn  func() // nil: the node mines by itself
	owner   testchain.Account
	factory common.Address
	token   common.Address
}

func simWorld(t *testing.T) (*world, *testchain.Sim) {
	owner := testchain.DevAccount(0)
	sim := testchain.NewSim(owner.Address, testchain.DevAccount(1).Address)
	t.Cleanup(func() { _ = sim.Close() })
	w := &world{t: t, ctx: context.Background(), c: sim.Client, rpc: sim.RPC, mineFn: func() { sim.Commit() }, owner: owner}
	w.deploy()
	return w, sim
}

func anvilWorld(t *testing.T) (*world, *testanvil.Anvil) {
	a := testanvil.Start(t, 0)
	w := &world{t: t, ctx: context.Background(), c: a.Client, rpc: a.Client.Client(), owner: testchain.DevAccount(0)}
	w.deploy()
	return w, a
}

func (w *world) deploy() {
	w.factory = w.mine(w.send(w.owner, nil, nil, deposit.FactoryCode))[0].ContractAddress
	w.token = w.mine(w.send(w.owner, nil, nil, testchain.DeployTokenData("USD Coin", "USDC", 6)))[0].ContractAddress
	w.mine(w.send(w.owner, &w.token, nil, testchain.MintData(w.owner.Address, big.NewInt(1_000_000_000_000))))
}

func (w *world) send(from testchain.Account, to *common.Address, value *big.Int, data []byte) common.Hash {
	w.t.Helper()
	h, err := testchain.Send(w.ctx, w.c, from, to, value, data, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

// mine waits for each transaction's receipt (on the simulated chain it
// commits blocks until they are in) and fails the test on a revert.
func (w *world) mine(hs ...common.Hash) []*types.Receipt {
	w.t.Helper()
	out := make([]*types.Receipt, len(hs))
	for i, h := range hs {
		for tries := 0; ; tries++ {
			if w.mineFn != nil {
				w.mineFn()
			}
			ctx, cancel := context.WithTimeout(w.ctx, 20*time.Millisecond)
			if w.mineFn == nil {
				cancel()
				ctx, cancel = context.WithTimeout(w.ctx, 30*time.Second)
			}
			r, err := testchain.Wait(ctx, w.c, h)
			cancel()
			if err == nil {
				if r.Status != 1 {
					w.t.Fatalf("transaction %s reverted", h.Hex())
				}
				out[i] = r
				break
			}
			if w.mineFn == nil || tries == 50 {
				w.t.Fatalf("transaction %s: %v", h.Hex(), err)
			}
		}
	}
	return out
}

// balance is a's balance of token (the zero address: native).
func (w *world) balance(token, a common.Address) *big.Int {
	w.t.Helper()
	if token == (common.Address{}) {
		b, err := w.c.BalanceAt(w.ctx, a, nil)
		if err != nil {
			w.t.Fatal(err)
		}
		return b
	}
	data, err := testchain.TokenABI.Pack("balanceOf", a)
	if err != nil {
		w.t.Fatal(err)
	}
	out, err := w.c.CallContract(w.ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	if err != nil || len(out) != 32 {
		w.t.Fatalf("balanceOf: %x %v", out, err)
	}
	return new(big.Int).SetBytes(out)
}

// pay sends amount of token (zero: native) from the owner to a.
func (w *world) pay(token, a common.Address, amount int64) {
	w.t.Helper()
	if token == (common.Address{}) {
		w.mine(w.send(w.owner, &a, big.NewInt(amount), nil))
		return
	}
	w.mine(w.send(w.owner, &token, nil, testchain.TransferData(a, big.NewInt(amount))))
}

// flushed is the Flushed logs of a receipt, by deposit address.
func (w *world) flushed(r *types.Receipt) map[common.Address]deposit.Flushed {
	out := map[common.Address]deposit.Flushed{}
	for _, l := range r.Logs {
		if l.Address != w.factory || len(l.Topics) != 4 || l.Topics[0] != deposit.FlushedTopic {
			continue
		}
		f := deposit.Flushed{
			Deposit: common.BytesToAddress(l.Topics[1].Bytes()), Payout: common.BytesToAddress(l.Topics[2].Bytes()),
			Token: common.BytesToAddress(l.Topics[3].Bytes()), Amount: new(big.Int).SetBytes(l.Data),
		}
		if _, twice := out[f.Deposit]; twice {
			w.t.Fatalf("two Flushed logs for %s", f.Deposit.Hex())
		}
		out[f.Deposit] = f
	}
	return out
}

func (w *world) eq(what string, got *big.Int, want int64) {
	w.t.Helper()
	if got.Cmp(big.NewInt(want)) != 0 {
		w.t.Fatalf("%s: %v, want %d", what, got, want)
	}
}

// checkout is one deposit address: a fresh payout and a voucher id's salt.
type checkout struct {
	payout common.Address
	salt   common.Hash
	addr   common.Address
}

func (w *world) checkout(id string) checkout {
	p := testchain.NewAccount().Address
	return checkout{payout: p, salt: deposit.Salt(id), addr: deposit.ForVoucher(w.factory, p, id)}
}

func (w *world) flush(from testchain.Account, co checkout, payout, token common.Address) *types.Receipt {
	w.t.Helper()
	return w.mine(w.send(from, &w.factory, nil, deposit.FlushData(deposit.Flush{Payout: payout, Salt: co.salt, Token: token})))[0]
}

// contractCases are the contract's promises, run on the simulated chain
// and on anvil.
func contractCases(t *testing.T, w *world) {
	native := common.Address{}
	t.Run("address", func(t *testing.T) {
		w.t = t
		for _, id := range []string{"vch_01", "vch_02", "ünïcode-id"} {
			co := w.checkout(id)
			out, err := w.c.CallContract(w.ctx, ethereum.CallMsg{To: &w.factory, Data: deposit.DepositAddressData(co.payout, co.salt)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := common.BytesToAddress(out); got != co.addr {
				t.Fatalf("%s: factory says %s, service computes %s", id, got, co.addr)
			}
			w.flush(w.owner, co, co.payout, native)
			if code, err := w.c.CodeAt(w.ctx, co.addr, nil); err != nil || len(code) == 0 {
				t.Fatalf("%s: no forwarder at %s after flush (%v)", id, co.addr, err)
			}
		}
	})
	t.Run("token and native, before and after the forwarder exists", func(t *testing.T) {
		w.t = t
		co := w.checkout("vch_token_native")
		// Both arrive before the forwarder exists (a plain address).
		w.pay(w.token, co.addr, 7_250_000)
		w.pay(native, co.addr, 1_000)
		r := w.flush(w.owner, co, co.payout, w.token)
		if f := w.flushed(r)[co.addr]; f.Amount == nil || f.Amount.Int64() != 7_250_000 || f.Payout != co.payout || f.Token != w.token {
			t.Fatalf("Flushed %+v", f)
		}
		w.eq("payout's token", w.balance(w.token, co.payout), 7_250_000)
		w.eq("deposit's token", w.balance(w.token, co.addr), 0)
		w.eq("deposit's native, untouched by a token flush", w.balance(native, co.addr), 1_000)
		w.flush(w.owner, co, co.payout, native)
		w.eq("payout's native", w.balance(native, co.payout), 1_000)
		// After: the forwarder accepts native and tokens, and the next
		// flush moves them.
		w.pay(native, co.addr, 500)
		w.pay(w.token, co.addr, 250_000)
		w.eq("forwarder's native", w.balance(native, co.addr), 500)
		w.flush(w.owner, co, co.payout, native)
		w.flush(w.owner, co, co.payout, w.token)
		w.eq("payout's native", w.balance(native, co.payout), 1_500)
		w.eq("payout's token", w.balance(w.token, co.payout), 7_500_000)
		w.eq("deposit's native", w.balance(native, co.addr), 0)
	})
	t.Run("a wrong payout moves nothing", func(t *testing.T) {
		w.t = t
		co := w.checkout("vch_wrong_payout")
		w.pay(w.token, co.addr, 3_000_000)
		w.pay(native, co.addr, 700)
		thief := testchain.NewAccount().Address
		for _, tk := range []common.Address{w.token, native} {
			r := w.flush(w.owner, co, thief, tk)
			for d, f := range w.flushed(r) {
				if d == co.addr || f.Amount.Sign() != 0 {
					t.Fatalf("a flush naming another payout moved %v from %s", f.Amount, d.Hex())
				}
			}
		}
		w.eq("thief's token", w.balance(w.token, thief), 0)
		w.eq("thief's native", w.balance(native, thief), 0)
		w.eq("deposit's token", w.balance(w.token, co.addr), 3_000_000)
		w.eq("deposit's native", w.balance(native, co.addr), 700)
		w.flush(w.owner, co, co.payout, w.token)
		w.eq("payout's token", w.balance(w.token, co.payout), 3_000_000)
	})
	t.Run("flush twice is harmless", func(t *testing.T) {
		w.t = t
		co := w.checkout("vch_twice")
		w.pay(w.token, co.addr, 1_000_000)
		w.flush(w.owner, co, co.payout, w.token)
		r := w.flush(w.owner, co, co.payout, w.token)
		if f, ok := w.flushed(r)[co.addr]; !ok || f.Amount.Sign() != 0 {
			t.Fatalf("second flush: %+v %v", f, ok)
		}
		w.eq("payout's token after two flushes", w.balance(w.token, co.payout), 1_000_000)
		r = w.flush(w.owner, co, co.payout, native) // nothing native there
		if f := w.flushed(r)[co.addr]; f.Amount.Sign() != 0 {
			t.Fatalf("native flush of an empty address: %+v", f)
		}
	})
	t.Run("a stranger's flush only pays the payout", func(t *testing.T) {
		w.t = t
		co := w.checkout("vch_stranger")
		stranger := testchain.NewAccount()
		w.pay(native, stranger.Address, 1e17)
		w.pay(w.token, co.addr, 2_000_000)
		w.pay(native, co.addr, 900)
		before := w.balance(native, stranger.Address)
		r := w.flush(stranger, co, co.payout, w.token)
		gas := new(big.Int).Mul(new(big.Int).SetUint64(r.GasUsed), r.EffectiveGasPrice)
		// The forwarder exists now; the stranger calls it directly too.
		fwd := co.addr
		data, err := deposit.ForwarderABI.Pack("flush", native)
		if err != nil {
			t.Fatal(err)
		}
		r2 := w.mine(w.send(stranger, &fwd, nil, data))[0]
		gas.Add(gas, new(big.Int).Mul(new(big.Int).SetUint64(r2.GasUsed), r2.EffectiveGasPrice))
		w.eq("payout's token", w.balance(w.token, co.payout), 2_000_000)
		w.eq("payout's native", w.balance(native, co.payout), 900)
		w.eq("stranger's token", w.balance(w.token, stranger.Address), 0)
		if got := w.balance(native, stranger.Address); new(big.Int).Sub(before, got).Cmp(gas) != 0 {
			t.Fatalf("the stranger's ether moved by %v, its gas cost %v", new(big.Int).Sub(before, got), gas)
		}
	})
	t.Run("flushMany sweeps the others when one entry fails", func(t *testing.T) {
		w.t = t
		a, b, c := w.checkout("vch_many_a"), w.checkout("vch_many_b"), w.checkout("vch_many_c")
		w.pay(w.token, a.addr, 1_100_000)
		w.pay(w.token, b.addr, 2_200_000)
		w.pay(native, c.addr, 3_300)
		// b names an account with no code as its token: balanceOf fails,
		// so that entry reverts inside the batch.
		notAToken := testchain.NewAccount().Address
		r := w.mine(w.send(w.owner, &w.factory, nil, deposit.FlushManyData([]deposit.Flush{
			{Payout: a.payout, Salt: a.salt, Token: w.token},
			{Payout: b.payout, Salt: b.salt, Token: notAToken},
			{Payout: c.payout, Salt: c.salt, Token: native},
		})))[0]
		got := w.flushed(r)
		if len(got) != 2 || got[a.addr].Amount.Int64() != 1_100_000 || got[c.addr].Amount.Int64() != 3_300 {
			t.Fatalf("Flushed %+v", got)
		}
		if _, ok := got[b.addr]; ok {
			t.Fatalf("the failing entry logged a flush: %+v", got[b.addr])
		}
		w.eq("a's payout", w.balance(w.token, a.payout), 1_100_000)
		w.eq("c's payout", w.balance(native, c.payout), 3_300)
		w.eq("b's deposit, kept", w.balance(w.token, b.addr), 2_200_000)
		w.eq("b's payout", w.balance(w.token, b.payout), 0)
		// A mismatched batch is refused whole.
		bad, err := deposit.FactoryABI.Pack("flushMany", []common.Address{a.payout}, [][32]byte{}, []common.Address{w.token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.c.EstimateGas(w.ctx, ethereum.CallMsg{From: w.owner.Address, To: &w.factory, Data: bad}); err == nil {
			t.Fatal("flushMany with arrays of different lengths did not revert")
		}
	})
}

func TestContractOnSimulatedChain(t *testing.T) {
	w, _ := simWorld(t)
	contractCases(t, w)
}

func TestContractOnAnvil(t *testing.T) {
	w, _ := anvilWorld(t)
	contractCases(t, w)
}
