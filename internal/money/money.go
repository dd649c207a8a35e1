// Package money is the one place where the service turns strings from the
// outside world into amounts and back. Every amount in the API is a decimal
// string (never a JSON number, never a float); this package enforces the
// single grammar docs/vouchers.md states for it, the token-precision rule, and the
// canonical rendering, so REST, GraphQL, storage and webhooks agree on what a
// given amount looks like.
//
// Grammar: ^(0|[1-9][0-9]*)(\.[0-9]+)?$ — no sign, no exponent, no leading
// zeros, no bare "." and no whitespace. Amounts must be greater than zero.
//
// Precision: the number of fraction digits written (trailing zeros included)
// may not exceed the token's decimals. "1.50" is therefore rejected for a
// token with one decimal even though its value is representable: the rule is
// about what the client wrote, which keeps it simple to state and to test, and
// an amount that cannot be written in the token's precision is a client bug
// worth surfacing.
//
// Canonical form (Format): plain positional notation, no exponent, trailing
// fraction zeros and a trailing "." removed ("1.50" → "1.5", "2.000" → "2").
// It always re-parses under the same decimals it was parsed with.
package money

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/apperr"
)

// MaxLen caps every string this package parses. Parsing is linear, but the
// values feed big-integer arithmetic downstream; no real amount, price or
// uint256 value comes close (uint256 max has 78 digits).
const MaxLen = 100

// MaxHexDataLen caps calldata: "0x" plus 128 KiB of hex. Common EVM nodes
// (go-ethereum's txpool) refuse transactions larger than 128 KiB, so longer
// calldata could never be sent anyway.
const MaxHexDataLen = 2 + 2*128*1024

// The errors' texts are written to be used directly as the "reason" of a
// validation detail; match them with errors.Is.
var (
	ErrEmpty       = errors.New("is required")
	ErrTooLong     = fmt.Errorf("must be at most %d characters", MaxLen)
	ErrSyntax      = errors.New(`must be a decimal string such as "12.5" (digits, optional fraction; no sign, exponent, spaces or leading zeros)`)
	ErrNotPositive = errors.New("must be greater than zero")
	// ErrTooPrecise is matched by the *PrecisionError Parse returns; its own
	// text is generic because the limit depends on the token.
	ErrTooPrecise  = errors.New("has more fraction digits than the token allows")
	ErrBadDecimals = errors.New("token decimals must not be negative")

	ErrIntegerSyntax = errors.New(`must be a non-negative integer string such as "0" or "1000" (no sign, fraction or leading zeros)`)
	ErrIntegerRange  = errors.New("must fit in 256 bits")

	ErrHexPrefix = errors.New(`must start with "0x"`)
	ErrHexDigits = errors.New("must contain only hexadecimal digits after 0x")
	ErrHexOdd    = errors.New("must have an even number of hex digits (whole bytes)")
	ErrHexLong   = fmt.Errorf("must be at most %d characters", MaxHexDataLen)
)

// PrecisionError reports an amount written with more fraction digits than
// its token has decimals. It matches ErrTooPrecise.
type PrecisionError struct {
	Max int32
}

func (e *PrecisionError) Error() string {
	switch e.Max {
	case 0:
		return "must be a whole number for this token (it has no decimals)"
	case 1:
		return "must have at most 1 fraction digit for this token"
	default:
		return "must have at most " + strconv.Itoa(int(e.Max)) + " fraction digits for this token"
	}
}

// Is makes errors.Is(err, ErrTooPrecise) true.
func (e *PrecisionError) Is(target error) bool { return target == ErrTooPrecise }

// Parse parses an amount of a token with the given decimals: grammar, length
// cap, strictly positive, at most decimals fraction digits.
func Parse(s string, decimals int32) (decimal.Decimal, error) {
	if decimals < 0 {
		return decimal.Decimal{}, ErrBadDecimals
	}
	d, frac, err := parse(s)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if int64(frac) > int64(decimals) {
		return decimal.Decimal{}, &PrecisionError{Max: decimals}
	}
	return d, nil
}

// ParseAnyScale is Parse without the precision rule, for when the token is
// not known yet (an unknown network still deserves a syntax check of its
// amount) and for prices, which are not token amounts.
func ParseAnyScale(s string) (decimal.Decimal, error) {
	d, _, err := parse(s)
	return d, err
}

