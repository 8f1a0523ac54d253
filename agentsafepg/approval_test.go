package agentsafepg_test

import (
	"testing"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/conformance"
)

// TestApprovalStoreConformance runs the store contract on PostgreSQL: one
// database, emptied for each rule, and a clock skew for Advance.
func TestApprovalStoreConformance(t *testing.T) {
	pool := migrated(t)
	conformance.RunStore(t, func(t *testing.T) conformance.StoreUnderTest {
		truncate(t, pool)
		c := &skewClock{}
		s := openApprovals(t, pool, agentsafepg.WithClockSkew(c.Skew))
		return conformance.StoreUnderTest{Store: s, Advance: c.Advance, MaxPending: 20}
	})
}
