package testchain

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/rpc"
)

// SimChainID is the chain id of go-ethereum's simulated chain (fixed by
// go-ethereum; the dev chain and the anvil test use it too).
const SimChainID = 1337

// Ether is 10^18 wei.
var Ether = new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)

// Sim is an in-process go-ethereum chain (ethclient/simulated): blocks are
// made by Commit, reorgs by Fork, time moves with AdjustTime.
type Sim struct {
	*simulated.Backend
	// Client is the simulated backend's ethclient; RPC a raw JSON-RPC
	// client of the same node (over a private IPC socket: the simulated
	// backend does not hand out its in-process rpc.Client), which the
	// settlement adapter and Handler take.
	Client simulated.Client
	RPC    *rpc.Client
	dir    string
}

// NewSim starts a simulated chain with each of funded holding 10,000 ether.
// Close it when done.
func NewSim(funded ...common.Address) *Sim {
	alloc := types.GenesisAlloc{}
	for _, a := range funded {
		alloc[a] = types.Account{Balance: new(big.Int).Mul(big.NewInt(10_000), Ether)}
	}
	dir, err := os.MkdirTemp("", "sim")
	if err != nil {
		panic(err)
	}
	ipc := filepath.Join(dir, "n.ipc")
	b := simulated.NewBackend(alloc, func(nc *node.Config, _ *ethconfig.Config) { nc.IPCPath = ipc })
	raw, err := rpc.Dial(ipc)
	if err != nil {
		_ = b.Close()
		panic(fmt.Sprintf("testchain: dialing the simulated chain: %v", err))
	}
	return &Sim{Backend: b, Client: b.Client(), RPC: raw, dir: dir}
}

// Close stops the chain.
func (s *Sim) Close() error {
	s.RPC.Close()
	err := s.Backend.Close()
	_ = os.RemoveAll(s.dir)
	return err
}
