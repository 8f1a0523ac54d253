package approvalstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

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

// TestMemoryDecideWhileASweepForgetsTheRecord: the approver policy runs
// outside the store's lock; a Create meanwhile may sweep the record away.
// Decide then answers not found, and never dereferences the missing
// record.
func TestMemoryDecideWhileASweepForgetsTheRecord(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	var s *approvalstore.Memory
	sweep := func(ctx context.Context, _ store.ApprovalRecord, _ middleware.Actor) error {
		c.Advance(48 * time.Hour) // past expiry and the default retention
		_, err := s.Create(ctx, request("sha256:"+strings.Repeat("9", 64)))
		return err
	}
	s = approvalstore.NewMemory(approvalstore.WithClock(c.Now), approvalstore.WithApproverPolicy(sweep))
	rec, err := s.Create(t.Context(), request(digestA))
	if err != nil {
		t.Fatal(err)
	}
	_, changed, err := s.Decide(t.Context(), rec.ID, decision(true, manager))
	if !errors.Is(err, store.ErrApprovalNotFound) || changed {
		t.Errorf("a record swept while the policy ran must be not found: changed=%v, %v", changed, err)
	}
}
