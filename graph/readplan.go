package graph

import (
	"bytes"
	"io"
	"weak"

	"github.com/99designs/gqlgen/graphql"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph/engine"
	"github.com/voucherd/voucherd/graph/scalars"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/payment"
)

// The voucher read's renderer. gqlgen renders every field of an answer
// through its own per-field machinery (a FieldContext, a context value,
// the field middleware and several closures for each field, about ten
// allocations a scalar), which was the largest part of what a GraphQL
// read cost beyond a REST one (docs/performance.md, "Issue 25, third
// pass"). For the most common read, voucher(id:) selecting plain fields of
// the voucher, its expected payment and that payment's wallet, the root
// field's middleware hands gqlgen the rendered object instead of the
// *ent.Voucher (a field middleware may answer with a graphql.Marshaler,
// which gqlgen writes as the field's value): the root field itself, its
// argument, rate limit, metrics, errors and null stay gqlgen's and the
// rules'. The renderer is compiled once per selection of a cached
// document and writes what gqlgen's generated code writes, with the same
// marshalers, for the fields it knows (TestReadPlanMatchesGqlgen holds it
// to gqlgen's bytes for each). Anything else is gqlgen's as before: a
// field it does not know, arguments or directives below the root,
// fragments, a response key given twice, an API key caller (whose nested
// fields keyScopes judges one by one) and the tests' field hook.
//
// The same plans render voucherUpdated's changes (subscription, below):
// the engine asks for a selection's plan once per selection shape and
// writes each change with it, instead of gqlgen's generated code.

// readPlans keeps the compiled renderer (or nil: not renderable) of each
// voucher(id:) field of the documents in gqlgen's query cache, by the
// parsed field, which stays the same while its document is cached. The
// key is a weak pointer: a document gqlgen's cache dropped is not kept
// alive here, and a field parsed later at the same address is another key.
type readPlans struct {
	plans *lru.Cache[weak.Pointer[ast.Field], *objectPlan[*ent.Voucher]]
	// rendered, when set, is told of each answer rendered here (tests).
	rendered func()
}

const readPlansSize = 1000

func newReadPlans(rendered func()) *readPlans {
	c, err := lru.New[weak.Pointer[ast.Field], *objectPlan[*ent.Voucher]](readPlansSize)
	if err != nil {
		panic(err)
	}
	return &readPlans{plans: c, rendered: rendered}
}

// render returns v rendered for the collected field's selection, or nil
// when gqlgen renders it. A field gqlgen merged with others of the same
// response key (whose selections may depend on the variables through
// their directives) is gqlgen's: its selections are then more than the
// field's own.
func (p *readPlans) render(cf graphql.CollectedField, v *ent.Voucher) graphql.Marshaler {
	f := cf.Field
	if p == nil || f == nil || v == nil || !sameSelections(cf.Selections, f.SelectionSet) {
		return nil
	}
	key := weak.Make(f)
	plan, ok := p.plans.Get(key)
	if !ok {
		plan, _ = compileObject(f.SelectionSet, "Voucher", voucherFields)
		p.plans.Add(key, plan)
	}
	if plan == nil {
		return nil
	}
	if p.rendered != nil {
		p.rendered()
	}
	return graphql.WriterFunc(func(w io.Writer) { plan.write(w, v) })
}

// subscription compiles voucherUpdated's selection for the engine
// (engine.Options.Plan), which then renders each change of the selection's
// shape with it instead of gqlgen's generated code: the same writers as
// voucher(id:)'s, for the same fields, and the same refusals (fragments,
// directives, arguments, a response key twice, a field the plan does not
// know: gqlgen renders those, as before). The field rules gqlgen would run
// around each field of a subscription's rendering (the whole fieldRules,
// keyScopes included, with whoever rendered first as the caller) do
// nothing to these fields for any caller: they are not root fields,
// resolve without error, are not nullable strings (nullForAbsent), and
// keyScopes judges no Voucher, Payment or Wallet field; a selection naming
// a field keyScopes judges is left to gqlgen all the same (keyScoped). An
// API key never gets here: keyScopes refuses it voucherUpdated itself, at
// subscribe.
func (p *readPlans) subscription(root *ast.Field) any {
	if root.Name != "voucherUpdated" || root.ObjectDefinition == nil || root.ObjectDefinition.Name != "Subscription" ||
		len(root.Directives) > 0 || len(root.SelectionSet) == 0 || keyScoped(root.SelectionSet) {
		return nil
	}
	plan, ok := compileObject(root.SelectionSet, "Voucher", voucherFields)
	if !ok {
		return nil
	}
	rendered := p.rendered
	return engine.Plan[*ent.Voucher](func(w *bytes.Buffer, v *ent.Voucher) bool {
		if v == nil {
			return false // gqlgen's "must not be null"
		}
		if rendered != nil {
			rendered()
		}
		plan.write(w, v)
		return true
	})
}

