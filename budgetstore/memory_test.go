package budgetstore_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// fakeClock is a clock a test moves forward.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMemoryConformance(t *testing.T) {
	conformance.RunBudgetStore(t, func(t *testing.T) conformance.BudgetStoreUnderTest {
		c := newFakeClock()
		return conformance.BudgetStoreUnderTest{Store: budgetstore.NewMemory(budgetstore.WithClock(c.Now)), Advance: c.Advance}
	})
}
