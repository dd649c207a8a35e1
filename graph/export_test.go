package graph

import "github.com/99designs/gqlgen/graphql"

// WithFieldHook returns o observing every field resolution with f.
func WithFieldHook(o Options, f graphql.FieldMiddleware) Options {
	o.fieldHook = f
	return o
}

// WithReadPlanned returns o telling f of each voucher(id:) answer a read
// plan rendered.
func WithReadPlanned(o Options, f func()) Options {
	o.readPlanned = f
	return o
}
