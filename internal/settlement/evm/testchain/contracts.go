// Package testchain holds the test contracts (a minimal ERC-20 and a
// Chainlink-compatible aggregator mock, compiled once by contracts/build.mjs
// with the npm solc package; ABI and bytecode are committed under artifacts/)
// and small helpers to deploy and call them on any EVM node: go-ethereum's
// in-process simulated chain (NewSim), the dev chain (`voucherd devchain`) or an
// independent node such as anvil. It also serves a simulated chain over
// HTTP JSON-RPC (Handler).
//
// The keys in DevKeys are public test keys (the ones anvil and hardhat
// prefund): never send real value to them.
package testchain

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

//go:embed artifacts
var artifacts embed.FS

func mustABI(name string) abi.ABI {
	b, err := artifacts.ReadFile("artifacts/" + name + ".abi.json")
	if err != nil {
		panic(err)
	}
	a, err := abi.JSON(bytes.NewReader(b))
	if err != nil {
		panic(fmt.Sprintf("testchain: %s ABI: %v", name, err))
	}
	return a
}

func mustBin(name string) []byte {
	b, err := artifacts.ReadFile("artifacts/" + name + ".bin")
	if err != nil {
		panic(err)
	}
	code, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		panic(fmt.Sprintf("testchain: %s bytecode: %v", name, err))
	}
	return code
}

// The compiled contracts.
var (
	TokenABI       = mustABI("TestToken")
	TokenCode      = mustBin("TestToken")
	AggregatorABI  = mustABI("MockAggregator")
	AggregatorCode = mustBin("MockAggregator")
	DisperseABI    = mustABI("TestDisperse")
	DisperseCode   = mustBin("TestDisperse")
)

// DevKeys are the well-known development keys (anvil's and hardhat's
// default accounts 0..4, from the mnemonic "test test ... junk"). The dev
// chain prefunds them; anvil does too. Public: test money only.
var DevKeys = []string{
	"ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
	"59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
	"5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
	"7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
	"47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
}

// DevFactoryDeployerKey and DevSweepKey are anvil's and hardhat's default
// accounts 8 and 9 (same mnemonic; public: test money only). The dev chain
// prefunds both; the first creates the deposit factory at its nonce 0, so
// the factory's address is the same on the dev chain and on a fresh anvil
// (DevFactory); the second is the dev sweep key (gas only).
const (
	DevFactoryDeployerKey = "dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97"
	DevSweepKey           = "2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6"
)

// KeyAccount returns a hex key's Account.
func KeyAccount(hexKey string) Account {
	k, err := crypto.HexToECDSA(hexKey)
	if err != nil {
		panic(err)
	}
	return Account{Key: k, Address: crypto.PubkeyToAddress(k.PublicKey)}
}

// DevFactory is where DevFactoryDeployerKey's first transaction, the
// deposit factory's creation, puts it.
func DevFactory() common.Address {
	return crypto.CreateAddress(KeyAccount(DevFactoryDeployerKey).Address, 0)
}

// Account is a key and its address.
type Account struct {
	Key     *ecdsa.PrivateKey
	Address common.Address
}

// DevAccount returns DevKeys[i] as an Account.
func DevAccount(i int) Account { return KeyAccount(DevKeys[i]) }

// NewAccount makes a fresh random account (unfunded).
func NewAccount() Account {
	k, err := crypto.GenerateKey()
	if err != nil {
		panic(err)
	}
	return Account{Key: k, Address: crypto.PubkeyToAddress(k.PublicKey)}
}

// Backend is what sending needs from a node: ethclient.Client and the
// simulated chain's client both have it.
type Backend interface {
	ethereum.ChainIDReader
	ethereum.PendingStateReader
	ethereum.GasPricer
	ethereum.GasPricer1559
	ethereum.GasEstimator
	ethereum.TransactionSender
	ethereum.TransactionReader
}

