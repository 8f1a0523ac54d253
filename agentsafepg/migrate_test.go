package agentsafepg_test

import (
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
)

// TestMigrateIsIdempotentAndSerialized: instances that start together
// migrate one database once; a second Migrate is a no-op.
func TestMigrateIsIdempotentAndSerialized(t *testing.T) {
	ctx := t.Context()
	url := pgtest.Database(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		pool := newPool(t, url)
		wg.Go(func() { errs[i] = agentsafepg.Migrate(ctx, pool) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: Migrate: %v", i, err)
		}
	}
	pool := newPool(t, url)
	if err := agentsafepg.Migrate(ctx, pool); err != nil {
		t.Errorf("Migrate on an up-to-date database: %v", err)
	}
	rows, err := pool.Query(ctx, "SELECT version FROM agentsafe.schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	files, _ := fs.Glob(agentsafepg.Migrations(), "*.sql")
	var want []int32
	for _, f := range files {
		v, _ := strconv.Atoi(f[:4])
		want = append(want, int32(v))
	}
	if !slices.Equal(got, want) || len(got) == 0 || got[0] != 1 {
		t.Errorf("each migration applied and recorded once: versions %v for files %v", got, files)
	}
}

// TestMigrationsApplyWithoutMigrate: an application may apply the files
// itself, each in a transaction, in order; the stores then work, and a
// later Migrate is a no-op.
func TestMigrationsApplyWithoutMigrate(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, pgtest.Database(t))
	if _, err := agentsafepg.NewApprovalStore(pool); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("a store on a database without the schema must fail at once, naming Migrate: %v", err)
	}
	if _, err := agentsafepg.NewAuditSink(pool); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("an audit sink on a database without the schema must fail at once, naming Migrate: %v", err)
	}
	files, err := fs.Glob(agentsafepg.Migrations(), "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("Migrations lists %v, %v", files, err)
	}
	if !slices.IsSorted(files) || !strings.HasPrefix(files[0], "0001_") {
		t.Errorf("the files are named NNNN_name.sql, applied in the order of their names: %v", files)
	}
	for _, name := range files {
		sql, err := fs.ReadFile(agentsafepg.Migrations(), name)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // each file is idempotent
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, string(sql)); return err }); err != nil {
				t.Fatalf("apply %s: %v", name, err)
			}
		}
	}
	s := openApprovals(t, pool)
	approve(t, ctx, s, digestA)
	if err := agentsafepg.Migrate(ctx, pool); err != nil {
		t.Errorf("Migrate after the files were applied by hand: %v", err)
	}
	if _, err := agentsafepg.NewAuditSink(pool); err != nil {
		t.Errorf("an audit sink on the migrated database: %v", err)
	}
}
