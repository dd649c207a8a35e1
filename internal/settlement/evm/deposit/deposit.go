// Package deposit is the service's side of the deposit contracts
// (contracts/deposit/DepositFactory.sol, compiled once by
// contracts/build.mjs; ABI and bytecode are committed under artifacts/).
//
// A checkout on a network whose finance entry names a depositFactory is paid
// to its own deposit address: the CREATE2 address, under that factory, of a
// DepositForwarder whose only destination is the checkout's payout wallet.
// The salt is keccak256 of the voucher id's UTF-8 bytes, so the address
// follows from (factory, payout, voucher id) alone: the service computes it
// without a round trip, and anyone can recompute and check it
// (DepositFactory.depositAddress). Funds at a deposit address can only move
// to its payout wallet (DepositFactory.flush, callable by anyone); the
// service holds no key that can move them.
package deposit

import (
	"bytes"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
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
		panic(fmt.Sprintf("deposit: %s ABI: %v", name, err))
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
		panic(fmt.Sprintf("deposit: %s bytecode: %v", name, err))
	}
	return code
}

// The compiled contracts: the factory's ABI and creation code (what
// `voucherd deploy-factory` sends), and the forwarder's creation code (what
// CREATE2 addresses are computed from).
var (
	FactoryABI    = mustABI("DepositFactory")
	FactoryCode   = mustBin("DepositFactory")
	ForwarderABI  = mustABI("DepositForwarder")
	forwarderCode = mustBin("DepositForwarder")
)

// FlushedTopic is the topic of the factory's
// Flushed(address indexed deposit, address indexed payout, address indexed token, uint256 amount).
var FlushedTopic = FactoryABI.Events["Flushed"].ID

// Salt is a checkout's CREATE2 salt: keccak256(utf8(voucherID)).
func Salt(voucherID string) common.Hash {
	return crypto.Keccak256Hash([]byte(voucherID))
}

// Address is the deposit address of (payout, salt) under factory: the
// CREATE2 address of DepositForwarder(payout), exactly what the factory's
// depositAddress(payout, salt) returns.
func Address(factory, payout common.Address, salt common.Hash) common.Address {
	init := make([]byte, 0, len(forwarderCode)+32)
	init = append(init, forwarderCode...)
	init = append(init, common.LeftPadBytes(payout.Bytes(), 32)...)
	return crypto.CreateAddress2(factory, salt, crypto.Keccak256(init))
}

// ForVoucher is the deposit address of the checkout voucherID paying out to
// payout under factory.
func ForVoucher(factory, payout common.Address, voucherID string) common.Address {
	return Address(factory, payout, Salt(voucherID))
}

// Flush is one deposit address to flush: its payout, its salt, and the
// token (the zero address: the native currency).
type Flush struct {
	Payout common.Address
	Salt   common.Hash
	Token  common.Address
}

// FlushData is the input of DepositFactory.flush(payout, salt, token).
func FlushData(f Flush) []byte {
	return pack("flush", f.Payout, f.Salt, f.Token)
}

// FlushManyData is the input of DepositFactory.flushMany for fs, one
// transaction for many deposit addresses (one that fails is skipped by the
// contract, not the batch).
func FlushManyData(fs []Flush) []byte {
	payouts := make([]common.Address, len(fs))
	salts := make([][32]byte, len(fs))
	tokens := make([]common.Address, len(fs))
	for i, f := range fs {
		payouts[i], salts[i], tokens[i] = f.Payout, f.Salt, f.Token
	}
	return pack("flushMany", payouts, salts, tokens)
}

// DepositAddressData is the input of DepositFactory.depositAddress(payout, salt).
func DepositAddressData(payout common.Address, salt common.Hash) []byte {
	return pack("depositAddress", payout, salt)
}

func pack(method string, args ...any) []byte {
	b, err := FactoryABI.Pack(method, args...)
	if err != nil {
		panic(fmt.Sprintf("deposit: pack %s: %v", method, err))
	}
	return b
}
