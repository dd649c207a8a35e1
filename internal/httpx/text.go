package httpx

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Text rules every input path shares (docs/hardening.md): no
// string a caller sends may hold a NUL character or invalid UTF-8, and no
// JSON object may name a key twice. PostgreSQL refuses NUL in text (it
// was a 500), SQLite would store it and cut it in C strings, and a
// replacement character silently substituted for invalid UTF-8, or the
// last of two keys winning, is a place where two parsers (a proxy's, a
// log's, ours) read the same request differently. They are refused at
// decoding, as validation_failed, before any service sees the input.

// Reasons the text rules give.
var (
	errNUL         = errors.New("must not contain a NUL character")
	errInvalidUTF8 = errors.New("must be valid UTF-8")
	errSurrogate   = errors.New("must not contain an unpaired UTF-16 surrogate escape")
	errDuplicate   = errors.New("must not repeat a key")
	errSyntax      = errors.New("is not valid JSON")
	errTooDeep     = errors.New("nests deeper than 64 levels")
)

// MaxJSONDepth bounds how deeply a request body may nest arrays and objects.
// No request of the API nests more than a handful of levels.
const MaxJSONDepth = 64

// CheckText reports why s breaks the text rules, or nil.
func CheckText(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errNUL
	}
	if !utf8.ValidString(s) {
		return errInvalidUTF8
	}
	return nil
}

// TextError is the validation_failed error for a value named field that
// breaks the text rules.
func TextError(field string, reason error) error {
	return &apperr.Error{Code: apperr.ValidationFailed, Message: "invalid request",
		Details: []apperr.Detail{{Field: field, Reason: reason.Error()}}}
}

// CheckRequestText applies the text rules to what the URL carries: the
// decoded path (every path id) and every query parameter name and value.
func CheckRequestText(r *http.Request) error {
	if err := CheckText(r.URL.Path); err != nil {
		return TextError("path", err)
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	for k, vs := range r.URL.Query() {
		if err := CheckText(k); err != nil {
			return TextError("query", err)
		}
		for _, v := range vs {
			if err := CheckText(v); err != nil {
				return TextError(k, err)
			}
		}
	}
	return nil
}

// CheckJSON checks a JSON text against the text rules in one linear pass:
// valid UTF-8, no NUL (raw or escaped), no unpaired surrogate escape (which
// encoding/json would turn into U+FFFD), no object repeating a key (after
// unescaping, at any nesting level), and at most MaxJSONDepth levels. It
// also refuses what is not JSON at all, so a caller may decode after it
// without a second syntax check. The error is validation_failed.
func CheckJSON(b []byte) error {
	c := jsonChecker{b: b}
	c.ws()
	if err := c.value(0); err != nil {
		return c.fail(err)
	}
	c.ws()
	if c.i != len(c.b) {
		// Trailing data: reported the same way DecodeBytes reports it.
		return apperr.New(apperr.ValidationFailed, "request body must hold exactly one JSON value")
	}
	return nil
}

type jsonChecker struct {
	b    []byte
	i    int
	path []span // the keys leading to the current value, for the message
	// keys holds the unescaped keys of the objects open at c.i, one after
	// another (an object's are dropped when it closes): keys are compared
	// and named from here, without a string each.
	keys []byte
}

// span is one key's bytes in jsonChecker.keys.
type span struct{ from, to int }

func (c *jsonChecker) fail(reason error) error {
	if reason == errSyntax {
		return apperr.New(apperr.ValidationFailed, "request body is not valid JSON")
	}
	names := make([]string, len(c.path))
	for i, k := range c.path {
		names[i] = string(c.keys[k.from:k.to])
	}
	field := strings.Join(names, ".")
	if field == "" {
		field = "body"
	}
	return TextError(field, reason)
}

func (c *jsonChecker) ws() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *jsonChecker) value(depth int) error {
	if c.i >= len(c.b) {
		return errSyntax
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		if depth >= MaxJSONDepth {
			return errTooDeep
		}
		return c.object(depth + 1)
	case ch == '[':
		if depth >= MaxJSONDepth {
			return errTooDeep
		}
		return c.array(depth + 1)
	case ch == '"':
		err := c.str(false)
		return err
	case ch == 't':
		return c.lit("true")
	case ch == 'f':
		return c.lit("false")
	case ch == 'n':
		return c.lit("null")
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.num()
	default:
		return errSyntax
	}
}

func (c *jsonChecker) lit(s string) error {
	if len(c.b)-c.i < len(s) || string(c.b[c.i:c.i+len(s)]) != s {
		return errSyntax
	}
	c.i += len(s)
	return nil
}

func (c *jsonChecker) num() error {
	start := c.i
	if c.b[c.i] == '-' {
		c.i++
	}
	digits := func() int {
		n := 0
		for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
			c.i++
			n++
		}
		return n
	}
	intStart := c.i
	if n := digits(); n == 0 || (n > 1 && c.b[intStart] == '0') {
		return errSyntax
	}
	if c.i < len(c.b) && c.b[c.i] == '.' {
		c.i++
		if digits() == 0 {
			return errSyntax
		}
	}
	if c.i < len(c.b) && (c.b[c.i] == 'e' || c.b[c.i] == 'E') {
		c.i++
		if c.i < len(c.b) && (c.b[c.i] == '+' || c.b[c.i] == '-') {
			c.i++
		}
		if digits() == 0 {
			return errSyntax
		}
	}
	if c.i == start {
		return errSyntax
	}
	return nil
}

