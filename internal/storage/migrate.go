package storage

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed all:migrations
var migrationFiles embed.FS

// Migration is one checked-in schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the dialect's migrations in order.
func Migrations(dialect string) ([]Migration, error) {
	dir := path.Join("migrations", dialectDir(dialect))
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("storage: read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("storage: migration %s: name must be NNNN_name.sql", name)
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("storage: migrations must be numbered 1, 2, 3...: found %s", out[i].Name)
		}
	}
	return out, nil
}

func dialectDir(dialect string) string {
	if dialect == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// migrationLockKey is the advisory lock replicas take so that only one of
// them migrates at a time ("voucherd" in ASCII).
const migrationLockKey = 0x766f756368657264

// Migrate applies every migration not yet applied. On PostgreSQL it holds an
// advisory lock, so replicas starting together migrate once.
func (db *DB) Migrate(ctx context.Context) error {
	migs, err := Migrations(db.Dialect)
	if err != nil {
		return err
	}
	conn, err := db.SQL.Conn(ctx)
	if err != nil {
		return fmt.Errorf("storage: migrate: %w", err)
	}
	defer conn.Close()
	if db.IsPostgres() {
		// Waiting for another replica's migration, and building an index
		// on a large table, may take longer than a request's statement.
		if _, err := conn.ExecContext(ctx, "SET statement_timeout = 0"); err != nil {
			return fmt.Errorf("storage: migrate: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "RESET statement_timeout") //nolint:errcheck
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockKey)); err != nil {
			return fmt.Errorf("storage: migration lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)) //nolint:errcheck
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`); err != nil {
		return fmt.Errorf("storage: create schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("storage: read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	rows.Close()
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		if err := applyOne(ctx, conn, db, m); err != nil {
			return err
		}
	}
	return nil
}

func applyOne(ctx context.Context, conn *sql.Conn, db *DB, m Migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storage: migration %s: %w", m.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck
	for _, stmt := range splitStatements(m.SQL) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("storage: migration %s: %w\n%s", m.Name, err, stmt)
		}
	}
	if _, err := tx.ExecContext(ctx, db.Rebind("INSERT INTO schema_migrations (version, name) VALUES (?, ?)"), m.Version, m.Name); err != nil {
		return fmt.Errorf("storage: record migration %s: %w", m.Name, err)
	}
	return tx.Commit()
}

// splitStatements splits a migration on lines ending in ';'. Migrations are
// generated one statement per line (see cmd/migrategen), so no SQL parser is
// needed.
func splitStatements(s string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// PendingSchemaChanges returns the SQL ent would run to bring the database to
// the ent schema: empty when the migrations are in sync with ent/schema.
func (db *DB) PendingSchemaChanges(ctx context.Context) ([]string, error) {
	var b strings.Builder
	if err := db.Client.Schema.WriteTo(ctx, &b); err != nil {
		return nil, fmt.Errorf("storage: schema diff: %w", err)
	}
	var out []string
	for _, stmt := range splitStatements(b.String()) {
		switch strings.ToUpper(strings.TrimSuffix(stmt, ";")) {
		case "BEGIN", "COMMIT":
			continue
		}
		out = append(out, stmt)
	}
	return out, nil
}
