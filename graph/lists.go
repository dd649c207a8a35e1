package graph

import (
	"context"

	"entgo.io/contrib/entgql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
)

// The connections. Each domain service has one list per entity, a query
// scoped to what the caller may see (voucher.Service.List,
// business.Service.List and ListUsers, session.Service.List,
// webhook.Service.ListDeliveries); the Relay machinery is this door's:
// the page bounds (paging.Args), entgql's cursors, orderBy and where, and
// each connection's default order (the same as REST's: the domain's
// NewestFirst/OldestFirst). REST pages the same lists by limit and offset.

// vouchers is Query.vouchers, newest first by default.
func (r *Resolver) vouchers(ctx context.Context, after *ent.Cursor, first *int, before *ent.Cursor, last *int,
	orderBy *ent.VoucherOrder, where *ent.VoucherWhereInput) (*ent.VoucherConnection, error) {
	// This connection has always judged its page bounds before the caller.
	first, err := paging.Args(first, last)
	if err != nil {
		return nil, err
	}
	q, err := r.Vouchers.List(ctx, voucher.Filter{})
	if err != nil {
		return nil, err
	}
	if orderBy == nil {
		orderBy = &ent.VoucherOrder{Direction: entgql.OrderDirectionDesc, Field: ent.VoucherOrderFieldCreatedAt}
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithVoucherOrder(orderBy), ent.WithVoucherFilter(where.Filter))
	if err != nil {
		return nil, apperr.From(err)
	}
	return conn, nil
}

// businesses is Query.businesses, oldest first by default.
func (r *Resolver) businesses(ctx context.Context, after *ent.Cursor, first *int, before *ent.Cursor, last *int,
	orderBy *ent.BusinessOrder, where *ent.BusinessWhereInput) (*ent.BusinessConnection, error) {
	q, err := r.Businesses.List(ctx)
	if err != nil {
		return nil, err
	}
	if first, err = paging.Args(first, last); err != nil {
		return nil, err
	}
	if where != nil {
		if _, err := where.P(); err != nil && err != ent.ErrEmptyBusinessWhereInput {
			return nil, apperr.Invalid("where", err.Error())
		}
	}
	if orderBy == nil {
		orderBy = &ent.BusinessOrder{Field: ent.BusinessOrderFieldCreatedAt, Direction: entgql.OrderDirectionAsc}
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithBusinessOrder(orderBy), ent.WithBusinessFilter(where.Filter))
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return conn, nil
}

// members is Business.members, oldest first by default. The business
// service checks again that the caller is an ACTIVE member of b, so no
// path to a Business object can reveal its members to anyone else.
func (r *Resolver) members(ctx context.Context, b *ent.Business, after *ent.Cursor, first *int, before *ent.Cursor, last *int,
	orderBy *ent.BusinessUserOrder, where *ent.BusinessUserWhereInput) (*ent.BusinessUserConnection, error) {
	q, err := r.Businesses.ListUsers(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	if first, err = paging.Args(first, last); err != nil {
		return nil, err
	}
	if where != nil {
		if _, err := where.P(); err != nil && err != ent.ErrEmptyBusinessUserWhereInput {
			return nil, apperr.Invalid("where", err.Error())
		}
	}
	if orderBy == nil {
		orderBy = &ent.BusinessUserOrder{Field: ent.BusinessUserOrderFieldCreatedAt, Direction: entgql.OrderDirectionAsc}
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithBusinessUserOrder(orderBy), ent.WithBusinessUserFilter(where.Filter))
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return conn, nil
}

// voucherSessions is Query.voucherSessions, newest first by default.
func (r *Resolver) voucherSessions(ctx context.Context, after *ent.Cursor, first *int, before *ent.Cursor, last *int,
	orderBy *ent.VoucherSessionOrder) (*ent.VoucherSessionConnection, error) {
	q, err := r.Sessions.List(ctx)
	if err != nil {
		return nil, err
	}
	if first, err = paging.Args(first, last); err != nil {
		return nil, err
	}
	if orderBy == nil {
		orderBy = &ent.VoucherSessionOrder{Field: ent.VoucherSessionOrderFieldCreatedAt, Direction: entgql.OrderDirectionDesc}
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithVoucherSessionOrder(orderBy))
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return conn, nil
}

// webhookDeliveries is Query.webhookDeliveries, always newest first (the
// field takes no orderBy).
func (r *Resolver) webhookDeliveries(ctx context.Context, businessID string, f webhook.DeliveryFilter,
	after *ent.Cursor, first *int, before *ent.Cursor, last *int) (*ent.WebhookDeliveryConnection, error) {
	q, err := r.Webhooks.ListDeliveries(ctx, businessID, f)
	if err != nil {
		return nil, err
	}
	if first, err = paging.Args(first, last); err != nil {
		return nil, err
	}
	conn, err := q.Paginate(ctx, after, first, before, last, ent.WithWebhookDeliveryOrder(&ent.WebhookDeliveryOrder{
		Direction: entgql.OrderDirectionDesc, Field: ent.WebhookDeliveryOrderFieldCreatedAt,
	}))
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return conn, nil
}
