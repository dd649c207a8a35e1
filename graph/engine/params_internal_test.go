package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
)

// decodeParams reads what the door's JSON check accepted as encoding/json
// does, or declines: never a different request. The check here is weaker
// than the door's (httpx.CheckJSON also refuses NULs, unpaired surrogate
// escapes, repeated keys and deep nesting), so decodeParams is held to
// more bodies than it is given.
func checkDecodeParams(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	if !json.Valid(body) || !utf8.Valid(body) {
		return false
	}
	var want graphql.RawParams
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	wantErr := dec.Decode(&want)
	var got graphql.RawParams
	if !decodeParams(body, &got) {
		if !reflect.DeepEqual(got, graphql.RawParams{}) {
			t.Fatalf("declined %q but changed the params: %+v", body, got)
		}
		return false
	}
	if wantErr != nil {
		t.Fatalf("decoded %q, which encoding/json refuses: %v", body, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", body, got, want)
	}
	return true
}

var paramsSeeds = []string{
	`{"query":"{ viewer { id } }"}`,
	`{"query":"query Q($id: ID!) { voucher(id: $id) { id } }","variables":{"id":"vch_1","n":1.50,"l":[1,{"a":null}]},"operationName":"Q"}`,
	`{"query":"{ a(x: \"\\u00e9\\n\\t\\/ \\ud83d\\ude00 é\") }","extensions":{"persistedQuery":{"version":1}}}`,
	`{"query":"\u00e9\n\t\/ \ud83d\ude00 é \" \\ \u2028","operationName":"\u0051"}`,
	`{"query":null,"operationName":null,"variables":null,"extensions":null}`,
	` { "other" : [1, "x}", {"y": "]"}, true, false, null, -1e3] , "query" : "{ a }" } `,
	`{}`,
	`{"Query":"{ a }","VARIABLES":{}}`,
	`{"query":"{ a }","Query":"{ b }"}`,
	`{"qu\u0065ry":"{ a }"}`,
	`{"query":1}`,
	`{"variables":[]}`,
	`{"operationName":{}}`,
	`[{"query":"{ a }"}]`,
	`null`,
	`"query"`,
	`{"query":"\ud800"}`,
	`{"query":"x","variables":{"a":"\u0000"}}`,
	`{"query":"x","variables":{"a":[],"b":{},"c":[[]],"d":-0.5e-7,"e":true,"f":false,"g":null,"h":"\"\u00e9","\u0041":1,"a":2}}`,
	`{"query":"x","variables":{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
	`{"query":"x","variables":{ "id" : "vch_1" , "n" : [ 1 , 2.0 , { "k" : [ ] } ] }}`,
}

func TestDecodeParamsAsEncodingJSON(t *testing.T) {
	fast := 0
	for _, s := range paramsSeeds {
		if checkDecodeParams(t, []byte(s)) {
			fast++
		}
	}
	big := []byte(`{"query":"{` + strings.Repeat(` viewer { __typename }`, 2700) + ` }"}`)
	if !checkDecodeParams(t, big) {
		t.Fatal("declined the 59 KiB document")
	}
	// The common shapes take the fast path (seeds 0 to 7, and the
	// variables of the last three).
	if fast < 11 {
		t.Fatalf("only %d seeds decoded without encoding/json", fast)
	}
}

func FuzzDecodeParams(f *testing.F) {
	for _, s := range paramsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeParams(t, body) })
}
