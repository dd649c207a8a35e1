package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
)

// decodeParams decodes a POST body that httpx.CheckJSON accepted (one
// valid JSON value, valid UTF-8, no unpaired surrogate escape, no repeated
// key) into p, as encoding/json would, without its cost: encoding/json
// scans a body twice at under 100 MB/s, 0.75 ms for a 59 KiB document,
// which was most of what refusing an oversized document cost. The query
// and operationName strings are unquoted here in one pass, and variables
// and extensions decoded here too, as encoding/json decodes them into a
// map with UseNumber (numbers as json.Number, as gqlgen decodes them);
// handing them to encoding/json was most of what decoding a read's
// parameters cost.
//
// It reports false, leaving p untouched, for anything it does not read
// exactly as encoding/json does (a key with an escape or outside ASCII,
// which encoding/json may fold onto a field; two keys folding onto one
// field; a member of a type the field cannot hold, which encoding/json
// refuses; a top level that is not an object): the caller then decodes
// with encoding/json, and its answer, error included, is the one given.
func decodeParams(b []byte, p *graphql.RawParams) bool {
	d := paramsDecoder{b: b}
	var out graphql.RawParams
	d.ws()
	if !d.byte('{') {
		return false
	}
	var seen [4]bool
	d.ws()
	if d.byte('}') {
		return d.end(p, &out)
	}
	for {
		d.ws()
		key, ok := d.key()
		if !ok {
			return false
		}
		d.ws()
		if !d.byte(':') {
			return false
		}
		d.ws()
		field := -1
		for i, name := range [...]string{"query", "operationName", "variables", "extensions"} {
			if bytes.EqualFold(key, []byte(name)) {
				field = i
			}
		}
		if field >= 0 {
			if seen[field] {
				return false // folded onto one field: encoding/json keeps the last
			}
			seen[field] = true
		}
		switch field {
		case 0, 1:
			s, ok := d.stringOrNull()
			if !ok {
				return false
			}
			if field == 0 {
				out.Query = s
			} else {
				out.OperationName = s
			}
		case 2, 3:
			m, ok := d.objectOrNull()
			if !ok {
				return false
			}
			if field == 2 {
				out.Variables = m
			} else {
				out.Extensions = m
			}
		default:
			if !d.skip() {
				return false
			}
		}
		d.ws()
		switch {
		case d.byte(','):
		case d.byte('}'):
			return d.end(p, &out)
		default:
			return false
		}
	}
}

type paramsDecoder struct {
	b []byte
	i int
}

func (d *paramsDecoder) end(p, out *graphql.RawParams) bool {
	d.ws()
	if d.i != len(d.b) {
		return false
	}
	*p = *out
	return true
}

func (d *paramsDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *paramsDecoder) byte(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// key reads a member name made of printable ASCII without escapes; the
// name is b's own bytes (only compared, never kept).
func (d *paramsDecoder) key() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// stringOrNull reads a string (unquoted) or null ("", as encoding/json
// leaves a string field alone for null).
func (d *paramsDecoder) stringOrNull() (string, bool) {
	if d.literal("null") {
		return "", true
	}
	return d.str()
}

// str reads a string at its opening quote, unquoted.
func (d *paramsDecoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	// Most documents hold no escape: the string ends at the next quote,
	// and CheckJSON found its bytes valid UTF-8 without control
	// characters, so it is copied as it is.
	end := bytes.IndexByte(d.b[start:], '"')
	if end < 0 {
		return "", false
	}
	if bytes.IndexByte(d.b[start:start+end], '\\') < 0 {
		d.i = start + end + 1
		return string(d.b[start : start+end]), true
	}
	buf := make([]byte, 0, len(d.b)-start)
	buf = append(buf, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), true
		case c < 0x20:
			return "", false
		case c == '\\':
			r, ok := d.escape()
			if !ok {
				return "", false
			}
			buf = utf8.AppendRune(buf, r)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && n <= 1 {
				return "", false // encoding/json would put U+FFFD here
			}
			buf = append(buf, d.b[d.i:d.i+n]...)
			d.i += n
		}
	}
	return "", false
}

// escape reads one escape sequence at its backslash; an unpaired
// surrogate (which encoding/json turns into U+FFFD) is not read.
func (d *paramsDecoder) escape() (rune, bool) {
	if d.i+1 >= len(d.b) {
		return 0, false
	}
	c := d.b[d.i+1]
	d.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r, ok := d.hex4()
		if !ok {
			return 0, false
		}
		if !utf16.IsSurrogate(r) {
			return r, true
		}
		if r >= 0xdc00 || d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
			return 0, false
		}
		d.i += 2
		r2, ok := d.hex4()
		if !ok {
			return 0, false
		}
		if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
			return 0, false
		}
		return r, true
	}
	return 0, false
}

func (d *paramsDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}

// objectOrNull decodes an object as encoding/json decodes one into a
// map[string]any with UseNumber (objects as map[string]any, arrays as
// []any, numbers as json.Number, the last of repeated keys), or reads null
// (nil). It used to hand the object's bytes to encoding/json, which was
// most of what decoding a read's parameters cost (its decoder and scanner
// for one {"id": ...}).
func (d *paramsDecoder) objectOrNull() (map[string]any, bool) {
	if d.literal("null") {
		return nil, true
	}
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, false
	}
	v, ok := d.value(0)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// maxValueDepth is the deepest nesting value decodes; deeper values are
// declined (encoding/json then decodes them, or refuses them as it always
// did).
const maxValueDepth = 64

// value decodes one JSON value (valid, as CheckJSON found it).
func (d *paramsDecoder) value(depth int) (any, bool) {
	if depth > maxValueDepth || d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		m := map[string]any{}
		d.ws()
		if d.byte('}') {
			return m, true
		}
		for {
			d.ws()
			k, ok := d.str()
			if !ok {
				return nil, false
			}
			d.ws()
			if !d.byte(':') {
				return nil, false
			}
			d.ws()
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v
			d.ws()
			switch {
			case d.byte(','):
			case d.byte('}'):
				return m, true
			default:
				return nil, false
			}
		}
	case c == '[':
		d.i++
		a := []any{}
		d.ws()
		if d.byte(']') {
			return a, true
		}
		for {
			d.ws()
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			a = append(a, v)
			d.ws()
			switch {
			case d.byte(','):
			case d.byte(']'):
				return a, true
			default:
				return nil, false
			}
		}
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := d.i
		for d.i < len(d.b) && strings.IndexByte("0123456789+-.eE", d.b[d.i]) >= 0 {
			d.i++
		}
		return json.Number(d.b[start:d.i]), true
	}
	return nil, false
}

func (d *paramsDecoder) literal(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

// skip passes over one value (valid JSON, as CheckJSON found it).
func (d *paramsDecoder) skip() bool {
	depth := 0
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch c {
		case '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			if d.i >= len(d.b) {
				return false
			}
			d.i++
		case '{', '[':
			depth++
			d.i++
		case '}', ']':
			if depth == 0 {
				return true // a number or literal ended with its container
			}
			depth--
			d.i++
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return true
			}
			d.i++
		default:
			d.i++
		}
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return true
		}
	}
	return depth == 0
}
