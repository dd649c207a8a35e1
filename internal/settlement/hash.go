package settlement

import (
	"errors"

	"github.com/voucherd/voucherd/internal/chain"
)

// Errors of a transaction hash's shape; their texts are validation reasons.
var (
	errHashRequired = errors.New("is required on a network whose payments are checked on chain")
	errEVMHash      = errors.New("must be 0x followed by 64 hex digits")
	errSolanaSig    = errors.New("must be a base58 transaction signature (64 bytes)")
)

// CanonicalHash checks a receipt's transactionHash against the shape of
// networkType's transaction ids and returns the form claims are stored and
// looked up in: lower-case hex for evm (hex is case-insensitive, so two
// spellings of one hash are one claim), the signature itself for solana
// (base58 is case-sensitive).
func CanonicalHash(networkType, h string) (string, error) {
	if h == "" {
		return "", errHashRequired
	}
	switch networkType {
	case chain.TypeEVM:
		if len(h) != 66 || h[0] != '0' || h[1] != 'x' {
			return "", errEVMHash
		}
		b := []byte(h)
		for i := 2; i < len(b); i++ {
			c := b[i]
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			case c >= 'A' && c <= 'F':
				b[i] = c + ('a' - 'A')
			default:
				return "", errEVMHash
			}
		}
		return string(b), nil
	case chain.TypeSolana:
		// A signature is 64 bytes: at most 88 base58 characters. The bound
		// comes first because decoding is quadratic in the length.
		if len(h) < 64 || len(h) > 88 {
			return "", errSolanaSig
		}
		b, err := chain.DecodeBase58(h)
		if err != nil || len(b) != 64 {
			return "", errSolanaSig
		}
		return h, nil
	default:
		return "", chain.ErrUnknownType
	}
}
