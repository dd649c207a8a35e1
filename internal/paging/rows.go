package paging

import (
	"context"

	"github.com/voucherd/voucherd/internal/apperr"
)

// Window is one page of a REST list: Limit rows after skipping Offset.
type Window struct{ Limit, Offset int }

// Rule is one REST list's limit and offset bounds, with the wording its
// validation errors have always had.
type Rule struct {
	Default, Max        int
	LimitMsg, OffsetMsg string
}

// The REST lists' rules: GET /api/v1/vouchers, and the webhook lists
// (deliveries, endpoints, events). Their wordings differ as published.
var (
	VoucherRows = Rule{Default: 20, Max: 100, LimitMsg: "must be an integer from 1 to 100", OffsetMsg: "must be a non-negative integer"}
	WebhookRows = Rule{Default: 100, Max: 100, LimitMsg: "must be between 1 and 100", OffsetMsg: "must not be negative"}
)

// Check adds limit's and offset's faults to v (limit 1 to Max, offset not
// negative) and returns the window they ask for; nil means the default
// (Default rows from the start).
func (r Rule) Check(v *apperr.Validator, limit, offset *int) Window {
	w := Window{Limit: r.Default}
	if limit != nil {
		w.Limit = *limit
		v.Check(w.Limit >= 1 && w.Limit <= r.Max, "limit", r.LimitMsg)
	}
	if offset != nil {
		w.Offset = *offset
		v.Check(w.Offset >= 0, "offset", r.OffsetMsg)
	}
	return w
}

// Query is what Rows needs of an ent query (*ent.VoucherQuery and the
// like): Q is the query's own type, T its row.
type Query[Q any, T any] interface {
	Limit(int) Q
	Offset(int) Q
	All(context.Context) ([]T, error)
}

// Rows reads window w of q, which the caller has ordered. A failure is an
// internal error (the query was built and checked by the domain).
func Rows[Q Query[Q, T], T any](ctx context.Context, q Q, w Window) ([]T, error) {
	rows, err := q.Limit(w.Limit).Offset(w.Offset).All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}

// All reads every row of q, which the caller has ordered: the REST lists
// the API does not page (a user's businesses, a business's members) answer
// whole, as published.
func All[T any](ctx context.Context, q interface {
	All(context.Context) ([]T, error)
}) ([]T, error) {
	rows, err := q.All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return rows, nil
}
