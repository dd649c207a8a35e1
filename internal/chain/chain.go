// Package chain knows what a valid on-chain address looks like for each kind
// of network the service supports, so a payment to a mistyped address is
// refused when the voucher is redeemed instead of being lost on chain.
//
// EVM: "0x" (lower-case x) and 40 hex digits. An all-lower or all-upper
// address carries no checksum and is accepted as is; a mixed-case one claims
// an EIP-55 checksum, which must then be right — that is the only protection
// EVM addresses have against typos.
//
// Solana: base58 (Bitcoin alphabet) that decodes to exactly 32 bytes. Whether
// the key lies on the ed25519 curve is deliberately not checked: program
// derived addresses (token accounts, many mints) are off-curve by design.
package chain

import (
	"errors"
	"strings"
	"sync"

	"golang.org/x/crypto/sha3"
)

// Network types, as they appear in the API (networks[].type) and the finance
// config.
const (
	TypeEVM    = "evm"
	TypeSolana = "solana"
)

// The errors' texts are written to be used directly as the "reason" of a
// validation detail; match them with errors.Is.
var (
	ErrEmpty           = errors.New("is required")
	ErrUnknownType     = errors.New(`unknown network type (want "evm" or "solana")`)
	ErrEVMFormat       = errors.New("must be 0x followed by 40 hex digits")
	ErrEVMChecksum     = errors.New("has mixed case but an invalid EIP-55 checksum")
	ErrSolanaAlphabet  = errors.New("must be base58 (no 0, O, I or l)")
	ErrSolanaLength    = errors.New("must be base58 of exactly 32 bytes")
	ErrBase58Character = errors.New("invalid base58 character")
)

// KnownType reports whether t is a supported network type.
func KnownType(t string) bool { return t == TypeEVM || t == TypeSolana }

// ValidateAddress checks addr against the rules of networkType.
func ValidateAddress(networkType, addr string) error {
	switch networkType {
	case TypeEVM:
		return ValidateEVMAddress(addr)
	case TypeSolana:
		return ValidateSolanaAddress(addr)
	default:
		return ErrUnknownType
	}
}

// SameAddress reports whether two addresses, each already valid for
// networkType, name the same account. EVM case carries only the checksum, so
// it is ignored; base58 is case-sensitive, so Solana compares exactly.
func SameAddress(networkType, a, b string) bool {
	if networkType == TypeEVM {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// ValidateEVMAddress checks format and, for mixed case, the EIP-55 checksum.
func ValidateEVMAddress(addr string) error {
	if addr == "" {
		return ErrEmpty
	}
	if !isEVMShape(addr) {
		return ErrEVMFormat
	}
	body := addr[2:]
	lower, upper := false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		lower = lower || (c >= 'a' && c <= 'f')
		upper = upper || (c >= 'A' && c <= 'F')
	}
	if lower && upper && ChecksumAddress(addr) != addr {
		return ErrEVMChecksum
	}
	return nil
}

// isEVMShape is "0x" + 40 hex digits, ignoring the checksum.
func isEVMShape(addr string) bool {
	if len(addr) != 42 || addr[0] != '0' || addr[1] != 'x' {
		return false
	}
	for i := 2; i < len(addr); i++ {
		c := addr[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// ChecksumAddress returns the EIP-55 form of addr, whatever the case of its
// hex digits (so it also normalises an all-lower address). It does not verify
// addr's own checksum. It returns "" when addr is not "0x" + 40 hex digits:
// there is no checksum form of a malformed address, and an empty string can
// never pass for one.
func ChecksumAddress(addr string) string {
	if !isEVMShape(addr) {
		return ""
	}
	// One allocation, the result: the keccak state comes from a pool and
	// the hash sits in an array (a token's address is checksummed on
	// every payment a request carries).
	var out [42]byte
	out[0], out[1] = '0', 'x'
	for i := 2; i < 42; i++ {
		c := addr[i]
		if c >= 'A' && c <= 'F' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	h := keccakPool.Get().(keccak)
	h.Reset()
	h.Write(out[2:])
	var sum [32]byte
	h.Read(sum[:])
	keccakPool.Put(h)
	for i := 0; i < 40; i++ {
		// EIP-55: upper-case a letter when the matching nibble of
		// keccak256(lower-case hex) is >= 8.
		nibble := sum[i/2] >> 4
		if i%2 == 1 {
			nibble = sum[i/2] & 0x0f
		}
		if c := out[2+i]; c >= 'a' && c <= 'f' && nibble >= 8 {
			out[2+i] = c - 'a' + 'A'
		}
	}
	return string(out[:])
}

// keccak is sha3's legacy Keccak-256 state, read from like a sponge so
// the sum goes into the caller's array (Sum allocates).
type keccak interface {
	Reset()
	Write([]byte) (int, error)
	Read([]byte) (int, error)
}

// keccakPool holds Keccak-256 states.
var keccakPool = sync.Pool{New: func() any { return sha3.NewLegacyKeccak256().(keccak) }}

// solanaMaxLen is the longest base58 text of 32 bytes (2^256-1 needs 44
// digits). Checking it first keeps the quadratic decoder away from long
// hostile input.
const solanaMaxLen = 44

// ValidateSolanaAddress checks that addr is base58 of exactly 32 bytes.
func ValidateSolanaAddress(addr string) error {
	if addr == "" {
		return ErrEmpty
	}
	if len(addr) > solanaMaxLen {
		return ErrSolanaLength
	}
	b, err := DecodeBase58(addr)
	if err != nil {
		return ErrSolanaAlphabet
	}
	if len(b) != 32 {
		return ErrSolanaLength
	}
	return nil
}
