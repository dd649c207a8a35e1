package money

import (
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/apperr"
)

// grammar is the grammar docs/vouchers.md states, used as an oracle for the
// hand-written scanner.
var grammar = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]+)?$`)

func TestParse(t *testing.T) {
	tests := []struct {
		in       string
		decimals int32
		want     string // canonical form on success
		err      error
	}{
		{"1", 6, "1", nil},
		{"0.1", 6, "0.1", nil},
		{"12.345678", 6, "12.345678", nil},
		{"1.50", 6, "1.5", nil},
		{"1.000000", 6, "1", nil},
		{"100", 0, "100", nil},
		{"0.000000000000000001", 18, "0.000000000000000001", nil},
		{"10.0", 1, "10", nil},
		{"123456789012345678901234567890", 0, "123456789012345678901234567890", nil},
		{"115792089237316195423570985008687907853269984665640564039457584007913129639935", 18,
			"115792089237316195423570985008687907853269984665640564039457584007913129639935", nil},

		{"", 6, "", ErrEmpty},
		{"0", 6, "", ErrNotPositive},
		{"0.0", 6, "", ErrNotPositive},
		{"0.000000", 6, "", ErrNotPositive},
		{"00", 6, "", ErrSyntax},
		{"01", 6, "", ErrSyntax},
		{"00.1", 6, "", ErrSyntax},
		{"-1", 6, "", ErrSyntax},
		{"+1", 6, "", ErrSyntax},
		{".5", 6, "", ErrSyntax},
		{"5.", 6, "", ErrSyntax},
		{"1..2", 6, "", ErrSyntax},
		{"1.2.3", 6, "", ErrSyntax},
		{"1e5", 6, "", ErrSyntax},
		{"1E-5", 6, "", ErrSyntax},
		{" 1", 6, "", ErrSyntax},
		{"1 ", 6, "", ErrSyntax},
		{"1,5", 6, "", ErrSyntax},
		{"1_000", 6, "", ErrSyntax},
		{"0x10", 6, "", ErrSyntax},
		{"NaN", 6, "", ErrSyntax},
		{"Infinity", 6, "", ErrSyntax},
		{"١", 6, "", ErrSyntax}, // Arabic-Indic digit one: not ASCII
		{"1\x00", 6, "", ErrSyntax},

		{"1.1234567", 6, "", ErrTooPrecise},
		{"1.10", 1, "", ErrTooPrecise}, // trailing zeros count: the rule is about what was written
		{"1.0", 0, "", ErrTooPrecise},
		{"0.0000000000000000001", 18, "", ErrTooPrecise},

		{strings.Repeat("9", MaxLen), 0, strings.Repeat("9", MaxLen), nil},
		{strings.Repeat("9", MaxLen+1), 0, "", ErrTooLong},
		{"1." + strings.Repeat("0", MaxLen), 200, "", ErrTooLong},

		{"1", -1, "", ErrBadDecimals},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := Parse(tt.in, tt.decimals)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Parse(%q, %d) error = %v, want %v", tt.in, tt.decimals, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q, %d) unexpected error %v", tt.in, tt.decimals, err)
			}
			if got := Format(d); got != tt.want {
				t.Fatalf("Format(Parse(%q)) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPrecisionErrorReason(t *testing.T) {
	tests := []struct {
		decimals int32
		want     string
	}{
		{0, "must be a whole number for this token (it has no decimals)"},
		{1, "must have at most 1 fraction digit for this token"},
		{6, "must have at most 6 fraction digits for this token"},
	}
	for _, tt := range tests {
		_, err := Parse("1.1234567", tt.decimals)
		var pe *PrecisionError
		if !errors.As(err, &pe) || pe.Max != tt.decimals {
			t.Fatalf("decimals %d: got %#v", tt.decimals, err)
		}
		if err.Error() != tt.want {
			t.Errorf("decimals %d: reason %q, want %q", tt.decimals, err.Error(), tt.want)
		}
	}
}

func TestParseAnyScale(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  error
	}{
		{"3000", "3000", nil},
		{"0.5", "0.5", nil},
		{"0." + strings.Repeat("0", 40) + "1", "0." + strings.Repeat("0", 40) + "1", nil},
		{"0", "", ErrNotPositive},
		{"1e3", "", ErrSyntax},
		{"", "", ErrEmpty},
	}
	for _, tt := range tests {
		d, err := ParseAnyScale(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("ParseAnyScale(%q) error = %v, want %v", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || Format(d) != tt.want {
			t.Errorf("ParseAnyScale(%q) = %q, %v; want %q", tt.in, Format(d), err, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		d    decimal.Decimal
		want string
	}{
		{decimal.New(1, 0), "1"},
		{decimal.New(15, -1), "1.5"},
		{decimal.New(1500, -3), "1.5"},
		{decimal.New(1, -18), "0.000000000000000001"},
		{decimal.New(1, 20), "100000000000000000000"}, // never "1E+20"
		{decimal.New(25, 3), "25000"},
		{decimal.New(0, -5), "0"},
		{decimal.New(-15, -1), "-1.5"},
		{decimal.RequireFromString("1.23e-7"), "0.000000123"},
	}
	for _, tt := range tests {
		if got := Format(tt.d); got != tt.want {
			t.Errorf("Format(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	var v apperr.Validator
	if d, ok := Validate(&v, "expectedPayment.amount", "2.5", 6); !ok || Format(d) != "2.5" {
		t.Fatalf("Validate good amount = %v, %v", d, ok)
	}
	if v.Failed() {
		t.Fatal("validator failed on a good amount")
	}
	if _, ok := Validate(&v, "expectedPayment.amount", "2.1234567", 6); ok {
		t.Fatal("Validate accepted 7 fraction digits for 6 decimals")
	}
	var e *apperr.Error
	if !errors.As(v.Err(), &e) || e.Code != apperr.ValidationFailed || len(e.Details) != 1 ||
		e.Details[0].Field != "expectedPayment.amount" ||
		e.Details[0].Reason != "must have at most 6 fraction digits for this token" {
		t.Fatalf("Validate error = %#v", v.Err())
	}
}

func TestCheckInteger(t *testing.T) {
	max := "115792089237316195423570985008687907853269984665640564039457584007913129639935"
	over := "115792089237316195423570985008687907853269984665640564039457584007913129639936"
	tests := []struct {
		in  string
		err error
	}{
		{"0", nil},
		{"1", nil},
		{"1000000000000000000", nil},
		{max, nil},
		{over, ErrIntegerRange},
		{strings.Repeat("9", MaxLen), ErrIntegerRange},
		{strings.Repeat("9", MaxLen+1), ErrTooLong},
		{"", ErrEmpty},
		{"00", ErrIntegerSyntax},
		{"01", ErrIntegerSyntax},
		{"-1", ErrIntegerSyntax},
		{"+1", ErrIntegerSyntax},
		{"1.0", ErrIntegerSyntax},
		{"1e18", ErrIntegerSyntax},
		{"0x10", ErrIntegerSyntax},
		{" 1", ErrIntegerSyntax},
	}
	for _, tt := range tests {
		err := CheckInteger(tt.in)
		if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("CheckInteger(%q) = %v, want %v", tt.in, err, tt.err)
		}
	}
	n, err := ParseInteger("42")
	if err != nil || n.Int64() != 42 {
		t.Fatalf("ParseInteger(42) = %v, %v", n, err)
	}
}

func TestCheckHexData(t *testing.T) {
	transfer := "0xa9059cbb000000000000000000000000" + strings.Repeat("ab", 20) + strings.Repeat("0", 63) + "1"
	tests := []struct {
		in  string
		err error
	}{
		{"0x", nil},
		{"0x00", nil},
		{"0xDEADbeef", nil},
		{transfer, nil},
		{"0x" + strings.Repeat("ff", 128*1024), nil},
		{"0x" + strings.Repeat("ff", 128*1024+1), ErrHexLong},
		{"", ErrEmpty},
		{"0", ErrHexPrefix},
		{"00", ErrHexPrefix},
		{"0X00", ErrHexPrefix},
		{"deadbeef", ErrHexPrefix},
		{"0x0", ErrHexOdd},
		{"0xabc", ErrHexOdd},
		{"0xgg", ErrHexDigits},
		{"0x 00", ErrHexDigits},
		{"0x0x", ErrHexDigits},
	}
	for _, tt := range tests {
		err := CheckHexData(tt.in)
		if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
			name := tt.in
			if len(name) > 40 {
				name = name[:40] + "..."
			}
			t.Errorf("CheckHexData(%q) = %v, want %v", name, err, tt.err)
		}
	}
}

func TestCeilToDecimals(t *testing.T) {
	tests := []struct {
		num, den int64
		decimals int32
		want     string
	}{
		{1, 3, 6, "0.333334"},
		{2, 3, 6, "0.666667"},
		{1, 1, 6, "1"},
		{3, 1, 0, "3"},
		{7, 2, 0, "4"},
		{1, 1000000, 6, "0.000001"},
		{1, 1000001, 6, "0.000001"}, // tiny positive never rounds to zero
		{1, 30, 18, "0.033333333333333334"},
		{-1, 3, 2, "-0.33"}, // ceiling goes toward +inf for negatives
		{0, 1, 6, "0"},
		{1234, 1, -2, "1300"},
		{1200, 1, -2, "1200"},
	}
	for _, tt := range tests {
		got := Format(CeilToDecimals(big.NewRat(tt.num, tt.den), tt.decimals))
		if got != tt.want {
			t.Errorf("CeilToDecimals(%d/%d, %d) = %s, want %s", tt.num, tt.den, tt.decimals, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "0", "0.1", "1.50", "01", ".5", "5.", "1e5", "-1", "12.345678",
		"0.000000000000000001", "1.1234567", strings.Repeat("9", 101), "٣", "1.0\n"} {
		for _, d := range []int32{0, 6, 18} {
			f.Add(s, d)
		}
	}
	f.Fuzz(func(t *testing.T, s string, decimals int32) {
		if decimals > 1000 {
			decimals %= 1000
		}
		d, err := Parse(s, decimals)
		if err != nil {
			if decimals >= 0 && len(s) <= MaxLen && grammar.MatchString(s) && !errors.Is(err, ErrNotPositive) &&
				!errors.Is(err, ErrTooPrecise) {
				t.Fatalf("Parse(%q) rejected a string matching the grammar: %v", s, err)
			}
			return
		}
		if !grammar.MatchString(s) || len(s) > MaxLen {
			t.Fatalf("Parse(%q) accepted a string outside the grammar", s)
		}
		if d.Sign() <= 0 {
			t.Fatalf("Parse(%q) = %v, not positive", s, d)
		}
		c := Format(d)
		if !grammar.MatchString(c) {
			t.Fatalf("Format(Parse(%q)) = %q outside the grammar", s, c)
		}
		d2, err := Parse(c, decimals)
		if err != nil {
			t.Fatalf("canonical %q of %q does not re-parse: %v", c, s, err)
		}
		if !d2.Equal(d) {
			t.Fatalf("round trip %q -> %q changed the value", s, c)
		}
		if Format(d2) != c {
			t.Fatalf("Format not idempotent: %q -> %q", c, Format(d2))
		}
		if len(c) > len(s) {
			t.Fatalf("canonical %q longer than input %q", c, s)
		}
	})
}

func FuzzCheckInteger(f *testing.F) {
	for _, s := range []string{"0", "1", "00", "-1", "1.0", strings.Repeat("9", 78), strings.Repeat("9", 79)} {
		f.Add(s)
	}
	intGrammar := regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseInteger(s)
		if err != nil {
			if intGrammar.MatchString(s) && len(s) <= 78 && !errors.Is(err, ErrIntegerRange) {
				t.Fatalf("ParseInteger(%q) rejected a valid integer: %v", s, err)
			}
			return
		}
		if !intGrammar.MatchString(s) || n.String() != s || n.Cmp(uint256Max) > 0 {
			t.Fatalf("ParseInteger(%q) = %v accepted wrongly", s, n)
		}
	})
}

func FuzzCheckHexData(f *testing.F) {
	for _, s := range []string{"0x", "0x00", "0xabc", "0X00", "0xzz", ""} {
		f.Add(s)
	}
	hexGrammar := regexp.MustCompile(`^0x([0-9a-fA-F]{2})*$`)
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckHexData(s)
		if want := hexGrammar.MatchString(s) && len(s) <= MaxHexDataLen; (err == nil) != want {
			t.Fatalf("CheckHexData(%q) = %v, grammar says valid=%v", s, err, want)
		}
	})
}
