package budgetstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware/store"
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

// TestMemoryMatchesAModel drives the memory store through two thousand
// random reservations, releases and clock moves (the ring it keeps them in
// grows and wraps around) and checks every answer against a plain list.
func TestMemoryMatchesAModel(t *testing.T) {
	c := newFakeClock()
	m := budgetstore.NewMemory(budgetstore.WithClock(c.Now))
	const key, limit, window = "bgt_00000000000000000000000000000001", 500, time.Minute
	type res struct {
		exe    string
		amount int64
		at     time.Time
	}
	var model []res
	spent := func() (s int64) {
		for _, r := range model {
			if c.Now().Before(r.at.Add(window)) {
				s += r.amount
			}
		}
		return s
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var seen []res // every execution that reserved, for repeats
	for i := range 2000 {
		switch op := rng.IntN(12); {
		case op >= 10 && len(seen) > 0: // a repeat: the same reservation while it counts, else a new one
			r := seen[rng.IntN(len(seen))]
			j := slices.IndexFunc(model, func(m res) bool { return m.exe == r.exe })
			before := spent()
			got, err := m.Reserve(t.Context(), store.BudgetRequest{Key: key, ExecutionID: r.exe, Amount: r.amount, Limit: limit, Window: window})
			if err != nil {
				t.Fatal(err)
			}
			if j >= 0 && c.Now().Before(model[j].at.Add(window)) {
				if !got.Reserved || got.Spent != before {
					t.Fatalf("step %d: a repeat of a counted reservation: %+v on %d spent", i, got, before)
				}
				break
			}
			if j >= 0 {
				model = slices.Delete(model, j, j+1)
			}
			if fits := before+r.amount <= limit; got.Reserved != fits {
				t.Fatalf("step %d: a repeat of %s, no longer counted: %+v on %d spent", i, r.exe, got, before)
			}
			if got.Reserved {
				model = append(model, res{r.exe, r.amount, c.Now()})
			}
		case op < 6:
			exe, amount := fmt.Sprintf("exe_%d", i), rng.Int64N(20)
			before := spent()
			got, err := m.Reserve(t.Context(), store.BudgetRequest{Key: key, ExecutionID: exe, Amount: amount, Limit: limit, Window: window})
			if err != nil {
				t.Fatal(err)
			}
			if fits := before+amount <= limit; got.Reserved != fits {
				t.Fatalf("step %d: reserve %d on %d spent: %+v", i, amount, before, got)
			}
			if got.Reserved {
				model = append(model, res{exe, amount, c.Now()})
				seen = append(seen, res{exe, amount, c.Now()})
			}
		case op < 8 && len(model) > 0:
			j := rng.IntN(len(model))
			r := model[j]
			if err := m.Release(t.Context(), store.BudgetRequest{Key: key, ExecutionID: r.exe, Amount: r.amount}); err != nil {
				t.Fatal(err)
			}
			model = slices.Delete(model, j, j+1)
		default:
			c.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		u, err := m.Read(t.Context(), key, window)
		if err != nil || u.Spent != spent() {
			t.Fatalf("step %d: Read %+v (%v), want %d spent", i, u, err, spent())
		}
		if held, ring := budgetstore.Held(m, key); held > 2*ring+17 {
			t.Fatalf("step %d: %d executions indexed for %d reservations: the index keeps what aged out", i, held, ring)
		}
	}
}
