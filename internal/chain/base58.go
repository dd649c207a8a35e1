package chain

// Base58 with the Bitcoin alphabet, as Solana uses it. Written here rather
// than imported because it is small, and the module set is fixed.

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// base58Index maps a byte to its digit value, or -1.
var base58Index = func() [256]int8 {
	var t [256]int8
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(base58Alphabet); i++ {
		t[base58Alphabet[i]] = int8(i)
	}
	return t
}()

// DecodeBase58 decodes s. Each leading '1' is a zero byte (that is how base58
// keeps leading zeros, which a plain number would lose); the rest is a
// big-endian base-58 number. The empty string decodes to no bytes. Cost is
// quadratic in len(s): callers bound the length first.
func DecodeBase58(s string) ([]byte, error) {
	zeros := 0
	for zeros < len(s) && s[zeros] == '1' {
		zeros++
	}
	// log(58)/log(256) < 0.733, so this many bytes always suffice.
	size := (len(s)-zeros)*733/1000 + 1
	buf := make([]byte, size)
	used := 0 // bytes of buf (from the end) that are non-zero so far
	for i := zeros; i < len(s); i++ {
		d := base58Index[s[i]]
		if d < 0 {
			return nil, ErrBase58Character
		}
		carry := int(d)
		j := 0
		for k := size - 1; k >= 0 && (carry != 0 || j < used); k-- {
			carry += 58 * int(buf[k])
			buf[k] = byte(carry)
			carry >>= 8
			j++
		}
		used = j
	}
	// Skip the unused high bytes of buf.
	start := 0
	for start < size && buf[start] == 0 {
		start++
	}
	out := make([]byte, zeros+size-start)
	copy(out[zeros:], buf[start:])
	return out, nil
}

// EncodeBase58 is the inverse of DecodeBase58.
func EncodeBase58(b []byte) string {
	zeros := 0
	for zeros < len(b) && b[zeros] == 0 {
		zeros++
	}
	// log(256)/log(58) < 1.366.
	size := (len(b)-zeros)*1366/1000 + 1
	buf := make([]byte, size)
	used := 0
	for _, v := range b[zeros:] {
		carry := int(v)
		j := 0
		for k := size - 1; k >= 0 && (carry != 0 || j < used); k-- {
			carry += 256 * int(buf[k])
			buf[k] = byte(carry % 58)
			carry /= 58
			j++
		}
		used = j
	}
	start := 0
	for start < size && buf[start] == 0 {
		start++
	}
	out := make([]byte, zeros+size-start)
	for i := 0; i < zeros; i++ {
		out[i] = '1'
	}
	for i, d := range buf[start:] {
		out[zeros+i] = base58Alphabet[d]
	}
	return string(out)
}
