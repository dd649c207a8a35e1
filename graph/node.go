package graph

import (
	"context"
	"strings"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/ids"
)

// nodeLoaders resolve node(id:) through the owning service, so the graph
// applies the same visibility rules as REST: an id the caller may not see is
// null, exactly like an id that does not exist.
func (r *Resolver) nodeLoaders() map[string]func(context.Context, string) (ent.Noder, error) {
	return map[string]func(context.Context, string) (ent.Noder, error){
		ids.Session: func(ctx context.Context, id string) (ent.Noder, error) { return r.Sessions.Get(ctx, id) },
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
	if apperr.HasCode(err, apperr.NotFound) {
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
