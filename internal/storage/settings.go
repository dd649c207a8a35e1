package storage

import (
	"context"
	"fmt"

	"github.com/voucherd/voucherd/ent/setting"
)

// Setting returns the stored value of key, storing gen()'s value first if
// there is none. Concurrent callers (replicas starting together) all get the
// one value that won.
func (db *DB) Setting(ctx context.Context, key string, gen func() (string, error)) (string, error) {
	if s, err := db.Client.Setting.Get(ctx, key); err == nil {
		return s.Value, nil
	}
	v, err := gen()
	if err != nil {
		return "", err
	}
	if err := db.Client.Setting.Create().SetID(key).SetValue(v).OnConflictColumns(setting.FieldID).DoNothing().Exec(ctx); err != nil && !isNoRows(err) {
		return "", fmt.Errorf("storage: store setting %s: %w", key, err)
	}
	s, err := db.Client.Setting.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("storage: read setting %s: %w", key, err)
	}
	return s.Value, nil
}

func isNoRows(err error) bool {
	return err != nil && err.Error() == "sql: no rows in result set"
}