// Send signs and sends an EIP-1559 transaction from `from` to `to` (nil:
// contract creation) with value and data. gas 0 estimates it; a fixed gas
// lets a test send a transaction that will revert (estimation refuses
// those). It returns the transaction's hash without waiting for a block.
//
// The nonce is the node's pending nonce. After a simulated chain's Commit
// its transaction pool resets to the new head in the background, and until
// it has, the pending nonce can be stale: the node then refuses the
// transaction as reusing a nonce ("nonce too low", "replacement transaction
// underpriced"). Send asks again for a moment in that case; any other
// refusal is returned at once.
func Send(ctx context.Context, b Backend, from Account, to *common.Address, value *big.Int, data []byte, gas uint64) (common.Hash, error) {
	for attempt := 0; ; attempt++ {
		nonce, err := b.PendingNonceAt(ctx, from.Address)
		if err != nil {
			return common.Hash{}, err
		}
		h, err := SendNonce(ctx, b, from, nonce, to, value, data, gas)
		if err == nil || attempt == 100 || !staleNonce(err) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return common.Hash{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// staleNonce tells the node's refusals of a nonce already used.
func staleNonce(err error) bool {
	m := err.Error()
	return strings.Contains(m, "nonce too low") || strings.Contains(m, "replacement transaction underpriced")
}

// SendNonce is Send with the nonce given. After a simulated chain's Commit
// its transaction pool resets in the background, so PendingNonceAt can
// still answer from the old head for a moment; a sender that knows its
// nonces (a fresh account sending in sequence) gives them here instead.
func SendNonce(ctx context.Context, b Backend, from Account, nonce uint64, to *common.Address, value *big.Int, data []byte, gas uint64) (common.Hash, error) {
	chainID, err := b.ChainID(ctx)
	if err != nil {
		return common.Hash{}, err
	}
	// An EIP-1559 transaction tipping what the node suggests, with room for
	// the base fee to double. (A legacy transaction priced at twice the
	// suggested gas price fed back into anvil's suggestion, which follows
	// the tips recently paid: the price doubled with every block.)
	tip, err := b.SuggestGasTipCap(ctx)
	if err != nil {
		return common.Hash{}, err
	}
	price, err := b.SuggestGasPrice(ctx)
	if err != nil {
		return common.Hash{}, err
	}
	feeCap := new(big.Int).Add(new(big.Int).Mul(price, big.NewInt(2)), tip)
	if value == nil {
		value = new(big.Int)
	}
	if gas == 0 {
		gas, err = b.EstimateGas(ctx, ethereum.CallMsg{From: from.Address, To: to, Value: value, Data: data})
		if err != nil {
			return common.Hash{}, fmt.Errorf("estimate gas: %w", err)
		}
		gas += gas / 4
	}
	tx := types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas, To: to, Value: value, Data: data})
	signed, err := types.SignTx(tx, types.LatestSignerForChainID(chainID), from.Key)
	if err != nil {
		return common.Hash{}, err
	}
	if err := b.SendTransaction(ctx, signed); err != nil {
		return common.Hash{}, err
	}
	// A simulated chain's pool takes a transaction in asynchronously: it is
	// queued first and made executable in the background, and a Commit
	// before that mines a block without it (a cold make test saw a sender
	// left unfunded and a reverted transaction missing from its block).
	// Wait, a moment at most, until the node's pending nonce for the sender
	// is past this one; a real node (anvil) answers so at once.
	for i := 0; i < 500; i++ {
		if n, err := b.PendingNonceAt(ctx, from.Address); err != nil || n > nonce {
			break
		}
		select {
		case <-ctx.Done():
			return signed.Hash(), nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return signed.Hash(), nil
}

// Wait polls for the receipt of h (on a chain that mines by itself; on the
// simulated chain call Commit instead).
func Wait(ctx context.Context, b Backend, h common.Hash) (*types.Receipt, error) {
	for {
		r, err := b.TransactionReceipt(ctx, h)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ethereum.NotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DeployTokenData is the creation input of a TestToken.
func DeployTokenData(name, symbol string, decimals uint8) []byte {
	args, err := TokenABI.Pack("", name, symbol, decimals)
	if err != nil {
		panic(err)
	}
	return append(append([]byte(nil), TokenCode...), args...)
}

// DeployAggregatorData is the creation input of a MockAggregator.
func DeployAggregatorData(decimals uint8, description string) []byte {
	args, err := AggregatorABI.Pack("", decimals, description)
	if err != nil {
		panic(err)
	}
	return append(append([]byte(nil), AggregatorCode...), args...)
}

// MintData is TestToken.mint(to, value).
func MintData(to common.Address, value *big.Int) []byte { return pack(TokenABI, "mint", to, value) }

// TransferData is ERC-20 transfer(to, value).
func TransferData(to common.Address, value *big.Int) []byte {
	return pack(TokenABI, "transfer", to, value)
}

// SetAnswerData is MockAggregator.set(answer, updatedAt).
func SetAnswerData(answer *big.Int, updatedAt time.Time) []byte {
	return pack(AggregatorABI, "set", answer, big.NewInt(updatedAt.Unix()))
}

// ApproveData is the input of an ERC-20 approve(spender, value).
func ApproveData(spender common.Address, value *big.Int) []byte {
	return pack(TokenABI, "approve", spender, value)
}

// DisperseTokenData is the input of TestDisperse.disperseToken: one
// transaction paying each of to its value of token (from the sender, who
// approved the disperse contract), as a batched withdrawal does.
func DisperseTokenData(token common.Address, to []common.Address, values []*big.Int) []byte {
	return pack(DisperseABI, "disperseToken", token, to, values)
}

// DisperseEtherData is the input of TestDisperse.disperseEther (the
// transaction's value is the sum of values).
func DisperseEtherData(to []common.Address, values []*big.Int) []byte {
	return pack(DisperseABI, "disperseEther", to, values)
}

func pack(a abi.ABI, method string, args ...any) []byte {
	b, err := a.Pack(method, args...)
	if err != nil {
		panic(fmt.Sprintf("testchain: pack %s: %v", method, err))
	}
	return b
}

// CreateAddress is the address a contract created by from at nonce gets
// (how the dev chain's token addresses are fixed in advance).
func CreateAddress(from common.Address, nonce uint64) common.Address {
	return crypto.CreateAddress(from, nonce)
}

// TransferTopic is the topic of Transfer(address,address,uint256).
var TransferTopic = crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
