// Package bounds bounds a GraphQL document before it is validated, so that
// no document can hold a CPU (docs/hardening.md).
//
// Validation is not linear in a document: the overlapping-fields rule
// compares every pair of fields answering to one name (2,000 repeated
// `viewer { __typename }`, 44 KiB, took seconds), and walks that expand
// fragment spreads (depth, cost, a subscription's fingerprint) grow with the
// expansion, which doubles per level when fragments spread each other twice.
// Check runs first, in time linear in the document's bytes, and refuses:
//
//   - a document of more than Bytes bytes, or holding a NUL or invalid
//     UTF-8;
//   - more than Tokens lexical tokens (the lexer stops at the limit);
//   - more than Fields field selections, counting each fragment's once;
//   - more than Spreads fragment spreads;
//   - more than Repeats fields answering to one name in one selection set
//     (inline fragments merged in): this bounds the overlapping-fields rule;
//   - a selection nested deeper than Depth (an introspection field counts
//     as one level, its subtree bounded by IntrospectionDepth), or expanding (every spread
//     replaced by its fragment) to more than Expanded fields. Both are
//     computed once per fragment and reused at each of its spreads, so a
//     fragment bomb is measured, not expanded.
//
// What passes is small enough for gqlparser's validation and the walks after
// it to take well under a millisecond per kilobyte.
package bounds

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/lexer"
	"github.com/vektah/gqlparser/v2/parser"
)

// Limits bound one document. Zero fields take the defaults.
type Limits struct {
	Bytes    int
	Tokens   int
	Fields   int
	Spreads  int
	Repeats  int
	Depth    int
	Expanded int
	// IntrospectionDepth bounds the nesting under __schema and __type,
	// which count as one level toward Depth: graphql-js's standard
	// introspection query (GraphiQL, code generators) nests 15 levels,
	// mostly its TypeRef fragment's ofType chain, and no data field
	// lies below those fields.
	IntrospectionDepth int
}

// Defaults. The largest document the dashboards send is a few kilobytes and
// a few hundred tokens, using a handful of fragments. Spreads are the
// tightest: validation compares fragments pairwise.
const (
	DefaultBytes    = 32 << 10
	DefaultTokens   = 5000
	DefaultFields   = 800
	DefaultSpreads  = 32
	DefaultRepeats  = 10
	DefaultDepth    = 12
	DefaultExpanded = 10000

	DefaultIntrospectionDepth = 20
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Bytes, DefaultBytes)
	def(&l.Tokens, DefaultTokens)
	def(&l.Fields, DefaultFields)
	def(&l.Spreads, DefaultSpreads)
	def(&l.Repeats, DefaultRepeats)
	def(&l.Depth, DefaultDepth)
	def(&l.Expanded, DefaultExpanded)
	def(&l.IntrospectionDepth, DefaultIntrospectionDepth)
	return l
}

// Every refusal carries gqlgen's validation-failure code, so the
// transports answer it as they answer a document that does not validate
// (and the door presents it as validation_failed).

func refuse(format string, args ...any) *gqlerror.Error {
	err := gqlerror.Errorf(format, args...)
	errcode.Set(err, errcode.ValidationFailed)
	return err
}

// Check parses query and measures it against l (after WithDefaults). It
// returns the parsed document (not validated) or the refusal. A parse error
// is returned as gqlparser reports it.
func Check(query string, l Limits) (*ast.QueryDocument, *gqlerror.Error) {
	l = l.WithDefaults()
	if len(query) > l.Bytes {
		return nil, refuse("the document is %d bytes; at most %d are accepted", len(query), l.Bytes)
	}
	if strings.IndexByte(query, 0) >= 0 {
		return nil, refuse("the document must not contain a NUL character")
	}
	if !utf8.ValidString(query) {
		return nil, refuse("the document must be valid UTF-8")
	}
	src := &ast.Source{Input: query}
	if tooManyTokens(src, l.Tokens) {
		return nil, refuse("the document has more than %d tokens", l.Tokens)
	}
	doc, err := parser.ParseQueryWithTokenLimit(src, l.Tokens)
	if err != nil {
		gerr, ok := err.(*gqlerror.Error)
		if !ok {
			gerr = gqlerror.Wrap(err)
		}
		if strings.Contains(gerr.Message, "exceeded token limit") {
			return nil, refuse("the document has more than %d tokens", l.Tokens)
		}
		errcode.Set(gerr, errcode.ParseFailed)
		return nil, gerr
	}
	m := measure{doc: doc, l: l, frags: make(map[string]*fragSize, len(doc.Fragments)), defs: make(map[string]*ast.FragmentDefinition, len(doc.Fragments))}
	for _, f := range doc.Fragments {
		if _, dup := m.defs[f.Name]; !dup {
			m.defs[f.Name] = f
		}
	}
	if e := m.document(); e != nil {
		return nil, e
	}
	return doc, nil
}

