// Package jsonx encodes and decodes the JSON that every voucher transition
// makes and reads on its way to the subscribers: the voucher's row as it
// travels from the committing replica to the others (its notification)
// and its stored JSON columns.
//
// It is github.com/segmentio/encoding/json, which writes and reads the
// same JSON as encoding/json (field names and options, escaping, invalid
// UTF-8 repaired the same way, Marshaler and Unmarshaler honoured) with
// per-type codecs compiled once instead of reflection on every value: a
// voucher's row with every field set encodes about 1.9 times and decodes
// about 2.9 times faster (BenchmarkRow; docs/performance.md, "Issue 25,
// seventh pass").
//
// It predates the omitzero option (Go 1.24), which it would ignore: a type
// that uses it anywhere (the REST views do), or holds an interface value
// whose dynamic type might, is handed to encoding/json instead, decided
// once per type. Request bodies are not decoded here:
// httpx checks and decodes them with encoding/json, whose errors the API's
// validation answers are made of. The tests hold the output to
// encoding/json's own bytes for the types the service sends this way.
package jsonx

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	segjson "github.com/segmentio/encoding/json"
)

// Marshal is encoding/json.Marshal.
func Marshal(v any) ([]byte, error) {
	if !exact(reflect.TypeOf(v)) {
		return json.Marshal(v)
	}
	return segjson.Marshal(v)
}

// Append appends v's encoding/json.Marshal bytes to dst (without the
// intermediate copy Marshal makes).
func Append(dst []byte, v any) ([]byte, error) {
	if !exact(reflect.TypeOf(v)) {
		b, err := json.Marshal(v)
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	return segjson.Append(dst, v, segjson.EscapeHTML|segjson.SortMapKeys)
}

// Unmarshal is encoding/json.Unmarshal.
func Unmarshal(data []byte, v any) error {
	if !exact(reflect.TypeOf(v)) {
		return json.Unmarshal(data, v)
	}
	return segjson.Unmarshal(data, v)
}

// exacts caches exact's answer per type.
var exacts sync.Map // reflect.Type → bool

// exact says whether the fast codec writes and reads t as encoding/json
// does: no struct reachable from t has a field tagged omitzero, and no
// value in it is an interface (whose dynamic type could have one).
func exact(t reflect.Type) bool {
	if t == nil {
		return true
	}
	if ok, found := exacts.Load(t); found {
		return ok.(bool)
	}
	ok := !usesOmitZero(t, map[reflect.Type]bool{})
	exacts.Store(t, ok)
	return ok
}

// usesOmitZero says whether t, or a type it holds, has a field tagged
// omitzero or an interface value.
func usesOmitZero(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Interface:
		return true // not known until run time: encoding/json's business
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return usesOmitZero(t.Elem(), seen)
	case reflect.Map:
		return usesOmitZero(t.Key(), seen) || usesOmitZero(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			tag, tagged := f.Tag.Lookup("json")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue // neither codec reads or writes it
			}
			if tagged {
				_, opts, _ := strings.Cut(tag, ",")
				for _, o := range strings.Split(opts, ",") {
					if o == "omitzero" {
						return true
					}
				}
			}
			if usesOmitZero(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