func (c *jsonChecker) array(depth int) error {
	c.i++ // [
	c.ws()
	if c.i < len(c.b) && c.b[c.i] == ']' {
		c.i++
		return nil
	}
	for {
		c.ws()
		if err := c.value(depth); err != nil {
			return err
		}
		c.ws()
		if c.i >= len(c.b) {
			return errSyntax
		}
		switch c.b[c.i] {
		case ',':
			c.i++
		case ']':
			c.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func (c *jsonChecker) object(depth int) error {
	c.i++ // {
	c.ws()
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return nil
	}
	// Most objects have a few keys: a linear scan of a small array beats
	// a map until there are many.
	open := len(c.keys)
	var small [16]span
	keys := small[:0]
	var seen map[string]struct{}
	for {
		c.ws()
		if c.i >= len(c.b) || c.b[c.i] != '"' {
			return errSyntax
		}
		from := len(c.keys)
		if err := c.str(true); err != nil {
			return err
		}
		key := span{from, len(c.keys)}
		name := c.keys[from:]
		dup := false
		if seen != nil {
			_, dup = seen[string(name)]
			seen[string(name)] = struct{}{}
		} else {
			for _, k := range keys {
				if bytes.Equal(c.keys[k.from:k.to], name) {
					dup = true
					break
				}
			}
			keys = append(keys, key)
			if len(keys) > len(small) {
				seen = make(map[string]struct{}, 2*len(keys))
				for _, k := range keys {
					seen[string(c.keys[k.from:k.to])] = struct{}{}
				}
			}
		}
		if dup {
			c.path = append(c.path, key)
			return errDuplicate
		}
		c.ws()
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			return errSyntax
		}
		c.i++
		c.ws()
		c.path = append(c.path, key)
		if err := c.value(depth); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		c.ws()
		if c.i >= len(c.b) {
			return errSyntax
		}
		switch c.b[c.i] {
		case ',':
			c.i++
		case '}':
			c.i++
			c.keys = c.keys[:open]
			return nil
		default:
			return errSyntax
		}
	}
}

// str scans a string at c.i (its opening quote). With decode, it returns
// appends the unescaped value (a key) to c.keys; otherwise only checks.
func (c *jsonChecker) str(decode bool) error {
	c.i++ // "
	start := c.i
	for c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			if decode {
				c.keys = append(c.keys, c.b[start:c.i]...)
			}
			c.i++
			return nil
		case ch == '\\':
			if decode {
				c.keys = append(c.keys, c.b[start:c.i]...)
			}
			if err := c.escape(decode); err != nil {
				return err
			}
			start = c.i
		case ch < 0x20:
			return errSyntax // raw control characters, NUL among them
		case ch < utf8.RuneSelf:
			c.i++
		default:
			r, n := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && n <= 1 {
				return errInvalidUTF8
			}
			c.i += n
		}
	}
	return errSyntax
}

// escape scans one escape sequence at c.i (its backslash).
func (c *jsonChecker) escape(decode bool) error {
	if c.i+1 >= len(c.b) {
		return errSyntax
	}
	e := c.b[c.i+1]
	c.i += 2
	var out byte
	switch e {
	case '"', '\\', '/':
		out = e
	case 'b':
		out = '\b'
	case 'f':
		out = '\f'
	case 'n':
		out = '\n'
	case 'r':
		out = '\r'
	case 't':
		out = '\t'
	case 'u':
		r, ok := c.hex4()
		if !ok {
			return errSyntax
		}
		switch {
		case r == 0:
			return errNUL
		case r >= 0xD800 && r < 0xDC00:
			// A high surrogate must be followed by an escaped low one.
			if c.i+1 >= len(c.b) || c.b[c.i] != '\\' || c.b[c.i+1] != 'u' {
				return errSurrogate
			}
			c.i += 2
			lo, ok := c.hex4()
			if !ok {
				return errSyntax
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				return errSurrogate
			}
			r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
		case r >= 0xDC00 && r <= 0xDFFF:
			return errSurrogate
		}
		if decode {
			c.keys = utf8.AppendRune(c.keys, r)
		}
		return nil
	default:
		return errSyntax
	}
	if decode {
		c.keys = append(c.keys, out)
	}
	return nil
}

func (c *jsonChecker) hex4() (rune, bool) {
	if len(c.b)-c.i < 4 {
		return 0, false
	}
	var r rune
	for _, h := range c.b[c.i : c.i+4] {
		r <<= 4
		switch {
		case h >= '0' && h <= '9':
			r |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			r |= rune(h - 'a' + 10)
		case h >= 'A' && h <= 'F':
			r |= rune(h - 'A' + 10)
		default:
			return 0, false
		}
	}
	c.i += 4
	return r, true
}
