package bounds_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/voucherd/voucherd/graph/bounds"
	"github.com/voucherd/voucherd/graph/generated"
)

// fragmentBomb is the first attack: fragments spreading the next one twice,
// so the expansion doubles per level (2^levels fields) in a few hundred bytes.
func fragmentBomb(levels int) string {
	var b strings.Builder
	b.WriteString("query { ...F0 }\n")
	for i := 0; i < levels; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "fragment F%d on Query { viewer { id } }\n", levels)
	return b.String()
}

// repeatedFields is the second attack: one field repeated, which the
// overlapping-fields rule compares pairwise.
func repeatedFields(n int) string {
	return "{" + strings.Repeat(" viewer { __typename }", n) + " }"
}

func TestCheckRefusesHostileDocuments(t *testing.T) {
	cases := map[string]string{
		"fragment bomb":                      fragmentBomb(30),
		"repeated identical fields":          repeatedFields(2000),
		"repeats within the bound of fields": "{ viewer {" + strings.Repeat(" id", bounds.DefaultRepeats+1) + " } }",
		"repeats through inline fragments":   "{ viewer {" + strings.Repeat(" ... on Viewer { id }", bounds.DefaultRepeats+1) + " } }",
		"too many fields":                    "{" + fieldsNamed(bounds.DefaultFields+1) + " }",
		"too many tokens":                    "{ nodes(ids: [" + strings.Repeat(`"x" `, bounds.DefaultTokens) + "]) { id } }",
		"too many bytes":                     "{ viewer { id } }" + strings.Repeat(" ", bounds.DefaultBytes),
		"too many spreads":                   "query { ...A }\nfragment A on Query {" + strings.Repeat(" ...B", bounds.DefaultSpreads+1) + " }\nfragment B on Query { __typename }",
		"too deep":                           "{" + strings.Repeat(" a {", bounds.DefaultDepth+1) + " b" + strings.Repeat(" }", bounds.DefaultDepth+1) + " }",
		"too deep through fragments":         deepFragments(bounds.DefaultDepth + 1),
		"NUL":                                "{ viewer { id } }\x00",
		"invalid UTF-8":                      "{ viewer { id } } # \xff",
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			if len(q) >= 60<<10 && name != "too many bytes" {
				t.Fatalf("attack of %d bytes: the attacks are under 60 KiB", len(q))
			}
			start := time.Now()
			_, err := bounds.Check(q, bounds.Limits{})
			if err == nil {
				t.Fatal("accepted")
			}
			if errcode.GetErrorKind(gqlerror.List{err}) != errcode.KindProtocol || err.Extensions["code"] != errcode.ValidationFailed {
				t.Fatalf("code %v: %v", err.Extensions, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

func fieldsNamed(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " f%d: __typename", i)
	}
	return b.String()
}

// deepFragments nests one level per fragment: depth n in total.
func deepFragments(n int) string {
	var b strings.Builder
	b.WriteString("query { ...D0 }\n")
	for i := 0; i < n-1; i++ {
		fmt.Fprintf(&b, "fragment D%d on Query { a { ...D%d } }\n", i, i+1)
	}
	fmt.Fprintf(&b, "fragment D%d on Query { b }\n", n-1)
	return b.String()
}

func TestCheckAcceptsOrdinaryDocuments(t *testing.T) {
	for _, q := range []string{
		`{ viewer { id kind } }`,
		`query Q($id: ID!) { voucher(id: $id) { id ...V ... on Voucher { code } } } fragment V on Voucher { id status expectedPayment { amount } }`,
		fragmentBomb(8), // 256 fields expanded: within the bound
		"{ viewer {" + strings.Repeat(" id", bounds.DefaultRepeats) + " } }",
		deepFragments(bounds.DefaultDepth),
		introspection,
	} {
		if _, err := bounds.Check(q, bounds.Limits{}); err != nil {
			t.Errorf("%.60s: %v", q, err)
		}
	}
}

// What passes the bounds validates quickly: the largest documents the
// bounds let through, shaped like the attacks, validate in well under the
// time budget (the figure is far below it on an idle core).
func TestWorstAcceptedDocumentsValidateQuickly(t *testing.T) {
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	docs := map[string]string{
		"repeats in every set": "{" + strings.Repeat(" viewer { __typename }", bounds.DefaultRepeats) + strings.Repeat(" v: viewer { __typename }", bounds.DefaultRepeats) + " }",
		"aliases":              "{" + fieldsNamed(bounds.DefaultFields) + " }",
		"spreads":              spreads(bounds.DefaultSpreads),
		"fragments of repeats": fragmentsOfRepeats(),
		"nested repeats":       "{" + strings.Repeat(" viewer {"+strings.Repeat(" __typename", bounds.DefaultRepeats)+" }", bounds.DefaultRepeats) + " }",
	}
	for name, q := range docs {
		t.Run(name, func(t *testing.T) {
			doc, err := bounds.Check(q, bounds.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			validator.ValidateWithRules(schema, doc, nil)
			if d := time.Since(start); d > time.Second {
				t.Fatalf("validation took %v", d)
			}
		})
	}
}

// spreads is n fragment spreads of distinct fragments selecting the same
// field (pairs of fragments are what validation compares).
func spreads(n int) string {
	var b strings.Builder
	b.WriteString("query {")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " ...S%d", i)
	}
	b.WriteString(" }\n")
	for i := 0; i < n; i++ {
		// Each name at most Repeats times in the merged set.
		fmt.Fprintf(&b, "fragment S%d on Query { v%d: viewer { id } }\n", i, i%bounds.DefaultRepeats)
	}
	return b.String()
}

// FuzzCheck: whatever the document, Check answers quickly and never
// panics; what it accepts has at most the bounded number of fields. Its
// seeds (the attacks among them) run in every go test.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{fragmentBomb(12), repeatedFields(50), deepFragments(14), introspection, "{ a(x: \"\\u0000\") }", "query { ...A } fragment A on Query { ...A }", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		start := time.Now()
		doc, err := bounds.Check(q, bounds.Limits{})
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Check took %v on %q", d, q)
		}
		if err != nil {
			return
		}
		if len(q) > bounds.DefaultBytes || doc == nil {
			t.Fatalf("accepted %d bytes / nil doc", len(q))
		}
	})
}

