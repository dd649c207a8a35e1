package graph

import (
	"fmt"

	"entgo.io/contrib/entgql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
)

// Page sizes of the Relay connections this package serves.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// pageArgs checks a connection's first/last: at most one of them, from 1
// to MaxPageSize; neither means the first DefaultPageSize. An unbounded
// page would let one request read a whole table.
func pageArgs(first, last *int) (*int, *int, error) {
	var v apperr.Validator
	bound := fmt.Sprintf("must be an integer from 1 to %d", MaxPageSize)
	if first != nil {
		v.Check(*first >= 1 && *first <= MaxPageSize, "first", bound)
	}
	if last != nil {
		v.Check(*last >= 1 && *last <= MaxPageSize, "last", bound)
	}
	v.Check(first == nil || last == nil, "last", "give first or last, not both")
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	if first == nil && last == nil {
		n := DefaultPageSize
		first = &n
	}
	return first, last, nil
}

// newestVouchersFirst is the vouchers connection's order when the caller
// gives none, as on REST.
var newestVouchersFirst = &ent.VoucherOrder{Direction: entgql.OrderDirectionDesc, Field: ent.VoucherOrderFieldCreatedAt}