// keyScoped: sel names a nested field keyScopes judges (one an API key
// needs a scope to read), at any depth.
func keyScoped(sel ast.SelectionSet) bool {
	for _, s := range sel {
		f, ok := s.(*ast.Field)
		if !ok || f.ObjectDefinition == nil {
			return true
		}
		if _, judged := operation.ByNestedField(f.ObjectDefinition.Name + "." + f.Name); judged || keyScoped(f.SelectionSet) {
			return true
		}
	}
	return false
}

func sameSelections(a, b ast.SelectionSet) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// objectPlan writes one object's selection as gqlgen's FieldSet does:
// {"key":value,...} in the selection's order.
type objectPlan[T any] struct {
	fields []plannedField[T]
}

type plannedField[T any] struct {
	key   string // `"alias":`
	write func(io.Writer, T)
}

var (
	openBrace  = []byte{'{'}
	closeBrace = []byte{'}'}
	comma      = []byte{','}
)

func (p *objectPlan[T]) write(w io.Writer, obj T) {
	_, _ = w.Write(openBrace)
	for i, f := range p.fields {
		if i > 0 {
			_, _ = w.Write(comma)
		}
		_, _ = io.WriteString(w, f.key)
		f.write(w, obj)
	}
	_, _ = w.Write(closeBrace)
}

// fieldTable maps a type's field names to their writers; a writer for a
// field with a selection compiles that selection (ok false: not
// renderable).
type fieldTable[T any] map[string]func(sel ast.SelectionSet) (func(io.Writer, T), bool)

// compileObject compiles sel on typeName (whose __typename it writes) with
// table, or reports false.
func compileObject[T any](sel ast.SelectionSet, typeName string, table fieldTable[T]) (*objectPlan[T], bool) {
	plan := &objectPlan[T]{}
	seen := map[string]bool{}
	for _, s := range sel {
		f, ok := s.(*ast.Field)
		if !ok || len(f.Directives) > 0 || len(f.Arguments) > 0 || f.Definition == nil {
			return nil, false
		}
		key := f.Alias
		if key == "" {
			key = f.Name
		}
		if seen[key] || !isName(key) {
			return nil, false
		}
		seen[key] = true
		var write func(io.Writer, T)
		if f.Name == "__typename" {
			write = func(w io.Writer, _ T) { graphql.MarshalString(typeName).MarshalGQL(w) }
		} else {
			compile, known := table[f.Name]
			if !known {
				return nil, false
			}
			if write, ok = compile(f.SelectionSet); !ok {
				return nil, false
			}
		}
		plan.fields = append(plan.fields, plannedField[T]{key: `"` + key + `":`, write: write})
	}
	return plan, true
}

// isName: a GraphQL name, which gqlgen writes as it is between quotes.
func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// scalar is a writer for a field without a selection.
func scalar[T any](write func(io.Writer, T)) func(ast.SelectionSet) (func(io.Writer, T), bool) {
	return func(sel ast.SelectionSet) (func(io.Writer, T), bool) { return write, len(sel) == 0 }
}

var writeNull = func(w io.Writer) { graphql.Null.MarshalGQL(w) }