const introspection = `query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) { name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } }
}`

// fragmentsOfRepeats spreads fragments each repeating one field as often
// as allowed, under as many names as the spreads and fields allow.
func fragmentsOfRepeats() string {
	n := min(bounds.DefaultFields/(2*bounds.DefaultRepeats), bounds.DefaultSpreads)
	var b strings.Builder
	b.WriteString("query {")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " ...R%d", i)
	}
	b.WriteString(" }\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "fragment R%d on Query {%s }\n", i, strings.Repeat(fmt.Sprintf(" v%d: viewer { id }", i), bounds.DefaultRepeats))
	}
	return b.String()
}

// The token limit counts as the parser's own limit does (each comment is a
// token), and a document over it is refused by the lexer alone: no syntax
// tree is built for it, so the refusal allocates next to nothing (the
// parser stopping at its limit allocated a node per token, most of a
// refused 30 KiB document's CPU).
func TestTokenLimitLexesOnly(t *testing.T) {
	l := bounds.Limits{Tokens: 100}
	// 12 tokens and 2 comments around k strings.
	doc := func(k int) string {
		return "# a comment is a token\n{ nodes(ids: [" + strings.Repeat(`"x" `, k) + "]) { id } } # this one too"
	}
	if _, err := bounds.Check(doc(86), l); err != nil {
		t.Fatalf("100 tokens: %v", err)
	}
	_, err := bounds.Check(doc(87), l)
	if err == nil || !strings.Contains(err.Message, "more than 100 tokens") {
		t.Fatalf("101 tokens: %v", err)
	}
	// A lexical error before the limit is the parser's to report.
	_, err = bounds.Check(`{ a(x: "\q") }`+strings.Repeat(" b", 200), l)
	if err == nil || strings.Contains(err.Message, "tokens") {
		t.Fatalf("lexical error before the limit: %v", err)
	}
	q := repeatedFields(1400) // the 30 KiB attack: 7,000 tokens
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := bounds.Check(q, bounds.Limits{}); err == nil || !strings.Contains(err.Message, "tokens") {
			t.Fatalf("not refused for its tokens: %v", err)
		}
	})
	if allocs > 20 {
		t.Fatalf("a refusal at the token limit allocated %.0f times", allocs)
	}
}
