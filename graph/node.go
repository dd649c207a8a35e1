package graph

import (
	"context"
	"fmt"
	"strings"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/paging"
)

// nodeLoaders resolve node(id:) through the owning service, so the graph
// applies the same visibility rules as REST: an id the caller may not see is
// null, exactly like an id that does not exist.
func (r *Resolver) nodeLoaders() map[string]func(context.Context, string) (ent.Noder, error) {
	return map[string]func(context.Context, string) (ent.Noder, error){
		ids.Session:  func(ctx context.Context, id string) (ent.Noder, error) { return r.Sessions.Get(ctx, id) },
		ids.Voucher:  func(ctx context.Context, id string) (ent.Noder, error) { return r.Vouchers.Get(ctx, id) },
		ids.Business: func(ctx context.Context, id string) (ent.Noder, error) { return r.Businesses.Get(ctx, id) },
		ids.BusinessUser: func(ctx context.Context, id string) (ent.Noder, error) {
			return r.Businesses.GetUser(ctx, id)
		},
		ids.WebhookEndpoint: func(ctx context.Context, id string) (ent.Noder, error) { return r.Webhooks.EndpointByID(ctx, id) },
		ids.Delivery:        func(ctx context.Context, id string) (ent.Noder, error) { return r.Webhooks.DeliveryByID(ctx, id) },
		ids.Event:           func(ctx context.Context, id string) (ent.Noder, error) { return r.Webhooks.EventByID(ctx, id) },
		ids.Widget: func(ctx context.Context, id string) (ent.Noder, error) {
			w, err := r.Widgets.Node(ctx, id)
			if w == nil || err != nil {
				return nil, err
			}
			return w, nil
		},
	}
}

func (r *Resolver) node(ctx context.Context, id string) (ent.Noder, error) {
	i := strings.IndexByte(id, '_')
	if i < 0 {
		return nil, nil
	}
	load, ok := r.nodeLoaders()[id[:i+1]]
	if !ok {
		return nil, nil
	}
	n, err := load(ctx, id)
	// A token of a kind that can never see this type (a resource token
	// asking for a business) is a null node too, as on REST it would be a
	// 403: null keeps one unreadable id from failing a whole nodes(ids:) list.
	if apperr.HasCode(err, apperr.NotFound) || apperr.HasCode(err, apperr.Forbidden) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// nullIfNotFound turns a not_found into a null result: the GraphQL way to
// say "no such object" for a single-object query field.
func nullIfNotFound[T any](v *T, err error) (*T, error) {
	if apperr.HasCode(err, apperr.NotFound) {
		return nil, nil
	}
	return v, err
}

// nodes loads ids in order, null where node(id:) would be null. A page of
// ids at most, like the connections.
func (r *Resolver) nodes(ctx context.Context, ids []string) ([]ent.Noder, error) {
	if len(ids) > paging.MaxPageSize {
		return nil, apperr.Invalid("ids", fmt.Sprintf("at most %d ids", paging.MaxPageSize))
	}
	out := make([]ent.Noder, len(ids))
	for i, id := range ids {
		n, err := r.node(ctx, id)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}