// tooManyTokens reports whether src holds more than limit tokens, counted
// by the lexer alone: building the syntax tree of a document the parser
// would refuse at its token limit allocates a node per token and costs
// several times the lexing (a refused 30 KiB document of repeated fields
// was most of a refusal's CPU). It counts as the parser's own limit does
// (each comment is a token, the end is not), so it refuses exactly what the
// parser would refuse for its tokens; a lexical error ends the count, and
// the parser reports that error (or the limit, if it comes first) itself.
// A token is at least one byte, so a document of at most limit bytes is
// not lexed twice.
func tooManyTokens(src *ast.Source, limit int) bool {
	if len(src.Input) <= limit {
		return false
	}
	lx := lexer.New(src)
	for n := 0; ; {
		tok, err := lx.ReadToken()
		if err != nil || tok.Kind == lexer.EOF {
			return false
		}
		if n++; n > limit {
			return true
		}
	}
}

// fragSize is a fragment's expanded size and depth, computed once.
type fragSize struct {
	busy bool // being computed: a spread reaching it again is a cycle
	done bool
	// names are its merged top-level response names (fragmentNames).
	names     map[string]int
	namesBusy bool
	expanded  int
	depth     int
}

type measure struct {
	doc     *ast.QueryDocument
	l       Limits
	fields  int
	spreads int
	frags   map[string]*fragSize
	defs    map[string]*ast.FragmentDefinition
	names   map[string]int // reused per selection set
	// introspectionDepth is the deepest introspection subtree seen.
	introspectionDepth int
}

func (m *measure) document() *gqlerror.Error {
	// Textual counts and per-set repeats, every selection set once.
	for _, op := range m.doc.Operations {
		if e := m.count(op.SelectionSet); e != nil {
			return e
		}
	}
	for _, f := range m.doc.Fragments {
		if e := m.count(f.SelectionSet); e != nil {
			return e
		}
	}
	// Expanded size and depth, each fragment measured once.
	for _, op := range m.doc.Operations {
		exp, depth := m.expand(op.SelectionSet)
		if m.introspectionDepth > m.l.IntrospectionDepth {
			return refuse("the document nests selections under an introspection field %d deep; at most %d are accepted", m.introspectionDepth, m.l.IntrospectionDepth)
		}
		if depth > m.l.Depth {
			return refuse("the document nests selections %d deep; at most %d are accepted", depth, m.l.Depth)
		}
		if exp > m.l.Expanded {
			return refuse("the document expands to more than %d fields once fragments are spread", m.l.Expanded)
		}
	}
	return nil
}

// count walks one selection set (and, recursively, those below it, but not
// into fragments: each is counted where it is defined).
func (m *measure) count(set ast.SelectionSet) *gqlerror.Error {
	if m.names == nil {
		m.names = map[string]int{}
	}
	clear(m.names)
	if e := m.repeats(set); e != nil {
		return e
	}
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			m.fields++
			if m.fields > m.l.Fields {
				return refuse("the document selects more than %d fields", m.l.Fields)
			}
			if len(s.SelectionSet) > 0 {
				if e := m.count(s.SelectionSet); e != nil {
					return e
				}
			}
		case *ast.InlineFragment:
			if e := m.countInline(s.SelectionSet); e != nil {
				return e
			}
		case *ast.FragmentSpread:
			m.spreads++
			if m.spreads > m.l.Spreads {
				return refuse("the document has more than %d fragment spreads", m.l.Spreads)
			}
		}
	}
	return nil
}

