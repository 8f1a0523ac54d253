package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// budgetClock is a clock a budget rule moves forward.
type budgetClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *budgetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *budgetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// plantedBudgets is the memory store with one defect planted.
type plantedBudgets struct {
	store.BudgetStore
	bug string
}

func (p plantedBudgets) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	if p.bug == "forgets-repeats" && req.ExecutionID != "" {
		req.ExecutionID += "/" + time.Now().String() // every try a new reservation
	}
	return p.BudgetStore.Reserve(ctx, req)
}

func (p plantedBudgets) Release(ctx context.Context, req store.BudgetRequest) error {
	if p.bug == "releases-any" {
		req.ExecutionID = "exe_a" // whoever asks, the first reservation goes
	}
	return p.BudgetStore.Release(ctx, req)
}

// TestPlantedBudgetStore runs RunBudgetStore against one planted bug when
// the parent test asks for it, in a child process.
func TestPlantedBudgetStore(t *testing.T) {
	bug := os.Getenv("CONFORMANCE_PLANTED_BUDGET")
	if bug == "" {
		t.Skip("run by TestPlantedBudgetStoresFailExactlyTheirRules")
	}
	conformance.RunBudgetStore(t, func(t *testing.T) conformance.BudgetStoreUnderTest {
		c := &budgetClock{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
		return conformance.BudgetStoreUnderTest{Store: plantedBudgets{budgetstore.NewMemory(budgetstore.WithClock(c.Now)), bug}, Advance: c.Advance}
	})
}

// TestPlantedBudgetStoresFailExactlyTheirRules: a store that reserves
// again for a repeated execution fails the idempotency rules (the repeat
// of an overdraft included); one that releases another execution's
// reservation fails the rules that release.
func TestPlantedBudgetStoresFailExactlyTheirRules(t *testing.T) {
	if os.Getenv("CONFORMANCE_PLANTED_BUDGET") != "" {
		t.Skip("inside a planted run")
	}
	for bug, want := range map[string][]string{
		"forgets-repeats": {
			"Reserve/is_idempotent_per_execution_id",
			"Overdraft/an_approved_overdraft_is_taken_and_recorded",
			// Its releases find nothing: the reservations are under other ids.
			"Release/gives_back_the_execution's_own_reservation_only",
			"Release/a_released_execution_may_reserve_again",
		},
		"releases-any": {
			"Release/gives_back_the_execution's_own_reservation_only",
			// Releasing the overdraft takes the reservation that fit instead.
			"Overdraft/an_approved_overdraft_is_taken_and_recorded",
		},
	} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestPlantedBudgetStore$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CONFORMANCE_PLANTED_BUDGET="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a budget store that %s", bug)
			}
			var got []string
			for line := range strings.Lines(string(out)) {
				if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestPlantedBudgetStore/"); ok {
					got = append(got, strings.Fields(name)[0])
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("a budget store that %s failed\n%s\nwant exactly\n%s", bug, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
