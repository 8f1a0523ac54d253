package agentsafepg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/conformance"
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
