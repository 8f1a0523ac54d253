package agentsafepg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// TestResultStoreConformance runs the result store contract on
// PostgreSQL: one database, emptied for each rule, and a clock skew for
// Advance.
func TestResultStoreConformance(t *testing.T) {
	pool := migrated(t)
	conformance.RunResultStore(t, func(t *testing.T) conformance.ResultStoreUnderTest {
		if _, err := pool.Exec(context.Background(), "TRUNCATE agentsafe.results"); err != nil {
			t.Fatal(err)
		}
		c := &skewClock{}
		return conformance.ResultStoreUnderTest{Store: agentsafepg.WithResultClockSkew(openResults(t, pool), c.Skew), Advance: c.Advance}
	})
}

// openResults returns a result store on pool.
func openResults(t testing.TB, pool *pgxpool.Pool) *agentsafepg.ResultStore {
	t.Helper()
	s, err := agentsafepg.NewResultStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResultStoreDeletesGoneRecords: records past their retention (or a
// read's claim past its lease) are deleted by later claims of new keys, so
// the table does not grow without bound; records not gone are kept.
func TestResultStoreDeletesGoneRecords(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	c := &skewClock{}
	s := agentsafepg.WithResultClockSkew(openResults(t, pool), c.Skew)
	claim := func(n int, writeLike bool, retention time.Duration) {
		t.Helper()
		key := store.ResultKey{Owner: fmt.Sprintf("own_%032x", n%2), Key: fmt.Sprintf("idk_%032x", n)}
		got, err := s.Claim(ctx, store.ClaimRequest{ResultKey: key, Digest: "sha256:00", ExecutionID: fmt.Sprintf("exe_%d", n),
			Lease: time.Minute, WriteLike: writeLike, Retention: retention})
		if err != nil || got.Status != store.ClaimAcquired {
			t.Fatalf("Claim %d: %v, %v", n, got.Status, err)
		}
	}
	rows := func() (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM agentsafe.results").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for n := range 5 {
		claim(n, n%2 == 0, time.Hour) // write-like claims (kept a lease and an hour), and reads (a lease)
	}
	claim(5, true, 24*time.Hour) // kept a day
	c.Advance(2 * time.Hour)
	claim(6, true, time.Hour)
	if got := rows(); got != 2 {
		t.Errorf("a claim of a new key must delete the records that are gone and keep the others: %d rows, want 2", got)
	}
}