// writeEnum writes an ent enum's value as its MarshalGQL does,
// strconv.Quote's text, without Quote's string when the value is a GraphQL
// name (every value the schema declares), which Quote writes as it is
// between quotes.
func writeEnum[E interface {
	~string
	MarshalGQL(io.Writer)
}](w io.Writer, e E) {
	s := string(e)
	if !isName(s) {
		e.MarshalGQL(w)
		return
	}
	_, _ = io.WriteString(w, `"`)
	_, _ = io.WriteString(w, s)
	_, _ = io.WriteString(w, `"`)
}

// voucherFields: the Voucher fields the generated code resolves straight
// from *ent.Voucher, each written with the marshaler it uses
// (graph/generated: _Voucher_*, marshalN*/marshalO*).
var voucherFields = fieldTable[*ent.Voucher]{
	"id":        scalar(func(w io.Writer, v *ent.Voucher) { graphql.MarshalID(v.ID).MarshalGQL(w) }),
	"code":      scalar(func(w io.Writer, v *ent.Voucher) { graphql.MarshalString(v.Code).MarshalGQL(w) }),
	"status":    scalar(func(w io.Writer, v *ent.Voucher) { writeEnum(w, v.Status) }),
	"version":   scalar(func(w io.Writer, v *ent.Voucher) { graphql.MarshalInt(v.Version).MarshalGQL(w) }),
	"sessionId": scalar(func(w io.Writer, v *ent.Voucher) { graphql.MarshalID(v.SessionID).MarshalGQL(w) }),
	"type": scalar(func(w io.Writer, v *ent.Voucher) {
		if v.Type == nil {
			writeNull(w)
			return
		}
		writeEnum(w, *v.Type)
	}),
	"businessId": scalar(func(w io.Writer, v *ent.Voucher) {
		if v.BusinessID == nil {
			writeNull(w)
			return
		}
		graphql.MarshalID(*v.BusinessID).MarshalGQL(w)
	}),
	"expiresAt": scalar(func(w io.Writer, v *ent.Voucher) { scalars.MarshalTime(v.ExpiresAt).MarshalGQL(w) }),
	"createdAt": scalar(func(w io.Writer, v *ent.Voucher) { scalars.MarshalTime(v.CreatedAt).MarshalGQL(w) }),
	"updatedAt": scalar(func(w io.Writer, v *ent.Voucher) { scalars.MarshalTime(v.UpdatedAt).MarshalGQL(w) }),
	"expectedPayment": func(sel ast.SelectionSet) (func(io.Writer, *ent.Voucher), bool) {
		p, ok := compileObject(sel, "Payment", paymentFields)
		if !ok || len(sel) == 0 {
			return nil, false
		}
		return func(w io.Writer, v *ent.Voucher) {
			if v.ExpectedPayment == nil {
				writeNull(w)
				return
			}
			p.write(w, v.ExpectedPayment)
		}, true
	},
}

var paymentFields = fieldTable[*payment.Payment]{
	"id":              scalar(func(w io.Writer, p *payment.Payment) { graphql.MarshalID(p.ID).MarshalGQL(w) }),
	"network":         scalar(func(w io.Writer, p *payment.Payment) { graphql.MarshalString(p.Network).MarshalGQL(w) }),
	"currency":        scalar(func(w io.Writer, p *payment.Payment) { graphql.MarshalString(p.Currency).MarshalGQL(w) }),
	"currencyAddress": scalar(func(w io.Writer, p *payment.Payment) { graphql.MarshalString(p.CurrencyAddress).MarshalGQL(w) }),
	"amount":          scalar(func(w io.Writer, p *payment.Payment) { scalars.MarshalDecimal(p.Amount).MarshalGQL(w) }),
	"wallet": func(sel ast.SelectionSet) (func(io.Writer, *payment.Payment), bool) {
		wp, ok := compileObject(sel, "Wallet", walletFields)
		if !ok || len(sel) == 0 {
			return nil, false
		}
		return func(w io.Writer, p *payment.Payment) { wp.write(w, &p.Wallet) }, true
	},
}

var walletFields = fieldTable[*payment.Wallet]{
	"address": scalar(func(w io.Writer, wl *payment.Wallet) { graphql.MarshalString(wl.Address).MarshalGQL(w) }),
}
