package pubsub

import (
	"context"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
)

// EntLoader loads vouchers with the service's ent client, so the read model
// installed on it (an expired voucher shows as DISCARDED) applies to what
// subscribers see exactly as to reads.
type EntLoader struct{ Client *ent.Client }

// Load implements Loader.
func (l EntLoader) Load(ctx context.Context, ids []string) ([]*ent.Voucher, error) {
	return l.Client.Voucher.Query().Where(voucher.IDIn(ids...)).All(ctx)
}

// ChangedSince implements Loader.
func (l EntLoader) ChangedSince(ctx context.Context, t time.Time) ([]VoucherChange, error) {
	rows, err := l.Client.Voucher.Query().
		Where(voucher.UpdatedAtGTE(t.UTC())).
		Select(voucher.FieldID, voucher.FieldVersion, voucher.FieldSessionID, voucher.FieldBusinessID, voucher.FieldPayerID, voucher.FieldPayeeID).
		All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]VoucherChange, len(rows))
	for i, v := range rows {
		out[i] = ChangeOf(v)
	}
	return out, nil
}

// ChangeOf is the change notification for v's current version.
func ChangeOf(v *ent.Voucher) VoucherChange {
	c := VoucherChange{ID: v.ID, Version: v.Version, SessionID: v.SessionID, PayerID: v.PayerID, PayeeID: v.PayeeID}
	if v.BusinessID != nil {
		c.BusinessID = *v.BusinessID
	}
	return c
}
