package agentsafepg_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/budgetrace"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// pinnedClock is a clock a test moves forward; the budget store decides at
// it instead of the database clock.
type pinnedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *pinnedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *pinnedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestBudgetStoreConformance runs the budget store contract on
// PostgreSQL: one database, emptied for each rule, the clock pinned.
func TestBudgetStoreConformance(t *testing.T) {
	pool := migrated(t)
	conformance.RunBudgetStore(t, func(t *testing.T) conformance.BudgetStoreUnderTest {
		if _, err := pool.Exec(context.Background(), "TRUNCATE agentsafe.budgets CASCADE"); err != nil {
			t.Fatal(err)
		}
		c := &pinnedClock{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
		return conformance.BudgetStoreUnderTest{Store: agentsafepg.WithBudgetClock(openBudgets(t, pool), c.Now), Advance: c.Advance}
	})
}

func openBudgets(t testing.TB, pool *pgxpool.Pool) *agentsafepg.BudgetStore {
	t.Helper()
	s, err := agentsafepg.NewBudgetStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The exactness race: 8 engines × 64 callers, amounts of 1 to 5 against a
// limit of 100.
const (
	raceEngines = 8
	raceCallers = 64
	raceLimit   = 100
)

// TestBudgetIsExactAcrossEngines: 8 engines × 64 callers, each engine on
// a pool of its own, reserve random amounts against a limit of 100: what
// ran never passes it, it ends filled to within the largest amount, and
// the database holds exactly the reservations of what ran.
func TestBudgetIsExactAcrossEngines(t *testing.T) {
	url := migratedURL(t)
	r := budgetrace.Race{Callers: raceCallers, Calls: 2, Limit: raceLimit}
	for range raceEngines {
		r.Stores = append(r.Stores, openBudgets(t, newPool(t, url)))
	}
	budgetrace.Check(t, r, budgetrace.Run(t, r), false)
}

// TestBudgetHoldsWhenPostgresStops stops PostgreSQL (an immediate
// shutdown, as a crash) once a few refunds ran, lets calls fail
// BUDGET_UNAVAILABLE with nothing run, and starts it again: nothing ran
// past the limit, and every run's reservation survived (nothing lost). A
// reservation committed just before the crash whose reply never came may
// be left standing: the budget errs on the side of less.
func TestBudgetHoldsWhenPostgresStops(t *testing.T) {
	srv := startMigrated(t)
	var unavailable atomic.Int64
	var once sync.Once
	r := budgetrace.Race{Callers: raceCallers, Calls: 3, Limit: raceLimit}
	for range raceEngines {
		r.Stores = append(r.Stores, openBudgets(t, quickPool(t, srv.URL())))
	}
	r.OnCall = func(c middleware.Code) {
		if c == middleware.CodeBudgetUnavailable {
			unavailable.Add(1)
		}
	}
	r.OnRun = func(n int64) {
		if n != 8 {
			return
		}
		once.Do(func() {
			srv.Stop()
			// Calls keep coming while it is down; once enough have failed,
			// it comes back, and the rest fill the budget.
			deadline := time.Now().Add(10 * time.Second)
			for unavailable.Load() < 20 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			srv.Restart()
		})
	}
	res := budgetrace.Run(t, r)
	t.Logf("outcomes %v", res.Codes)
	if res.Codes[middleware.CodeBudgetUnavailable] == 0 {
		t.Fatal("no call met PostgreSQL down: the test proved nothing")
	}
	budgetrace.Check(t, r, res, true)
}

// TestBudgetWindowRollsByTheDatabaseClock: two engines whose own clocks
// are an hour ahead and an hour behind share a budget; the window is
// judged by the database's clock alone (moved forward by a skew).
func TestBudgetWindowRollsByTheDatabaseClock(t *testing.T) {
	pool := migrated(t)
	skew := &skewClock{}
	var stores [2]store.BudgetStore
	for i := range stores {
		stores[i] = agentsafepg.WithBudgetClockSkew(openBudgets(t, pool), skew.Skew)
	}
	budgetrace.StoreClock(t, stores, skew.Advance)
}

// TestAuditSinkStoresWhatABudgetDecided: the budget fields of started and
// budget_exceeded are columns of the trail, covered by its chain's hash
// (a changed amount is found); other events leave them NULL; an amount
// beyond what a record writes exactly is clamped, and marked so.
func TestAuditSinkStoresWhatABudgetDecided(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	sink := openAudit(t, pool)
	exceeded := event(middleware.EventBudgetExceeded, "exe_over")
	exceeded.Budget, exceeded.Amount, exceeded.Spent, exceeded.Limit, exceeded.RetryAfter = "refunds", 45000, 180000, 200000, 90*time.Minute
	huge := event(middleware.EventStarted, "exe_huge")
	huge.Budget, huge.Amount, huge.Spent, huge.Limit = "calls", 1<<62, 1<<62, math.MaxInt64
	if err := sink.RecordBatch(ctx, []middleware.Event{exceeded, event(middleware.EventCompleted, "exe_over"), huge}); err != nil {
		t.Fatal(err)
	}
	if rep := verifyTrail(t, pool, nil, nil); rep.Tampered() {
		t.Fatalf("the trail with budget fields does not verify: %+v", rep)
	}
	var clamped int64
	var altered []string
	if err := pool.QueryRow(ctx, `SELECT budget_amount, altered FROM agentsafe.audit_events WHERE execution_id = 'exe_huge'`).Scan(&clamped, &altered); err != nil {
		t.Fatal(err)
	}
	if clamped != 1<<53-1 || !slices.Equal(altered, []string{"budget_amount:clamped", "budget_spent:clamped", "budget_limit:clamped"}) {
		t.Errorf("an amount of 2^62 is stored as %d, altered %q", clamped, altered)
	}
	var budget *string
	var amount, spent, limit *int64
	var retryAfter *time.Duration
	for typ, want := range map[middleware.EventType]bool{middleware.EventBudgetExceeded: true, middleware.EventCompleted: false} {
		if err := pool.QueryRow(ctx, `SELECT budget, budget_amount, budget_spent, budget_limit, retry_after FROM agentsafe.audit_events
			WHERE execution_id = 'exe_over' AND type = $1`, string(typ)).Scan(&budget, &amount, &spent, &limit, &retryAfter); err != nil {
			t.Fatal(err)
		}
		switch {
		case want && (budget == nil || *budget != "refunds" || *amount != 45000 || *spent != 180000 || *limit != 200000 || *retryAfter != 90*time.Minute):
			t.Errorf("%s: stored %v %v %v %v %v", typ, budget, amount, spent, limit, retryAfter)
		case !want && (budget != nil || amount != nil || retryAfter != nil):
			t.Errorf("%s: an event without a budget stored one: %v %v %v", typ, budget, amount, retryAfter)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE agentsafe.audit_events SET budget_amount = 4500 WHERE execution_id = 'exe_over' AND type = $1`,
		string(middleware.EventBudgetExceeded)); err != nil {
		t.Fatal(err)
	}
	if rep := verifyTrail(t, pool, nil, nil); !rep.Tampered() {
		t.Errorf("a changed budget amount verifies: %+v", rep)
	}
}
