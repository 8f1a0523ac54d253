package approvalstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/conformance"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for the memory store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestMemoryConformance(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) conformance.StoreUnderTest {
		c := &clock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
		return conformance.StoreUnderTest{Store: approvalstore.NewMemory(approvalstore.WithClock(c.Now)), Advance: c.Advance, MaxPending: 20}
	})
}
