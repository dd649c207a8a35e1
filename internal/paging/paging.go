// Package paging holds the page rules of the doors, so no list can be read
// whole by one request: Args for the GraphQL door's Relay connections (one
// rule for every connection), Rule and Rows for the REST door's
// limit/offset lists. The domain's list entry points return a scoped query
// and know nothing of either; each door pages that query by its own rule.
package paging

import (
	"fmt"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Page sizes of every connection.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// Args checks a connection's first/last: each 0 to MaxPageSize, not both.
// With neither, the page is the first DefaultPageSize. It returns the first
// to pass on to ent's Paginate.
func Args(first, last *int) (*int, error) {
	var v apperr.Validator
	bound := fmt.Sprintf("must be 0 to %d", MaxPageSize)
	if first != nil {
		v.Check(*first >= 0 && *first <= MaxPageSize, "first", bound)
	}
	if last != nil {
		v.Check(*last >= 0 && *last <= MaxPageSize, "last", bound)
	}
	if first != nil && last != nil {
		v.Add("last", "give first or last, not both")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if first == nil && last == nil {
		n := DefaultPageSize
		return &n, nil
	}
	return first, nil
}