// countInline counts an inline fragment's selections, which belong to the
// enclosing set (their repeats were counted with it).
func (m *measure) countInline(set ast.SelectionSet) *gqlerror.Error {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			m.fields++
			if m.fields > m.l.Fields {
				return refuse("the document selects more than %d fields", m.l.Fields)
			}
			if len(s.SelectionSet) > 0 {
				if e := m.count(s.SelectionSet); e != nil {
					return e
				}
			}
		case *ast.InlineFragment:
			if e := m.countInline(s.SelectionSet); e != nil {
				return e
			}
		case *ast.FragmentSpread:
			m.spreads++
			if m.spreads > m.l.Spreads {
				return refuse("the document has more than %d fragment spreads", m.l.Spreads)
			}
		}
	}
	return nil
}

// repeats counts the fields of one selection set by response name, with
// inline fragments and the fragments it spreads merged in (validation
// compares them as one set). A fragment's own merged counts are computed
// once.
func (m *measure) repeats(set ast.SelectionSet) *gqlerror.Error {
	seen := map[string]bool{}
	return m.addNames(m.names, set, seen)
}

func (m *measure) addNames(into map[string]int, set ast.SelectionSet, seen map[string]bool) *gqlerror.Error {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			name := s.Alias
			if name == "" {
				name = s.Name
			}
			into[name]++
			if into[name] > m.l.Repeats {
				return refuse("the document selects %q more than %d times in one selection set", name, m.l.Repeats)
			}
		case *ast.InlineFragment:
			if e := m.addNames(into, s.SelectionSet, seen); e != nil {
				return e
			}
		case *ast.FragmentSpread:
			if seen[s.Name] {
				continue // validation merges a fragment once per set
			}
			seen[s.Name] = true
			names, e := m.fragmentNames(s.Name)
			if e != nil {
				return e
			}
			for name, n := range names {
				into[name] += n
				if into[name] > m.l.Repeats {
					return refuse("the document selects %q more than %d times in one selection set", name, m.l.Repeats)
				}
			}
		}
	}
	return nil
}

// fragmentNames is a fragment's top-level response names with their
// counts, its own spreads merged in, computed once.
func (m *measure) fragmentNames(name string) (map[string]int, *gqlerror.Error) {
	fs := m.frags[name]
	if fs == nil {
		fs = &fragSize{}
		m.frags[name] = fs
	}
	if fs.names != nil || fs.namesBusy {
		return fs.names, nil // a cycle adds nothing; validation refuses it
	}
	def := m.defs[name]
	if def == nil {
		fs.names = map[string]int{}
		return fs.names, nil
	}
	fs.namesBusy = true
	names := map[string]int{}
	err := m.addNames(names, def.SelectionSet, map[string]bool{})
	fs.namesBusy = false
	fs.names = names
	return names, err
}

// expand returns the number of fields set expands to and its depth (a
// field is one level), each fragment measured once. The sums saturate at
// the Expanded limit plus one, so no count overflows.
func (m *measure) expand(set ast.SelectionSet) (int, int) {
	n, depth := 0, 0
	cap := m.l.Expanded + 1
	for _, sel := range set {
		var sn, sd int
		switch s := sel.(type) {
		case *ast.Field:
			cn, cd := m.expand(s.SelectionSet)
			sn, sd = 1+cn, 1+cd
			if s.Name == "__schema" || s.Name == "__type" {
				m.introspectionDepth = max(m.introspectionDepth, sd)
				sd = 1
			}
		case *ast.InlineFragment:
			sn, sd = m.expand(s.SelectionSet)
		case *ast.FragmentSpread:
			sn, sd = m.fragment(s.Name)
		}
		n = min(n+sn, cap)
		depth = max(depth, sd)
	}
	return n, depth
}

func (m *measure) fragment(name string) (int, int) {
	fs := m.frags[name]
	if fs == nil {
		fs = &fragSize{}
		m.frags[name] = fs
	}
	if fs.done || fs.busy {
		// A cycle counts nothing here; validation refuses it.
		return fs.expanded, fs.depth
	}
	def := m.defs[name]
	if def == nil {
		fs.done = true // unknown: validation refuses it
		return 0, 0
	}
	fs.busy = true
	fs.expanded, fs.depth = m.expand(def.SelectionSet)
	fs.busy, fs.done = false, true
	return fs.expanded, fs.depth
}

// Describe lists the limits for docs and errors.
func (l Limits) Describe() string {
	l = l.WithDefaults()
	return fmt.Sprintf("%d bytes, %d tokens, %d fields, %d fragment spreads, %d repeats of a name in one selection set, depth %d, %d fields expanded",
		l.Bytes, l.Tokens, l.Fields, l.Spreads, l.Repeats, l.Depth, l.Expanded)
}
