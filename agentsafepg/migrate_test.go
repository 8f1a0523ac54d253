package agentsafepg_test

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/middleware/store"
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

// TestMigrateAddsTheResultQuotaToAVersion3Database: a database with
// results stored under migration 0003 (no owner) migrates to the quota's
// schema: its rows are kept (without an owner, so no claim finds them
// again), and the store claims and counts under the new one.
func TestMigrateAddsTheResultQuotaToAVersion3Database(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, pgtest.Database(t))
	for _, name := range []string{"0001_approvals.sql", "0002_audit.sql", "0003_results.sql"} {
		sql, err := fs.ReadFile(agentsafepg.Migrations(), name)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, string(sql)); return err }); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	const old = "idk_00000000000000000000000000000001"
	if _, err := pool.Exec(ctx, "SELECT * FROM agentsafe.result_claim($1, 'sha256:00', 'exe_old', '1 minute', true, '1 hour', false, '0')", old); err != nil {
		t.Fatal(err)
	}
	if err := agentsafepg.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var owner string
	if err := pool.QueryRow(ctx, "SELECT owner FROM agentsafe.results WHERE key = $1", old).Scan(&owner); err != nil || owner != "" {
		t.Errorf("the row stored under 0003 is kept without an owner: %q, %v", owner, err)
	}
	s := openResults(t, pool)
	k := store.ResultKey{Owner: "own_00000000000000000000000000000001"}
	for i, want := range []store.ClaimStatus{store.ClaimAcquired, store.ClaimQuotaExceeded} {
		k.Key = fmt.Sprintf("idk_%032x", i+1)
		got, err := s.Claim(ctx, store.ClaimRequest{ResultKey: k, Digest: "sha256:00", ExecutionID: "exe_new", Lease: time.Minute,
			WriteLike: true, Retention: time.Hour, Quota: store.ResultQuota{Records: 1}})
		if err != nil || got.Status != want {
			t.Errorf("claim %d after the migration: %s, %v; want %s", i+1, got.Status, err, want)
		}
	}
}
