package chain

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// eip55Vectors are the test vectors from the EIP-55 specification plus
// well-known mainnet contracts.
var eip55Vectors = []string{
	// All caps.
	"0x52908400098527886E0F7030069857D2E4169EE7",
	"0x8617E340B3D01FA5F11F306F4090FD50E238070D",
	// All lower.
	"0xde709f2102306220921060314715629080e2fb77",
	"0x27b1fdb04752bbc536007a920d24acb045561c26",
	// Normal.
	"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
	"0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
	"0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
	"0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
}

var mainnetEVM = []string{
	"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", // USDC ethereum
	"0xdAC17F958D2ee523a2206206994597C13D831ec7", // USDT ethereum
	"0x6B175474E89094C44Da98b954EedeAC495271d0F", // DAI ethereum
	"0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", // ERC-7528 native
	"0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", // USDC polygon
	"0xc2132D05D31c914a87C6611C10748AEb04B58e8F", // USDT polygon
	"0x8f3Cf7ad23Cd3CaDbD9735AFf958023239c6A063", // DAI polygon
	"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", // USDC base
	"0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb", // DAI base
	"0xaf88d065e77c8cC2239327C5EDb3A432268e5831", // USDC arbitrum
	"0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9", // USDT arbitrum
	"0xDA10009cBd5D07dd0CeCc66161FC93D7c9000da1", // DAI arbitrum
}

func TestChecksumAddressVectors(t *testing.T) {
	for _, addr := range eip55Vectors[4:] {
		// Normal vectors: checksumming the lower- or upper-case form gives them back.
		for _, in := range []string{addr, strings.ToLower(addr), "0x" + strings.ToUpper(addr[2:])} {
			if got := ChecksumAddress(in); got != addr {
				t.Errorf("ChecksumAddress(%s) = %s, want %s", in, got, addr)
			}
		}
	}
	for _, addr := range mainnetEVM {
		if got := ChecksumAddress(strings.ToLower(addr)); got != addr {
			t.Errorf("ChecksumAddress(%s) = %s, want %s", strings.ToLower(addr), got, addr)
		}
	}
	// The all-caps and all-lower vectors are their own checksum form only
	// because their hash happens to agree with their case.
	for _, addr := range eip55Vectors[:4] {
		if got := ChecksumAddress(addr); got != addr {
			t.Errorf("ChecksumAddress(%s) = %s, want itself", addr, got)
		}
	}
}

func TestChecksumAddressMalformed(t *testing.T) {
	for _, in := range []string{"", "0x", "0x123", "0XA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
		"A0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "0xg0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
		"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB4800"} {
		if got := ChecksumAddress(in); got != "" {
			t.Errorf("ChecksumAddress(%q) = %q, want empty", in, got)
		}
	}
}

