package graph

import "github.com/99designs/gqlgen/graphql"

// WithFieldHook returns o observing every field resolution with f.
func WithFieldHook(o Options, f graphql.FieldMiddleware) Options {
	o.fieldHook = f
	return o
}
