package agentsafepg_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/budgetrace"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
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
// judged by the database's clock alone.
func TestBudgetWindowRollsByTheDatabaseClock(t *testing.T) {
	pool := migrated(t)
	skew := &skewClock{}
	const window = time.Hour
	budget := middleware.Budget{Name: "calls", Limit: 2, Window: window, Per: middleware.PerAudience}
	var engines []*middleware.Engine
	for _, off := range []time.Duration{time.Hour, -time.Hour} {
		eng, err := middleware.New(middleware.NewRegistry().Register("send", middleware.Capability{SideEffect: middleware.SideEffectWrite, Budgets: []middleware.Budget{budget}}),
			middleware.WithBudgetStore(agentsafepg.WithBudgetClockSkew(openBudgets(t, pool), skew.Skew)),
			middleware.WithClock(func() time.Time { return time.Now().Add(off) }), middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, eng)
	}
	call := func(eng *middleware.Engine) middleware.Envelope {
		_, env, _ := adapter.Execute(t.Context(), adapter.Resolve(eng, "send"), adapter.Call[any]{Surface: adapter.SurfaceHTTP},
			func(context.Context) (any, error) { return "sent", nil })
		return env
	}
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Fatalf("call within the limit: %+v", env.Error)
		}
	}
	if env := call(engines[1]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter <= window-time.Minute || env.RetryAfter > window {
		t.Fatalf("a third call: %+v (RetryAfter %s), want BUDGET_EXCEEDED, retry in just under an hour by the database's clock", env.Error, env.RetryAfter)
	}
	skew.Advance(window - time.Minute)
	if env := call(engines[0]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded {
		t.Fatalf("a minute before the window passed on the database: %+v, want BUDGET_EXCEEDED", env.Error)
	}
	skew.Advance(time.Minute + 10*time.Millisecond)
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Errorf("the window passed on the database's clock, yet %+v", env.Error)
		}
	}
}