func TestValidateEVMAddress(t *testing.T) {
	usdc := "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	tests := []struct {
		name string
		addr string
		err  error
	}{
		{"checksummed", usdc, nil},
		{"all lower", strings.ToLower(usdc), nil},
		{"all upper hex", "0x" + strings.ToUpper(usdc[2:]), nil},
		{"digits only", "0x0000000000000000000000000000000000000000", nil},
		{"one flipped letter", "0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ErrEVMChecksum},
		{"last letter flipped", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eb48", ErrEVMChecksum},
		{"wrong mixed case", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", ErrEVMChecksum},
		{"upper prefix", "0X" + usdc[2:], ErrEVMFormat},
		{"no prefix", usdc[2:], ErrEVMFormat},
		{"too short", usdc[:41], ErrEVMFormat},
		{"too long", usdc + "0", ErrEVMFormat},
		{"non hex", "0xZ0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ErrEVMFormat},
		{"space", " " + usdc, ErrEVMFormat},
		{"solana address", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", ErrEVMFormat},
		{"empty", "", ErrEmpty},
	}
	for _, a := range append(append([]string{}, eip55Vectors...), mainnetEVM...) {
		tests = append(tests, struct {
			name string
			addr string
			err  error
		}{"vector " + a, a, nil})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateEVMAddress(tt.addr)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("ValidateEVMAddress(%q) = %v, want %v", tt.addr, err, tt.err)
			}
			if err2 := ValidateAddress(TypeEVM, tt.addr); !errors.Is(err2, err) && err2 != err {
				t.Fatalf("ValidateAddress(evm) = %v, ValidateEVMAddress = %v", err2, err)
			}
		})
	}
}

func TestValidateSolanaAddress(t *testing.T) {
	tests := []struct {
		name string
		addr string
		err  error
	}{
		{"USDC mint", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", nil},
		{"USDT mint", "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY5NpbYdVGdfDKv1", nil},
		{"system program", "11111111111111111111111111111111", nil},
		{"token program", "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", nil},
		{"wrapped SOL mint", "So11111111111111111111111111111111111111112", nil},
		{"31 zero bytes", strings.Repeat("1", 31), ErrSolanaLength},
		{"33 zero bytes", strings.Repeat("1", 33), ErrSolanaLength},
		{"too long", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1vX", ErrSolanaLength},
		{"33 bytes", "1EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", ErrSolanaLength},
		{"too short", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGG", ErrSolanaLength},
		// A truncated address may still be 32 bytes: base58 has no checksum,
		// so this is a well-formed (different) account.
		{"truncated but 32 bytes", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1", nil},
		{"contains 0", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10", ErrSolanaAlphabet},
		{"contains O", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtOv", ErrSolanaAlphabet},
		{"contains I", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtIv", ErrSolanaAlphabet},
		{"contains l", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtlv", ErrSolanaAlphabet},
		{"evm address", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ErrSolanaAlphabet},
		{"non ascii", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDté", ErrSolanaAlphabet},
		{"hostile length", strings.Repeat("z", 10000), ErrSolanaLength},
		{"empty", "", ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSolanaAddress(tt.addr)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("ValidateSolanaAddress(%q) = %v, want %v", tt.addr, err, tt.err)
			}
			if err2 := ValidateAddress(TypeSolana, tt.addr); err2 != err {
				t.Fatalf("ValidateAddress(solana) = %v, ValidateSolanaAddress = %v", err2, err)
			}
		})
	}
}

func TestValidateAddressUnknownType(t *testing.T) {
	for _, typ := range []string{"", "EVM", "bitcoin", "Solana"} {
		if err := ValidateAddress(typ, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"); !errors.Is(err, ErrUnknownType) {
			t.Errorf("ValidateAddress(%q) = %v, want ErrUnknownType", typ, err)
		}
		if KnownType(typ) {
			t.Errorf("KnownType(%q) = true", typ)
		}
	}
	if !KnownType(TypeEVM) || !KnownType(TypeSolana) {
		t.Error("KnownType rejects a supported type")
	}
}

func TestSameAddress(t *testing.T) {
	usdc := "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	tests := []struct {
		typ, a, b string
		want      bool
	}{
		{TypeEVM, usdc, strings.ToLower(usdc), true},
		{TypeEVM, usdc, "0x" + strings.ToUpper(usdc[2:]), true},
		{TypeEVM, usdc, "0xdAC17F958D2ee523a2206206994597C13D831ec7", false},
		{TypeSolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", true},
		{TypeSolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "epjfwdd5aufqssqem2qn1xzybapc8g4weggkzwytdt1v", false},
	}
	for _, tt := range tests {
		if got := SameAddress(tt.typ, tt.a, tt.b); got != tt.want {
			t.Errorf("SameAddress(%s, %s, %s) = %v", tt.typ, tt.a, tt.b, got)
		}
	}
}

// base58Vectors are Bitcoin Core's base58_encode_decode.json vectors plus the
// USDC mint, whose bytes are published with the mint account.
var base58Vectors = []struct{ hex, b58 string }{
	{"", ""},
	{"61", "2g"},
	{"626262", "a3gV"},
	{"636363", "aPEr"},
	{"73696d706c792061206c6f6e6720737472696e67", "2cFupjhnEsSn59qHXstmK2ffpLv2"},
	{"00eb15231dfceb60925886b67d065299925915aeb172c06647", "1NS17iag9jJgTHD1VXjvLCEnZuQ3rJDE9L"},
	{"516b6fcd0f", "ABnLTmg"},
	{"bf4f89001e670274dd", "3SEo3LWLoPntC"},
	{"572e4794", "3EFU7m"},
	{"ecac89cad93923c02321", "EJDM8drfXA6uyA"},
	{"10c8511e", "Rt5zm"},
	{"00000000000000000000", "1111111111"},
	{"000111d38e5fc9071ffcd20b4a763cc9ae4f252bb4e48fd66a835e252ada93ff480d6dd43dc62a641155a5",
		"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"},
	{"c6fa7af3bedbad3a3d65f36aabc97431b1bbe4c2d2f6e0e47ca60203452f5d61", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"},
	{strings.Repeat("00", 32), "11111111111111111111111111111111"},
	{strings.Repeat("ff", 32), "JEKNVnkbo3jma5nREBBJCDoXFVeKkD56V3xKrvRmWxFG"},
}

func TestBase58Vectors(t *testing.T) {
	for _, v := range base58Vectors {
		raw, _ := hex.DecodeString(v.hex)
		if got := EncodeBase58(raw); got != v.b58 {
			t.Errorf("EncodeBase58(%s) = %s, want %s", v.hex, got, v.b58)
		}
		got, err := DecodeBase58(v.b58)
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("DecodeBase58(%s) = %x, %v; want %s", v.b58, got, err, v.hex)
		}
	}
	for _, bad := range []string{"0", "O", "I", "l", "1 ", "+", "\x00", "é"} {
		if _, err := DecodeBase58(bad); !errors.Is(err, ErrBase58Character) {
			t.Errorf("DecodeBase58(%q) error = %v", bad, err)
		}
	}
}

func FuzzValidateEVMAddress(f *testing.F) {
	for _, a := range append(append([]string{}, eip55Vectors...), mainnetEVM...) {
		f.Add(a)
		f.Add(strings.ToLower(a))
	}
	f.Add("0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48")
	f.Add("0x")
	f.Add("")
	f.Fuzz(func(t *testing.T, addr string) {
		err := ValidateEVMAddress(addr)
		cs := ChecksumAddress(addr)
		if (cs == "") != !isEVMShape(addr) {
			t.Fatalf("ChecksumAddress(%q) = %q disagrees with the shape check", addr, cs)
		}
		if cs == "" {
			if err == nil {
				t.Fatalf("ValidateEVMAddress accepted malformed %q", addr)
			}
			return
		}
		if verr := ValidateEVMAddress(cs); verr != nil {
			t.Fatalf("checksum form %q of %q is invalid: %v", cs, addr, verr)
		}
		if ChecksumAddress(cs) != cs || !strings.EqualFold(cs, addr) {
			t.Fatalf("ChecksumAddress not a stable normalisation: %q -> %q", addr, cs)
		}
		if err == nil && !SameAddress(TypeEVM, addr, cs) {
			t.Fatalf("valid %q does not match its checksum form", addr)
		}
		// Lower-casing never invalidates an address.
		if verr := ValidateEVMAddress(strings.ToLower(addr)); verr != nil {
			t.Fatalf("lower-case of %q invalid: %v", addr, verr)
		}
	})
}

func FuzzValidateSolanaAddress(f *testing.F) {
	for _, a := range []string{"EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "11111111111111111111111111111111",
		"So11111111111111111111111111111111111111112", "0", strings.Repeat("z", 45), ""} {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		err := ValidateSolanaAddress(addr)
		if err != nil {
			return
		}
		b, derr := DecodeBase58(addr)
		if derr != nil || len(b) != 32 {
			t.Fatalf("valid %q decodes to %d bytes, %v", addr, len(b), derr)
		}
		if EncodeBase58(b) != addr {
			t.Fatalf("%q is not canonical base58: re-encodes to %q", addr, EncodeBase58(b))
		}
	})
}

func FuzzBase58RoundTrip(f *testing.F) {
	for _, v := range base58Vectors {
		raw, _ := hex.DecodeString(v.hex)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 256 {
			raw = raw[:256]
		}
		s := EncodeBase58(raw)
		got, err := DecodeBase58(s)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("round trip %x -> %q -> %x, %v", raw, s, got, err)
		}
		if len(raw) == 32 && ValidateSolanaAddress(s) != nil {
			t.Fatalf("32 bytes %x encode to invalid address %q", raw, s)
		}
	})
}