// parse is hand-written rather than a regexp so its cost is obvious and it
// hands back the fraction length it already counted; the tests check it
// against that grammar as a regexp.
func parse(s string) (decimal.Decimal, int, error) {
	if s == "" {
		return decimal.Decimal{}, 0, ErrEmpty
	}
	if len(s) > MaxLen {
		return decimal.Decimal{}, 0, ErrTooLong
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intLen := i
	if intLen == 0 || (intLen > 1 && s[0] == '0') {
		return decimal.Decimal{}, 0, ErrSyntax
	}
	frac := 0
	if i < len(s) {
		if s[i] != '.' {
			return decimal.Decimal{}, 0, ErrSyntax
		}
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		frac = i - start
		if frac == 0 || i != len(s) {
			return decimal.Decimal{}, 0, ErrSyntax
		}
	}
	digits := s[:intLen]
	if frac > 0 {
		digits += s[intLen+1:]
	}
	coef, ok := new(big.Int).SetString(digits, 10)
	if !ok { // unreachable: digits are all [0-9]
		return decimal.Decimal{}, 0, ErrSyntax
	}
	if coef.Sign() == 0 {
		return decimal.Decimal{}, 0, ErrNotPositive
	}
	return decimal.NewFromBigInt(coef, -int32(frac)), frac, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// Format renders d canonically (see the package comment). shopspring's
// String never uses exponent notation and trims trailing zeros, which is
// exactly the canonical form; Format exists so callers depend on the rule,
// not on a library detail, and the tests pin it.
func Format(d decimal.Decimal) string {
	return d.String()
}

// Validate parses field's amount and records any problem on v, so a request
// can report every bad field at once.
func Validate(v *apperr.Validator, field, s string, decimals int32) (decimal.Decimal, bool) {
	d, err := Parse(s, decimals)
	if err != nil {
		v.Add(field, err.Error())
		return decimal.Decimal{}, false
	}
	return d, true
}

// uint256Max is the largest value an EVM word (and so a transaction's value)
// can hold.
var uint256Max = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// CheckInteger validates a CUSTOM payment's native value: a non-negative
// integer string in base units ("0" or [1-9][0-9]*). It must also fit in 256
// bits, because nothing larger can be a transaction value and a value that
// can never be sent is better refused at redeem than at signing.
func CheckInteger(s string) error {
	_, err := ParseInteger(s)
	return err
}

// ParseInteger is CheckInteger returning the value.
func ParseInteger(s string) (*big.Int, error) {
	if s == "" {
		return nil, ErrEmpty
	}
	if len(s) > MaxLen {
		return nil, ErrTooLong
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return nil, ErrIntegerSyntax
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return nil, ErrIntegerSyntax
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok { // unreachable: all digits
		return nil, ErrIntegerSyntax
	}
	if n.Cmp(uint256Max) > 0 {
		return nil, ErrIntegerRange
	}
	return n, nil
}

// CheckHexData validates ABI calldata: "0x" followed by an even number of
// hex digits (either case). "0x" alone is valid: a plain native transfer has
// no calldata. The prefix must be lower-case "0x", as every EVM JSON-RPC
// encoder writes it.
func CheckHexData(s string) error {
	if s == "" {
		return ErrEmpty
	}
	if len(s) > MaxHexDataLen {
		return ErrHexLong
	}
	if len(s) < 2 || s[0] != '0' || s[1] != 'x' {
		return ErrHexPrefix
	}
	for i := 2; i < len(s); i++ {
		if !isHex(s[i]) {
			return ErrHexDigits
		}
	}
	if len(s)%2 != 0 {
		return ErrHexOdd
	}
	return nil
}

// CeilToDecimals returns the smallest multiple of 10^-decimals that is >= r,
// computed exactly (a negative decimals rounds up to tens, hundreds, ...). It is how a quote rounds in the payee's favour without
// ever rounding an intermediate value.
func CeilToDecimals(r *big.Rat, decimals int32) decimal.Decimal {
	num := new(big.Int).Set(r.Num())
	den := new(big.Int).Set(r.Denom()) // always > 0
	if decimals >= 0 {
		num.Mul(num, pow10(int64(decimals)))
	} else {
		den.Mul(den, pow10(-int64(decimals)))
	}
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	// QuoRem truncates toward zero; the ceiling only differs for a positive
	// remainder (a negative one means truncation already rounded up).
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return decimal.NewFromBigInt(q, -decimals)
}

// pow10 is 10ⁿ, from a table for the exponents token amounts use; the
// table's values are shared and never written (callers only read them).
func pow10(n int64) *big.Int {
	if n >= 0 && n < int64(len(powers10)) {
		return powers10[n]
	}
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(n), nil)
}

var powers10 = func() []*big.Int {
	t := make([]*big.Int, 40)
	for i := range t {
		t[i] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(i)), nil)
	}
	return t
}()
