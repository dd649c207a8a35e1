package graph

import (
	"entgo.io/contrib/entgql"

	"github.com/voucherd/voucherd/ent"
)

// newestVouchersFirst is the vouchers connection's order when the caller
// gives none, as on REST.
var newestVouchersFirst = &ent.VoucherOrder{Direction: entgql.OrderDirectionDesc, Field: ent.VoucherOrderFieldCreatedAt}
