package graph

import (
	"github.com/99designs/gqlgen/graphql"
)

// nullForAbsent is the graph's one null-for-absent rule: a field REST
// leaves out is null here, never "". Optional strings the Go model keeps
// as "" (a receipt's transactionHash and amount, a settlement's paidAmount
// and currency, a settlement transaction's reason and amount, a viewer's
// email) are bound straight to the schema's nullable String and Decimal
// fields, and this rule (run by fieldRules) turns their empty value into null for
// every nullable field, so no resolver repeats the rule. A non-null field
// keeps its "" (an endpoint's description may be empty).
func nullForAbsent(fc *graphql.FieldContext, res any) any {
	if s, ok := res.(string); ok && s == "" {
		if fc != nil && fc.Field.Field != nil && fc.Field.Definition != nil && !fc.Field.Definition.Type.NonNull {
			return nil
		}
	}
	return res
}
