package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/voucherd/voucherd/internal/apperr"
)

func checkCode(t *testing.T, err error) {
	t.Helper()
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Code != apperr.ValidationFailed {
		t.Fatalf("err = %v, want validation_failed", err)
	}
}

func TestCheckJSONRefuses(t *testing.T) {
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	for name, body := range map[string]string{
		"duplicate key":              `{"a":1,"a":2}`,
		"duplicate key nested":       `{"x":{"y":[{"a":1,"b":2,"a":3}]}}`,
		"duplicate after unescaping": `{"amount":"1","\u0061mount":"2"}`,
		"duplicate among many keys":  `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`,
		"escaped NUL in value":       `{"a":"x\u0000y"}`,
		"escaped NUL in key":         `{"a\u0000":1}`,
		"raw NUL":                    "{\"a\":\"x\x00\"}",
		"invalid UTF-8 in value":     "{\"a\":\"\xff\"}",
		"invalid UTF-8 in key":       "{\"\xc3\":1}",
		"overlong encoding":          "{\"a\":\"\xc0\xaf\"}",
		"encoded surrogate":          "{\"a\":\"\xed\xa0\x80\"}",
		"lone high surrogate":        `{"a":"\ud800"}`,
		"lone low surrogate":         `{"a":"\udc00x"}`,
		"high then non-low":          `{"a":"\ud800\u0041"}`,
		"too deep":                   deep,
		"not JSON":                   `{"a":}`,
		"trailing":                   `{} {}`,
		"leading zero":               `{"a":01}`,
	} {
		t.Run(name, func(t *testing.T) { checkCode(t, CheckJSON([]byte(body))) })
	}
}

func TestCheckJSONAccepts(t *testing.T) {
	for _, body := range []string{
		`{}`, `[]`, `"x"`, `0`, `-1.5e+3`, `null`, `true`,
		`{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}`, // same key in different objects
		`{"emoji":"\ud83d\ude00 😀","tab":"\t","ctl":"\u0001"}`,
		`{"a":"é\"\\\/\b\f\n\r\t"}`,
		strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth),
	} {
		if err := CheckJSON([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func TestDecodeBytesNamesTheField(t *testing.T) {
	var v struct {
		A struct {
			B string `json:"b"`
		} `json:"a"`
	}
	err := DecodeBytes([]byte(`{"a":{"b":"x","b":"y"}}`), &v)
	checkCode(t, err)
	if d := apperr.From(err).Details; len(d) != 1 || d[0].Field != "a.b" {
		t.Fatalf("details = %+v, want field a.b", d)
	}
}

// The repeated key is named by its path, whatever objects were checked
// (and closed) before it: sibling objects with the same keys, escaped
// keys, more keys than the small-object scan holds.
func TestCheckJSONNamesTheRepeatedKey(t *testing.T) {
	many := `"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16`
	for body, field := range map[string]string{
		`{"x":{"k":1},"y":{"k":2,"z":{"q":1,"r":{"k":1}},"k":3}}`: "y.k",
		`{"a\u0062c":{"k":1,"\u006b":2}}`:                         "abc.k",
		`{"x":{` + many + `},"y":{` + many + `,"k9":9}}`:          "y.k9",
		`{"x":[{"a":1},{"a":1,"b":{"c":1},"b":2}]}`:               "x.b",
		`{"k":1,"x":{"y":{}},"k":2}`:                              "k",
	} {
		err := CheckJSON([]byte(body))
		checkCode(t, err)
		if d := apperr.From(err).Details; len(d) != 1 || d[0].Field != field {
			t.Errorf("%s: details = %+v, want field %s", body, d, field)
		}
	}
}

func TestCheckRequestText(t *testing.T) {
	for _, target := range []string{"/api/v1/vouchers/vch_%00", "/api/v1/vouchers/%ff", "/x?status=%00", "/x?a=%c3", "/x?%00=1"} {
		checkCode(t, CheckRequestText(httptest.NewRequest("GET", target, nil)))
	}
	if err := CheckRequestText(httptest.NewRequest("GET", "/api/v1/vouchers/vch_1?status=%C3%A9", nil)); err != nil {
		t.Fatal(err)
	}
}

// FuzzCheckJSON holds CheckJSON to encoding/json: whatever CheckJSON
// accepts is valid JSON, decodes without a replacement character that the
// text did not spell literally, and holds no NUL; and valid UTF-8 JSON
// without NUL, surrogate escapes or repeated keys is accepted. Its seeds
// run in every go test.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"a":2}`, `{"a":{"b":[1,{"c":"\u0000"}]}}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`,
		`{"a":"\ud83d\ude00"}`, `[1,2,"x"]`, `{"a":"\u0061","\u0061":1}`, `{"x":"\ufffd"}`, "{\"x\":\"\xef\xbf\xbd\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckJSON(b)
		if err == nil {
			if !json.Valid(b) {
				t.Fatalf("accepted invalid JSON %q", b)
			}
			// Numbers as json.Number: one out of float64's range
			// ("1E700") is valid JSON, refused where a field's type
			// cannot hold it, not by the text check.
			var v any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if e := dec.Decode(&v); e != nil {
				t.Fatalf("accepted %q that does not decode: %v", b, e)
			}
			if hasText(v, func(s string) bool { return strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) }) {
				t.Fatalf("accepted %q holding NUL or invalid UTF-8", b)
			}
			return
		}
		checkCode(t, err)
		if json.Valid(b) && utf8.Valid(b) && !strings.Contains(string(b), `\u`) && !strings.Contains(string(b), `\U`) {
			// Without escapes, a refusal of valid JSON can only be a
			// repeated key or the depth bound.
			var msg string
			if d := apperr.From(err).Details; len(d) == 1 {
				msg = d[0].Reason
			}
			if msg != errDuplicate.Error() && msg != errTooDeep.Error() {
				t.Fatalf("refused valid %q: %v %v", b, err, apperr.From(err).Details)
			}
		}
	})
}

func hasText(v any, bad func(string) bool) bool {
	switch v := v.(type) {
	case string:
		return bad(v)
	case []any:
		for _, x := range v {
			if hasText(x, bad) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if bad(k) || hasText(x, bad) {
				return true
			}
		}
	}
	return false
}
