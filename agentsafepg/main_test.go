package agentsafepg_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Main(m), testenv.IgnoreIdleSinkWorkers()) }

// newPool returns a pool on url, closed when the test ends.
func newPool(t testing.TB, url string, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range configure {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// migrated returns a pool on a fresh database of the shared cluster with
// the schema applied.
func migrated(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPool(t, migratedURL(t))
}

// migratedURL returns the address of a fresh database of the shared
// cluster with the schema applied.
func migratedURL(t testing.TB) string {
	t.Helper()
	url := pgtest.Database(t)
	pool := newPool(t, url)
	defer pool.Close()
	if err := agentsafepg.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return url
}

// skewClock is a skew a test moves forward; the store adds it to the
// database clock.
type skewClock struct{ d atomic.Int64 }

func (c *skewClock) Skew() time.Duration     { return time.Duration(c.d.Load()) }
func (c *skewClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// openApprovals returns an approval store on pool.
func openApprovals(t testing.TB, pool *pgxpool.Pool, opts ...agentsafepg.ApprovalOption) *agentsafepg.ApprovalStore {
	t.Helper()
	s, err := agentsafepg.NewApprovalStore(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// truncate empties the approval records of pool's database.
func truncate(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "TRUNCATE agentsafe.approvals"); err != nil {
		t.Fatal(err)
	}
}
