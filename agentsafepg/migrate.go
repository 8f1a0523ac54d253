package agentsafepg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the versioned SQL the stores need, one file per
// version ("0001_approvals.sql", …), for an application that applies its
// schema with its own tool. Each file creates what it needs in the schema
// "agentsafe" if it is missing, records its version in
// agentsafe.schema_migrations, and is meant to run in one transaction,
// in the order of the names. [Migrate] applies the same files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}

// migration is one embedded SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded files in version order.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".sql")
		v, name, ok2 := strings.Cut(base, "_")
		version, err := strconv.Atoi(v)
		if !ok || !ok2 || err != nil {
			return nil, fmt.Errorf("agentsafepg: migration file %s is not named NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: name, sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			// Migrate would apply both once, but a database that has one
			// would never get the other.
			return nil, fmt.Errorf("agentsafepg: migrations %04d_%s and %04d_%s share a version", out[i-1].version, out[i-1].name, out[i].version, out[i].name)
		}
	}
	return out, nil
}

// schemaVersion is the newest version of the embedded migrations: what
// this package's stores need.
var schemaVersion = func() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		panic(fmt.Sprintf("agentsafepg: the embedded migrations: %v", err))
	}
	return ms[len(ms)-1].version
}()

// migrateLock is the key of the advisory lock Migrate holds, so that
// instances starting together apply each migration once.
const migrateLock = 0x6167656e74736166 // "agentsaf"

// Migrate brings the database's "agentsafe" schema up to the version this
// package needs, applying each missing file of [Migrations] in its own
// transaction, in order, under an advisory lock (instances that start
// together wait for each other; each file is applied once). It is a
// no-op on an up-to-date database, and never undoes or rewrites what a
// newer version applied. The pool's user needs the right to create a
// schema, tables and functions.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return errors.New("agentsafepg: Migrate needs a pool")
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("agentsafepg: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("agentsafepg: migrate: take the lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session, which the pool
		// may keep: close the connection instead.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrateLock)); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	applied := map[int]bool{}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('agentsafe.schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("agentsafepg: migrate: %w", err)
	}
	if exists {
		rows, err := conn.Query(ctx, "SELECT version FROM agentsafe.schema_migrations")
		if err != nil {
			return fmt.Errorf("agentsafepg: migrate: %w", err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return fmt.Errorf("agentsafepg: migrate: %w", err)
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("agentsafepg: migrate: %w", err)
		}
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("agentsafepg: migrate %04d_%s: %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			_ = tx.Rollback(ctx) // the Exec's error is the one to report
			return fmt.Errorf("agentsafepg: migrate %04d_%s: %w", m.version, m.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("agentsafepg: migrate %04d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}

// checkSchema fails unless the database has every embedded migration up
// to version (the stores check it when they are made, so that a missing
// Migrate shows at start-up, not at the first approval). Versions may
// skip numbers: a number can be kept for a migration other work brings.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	var want []int32
	for _, m := range ms {
		if m.version <= version {
			want = append(want, int32(m.version))
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('agentsafe.schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("agentsafepg: read the schema version: %w", err)
	}
	var have int
	if exists {
		err := pool.QueryRow(ctx, "SELECT count(*) FROM agentsafe.schema_migrations WHERE version = ANY($1)", want).Scan(&have)
		if err != nil {
			return fmt.Errorf("agentsafepg: read the schema version: %w", err)
		}
	}
	if have < len(want) {
		return fmt.Errorf("agentsafepg: the database has %d of the %d migrations this package needs: run agentsafepg.Migrate (or apply agentsafepg.Migrations) first", have, len(want))
	}
	return nil
}
