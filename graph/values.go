package graph

import "time"

// values turns a service's row pointers into the value slice gqlgen's
// lists bind to (omit_slice_element_pointers).
func values[T any](rows []*T, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out, nil
}

// unixMilli is a GraphQL Time as the unix milliseconds the REST twin and
// the service take; nil stays nil.
func unixMilli(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}
