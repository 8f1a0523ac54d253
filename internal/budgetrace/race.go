// Package budgetrace races engines that share a budget store, for the
// exactness tests of the stores (budgetstore, agentsafepg): many engines,
// each an instance with its own store client, many callers each, every
// call a refund of a random amount against one budget key. It reports
// what ran and what each call got; the tests hold the result to the
// guarantee: in no window do the reservations exceed the limit, and no
// reservation that would have fit is refused.
package budgetrace

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Procedure is the raced capability: a net/http route whose JSON body
// carries the amount at /amount.
const Procedure = "refund"

// Budget is the raced budget: everyone spends together, for an hour, so
// nothing ages out during a run.
func Budget(limit int64) middleware.Budget {
	return middleware.Budget{Name: "refunds", Limit: limit, Window: time.Hour, Per: "audience", Amount: "/amount"}
}

// Race is one run.
type Race struct {
	// Stores holds one store per engine: each engine is an instance.
	Stores []store.BudgetStore
	// Callers per engine, and Calls per caller.
	Callers, Calls int
	Limit          int64
	// Options are added to every engine's.
	Options []middleware.Option
	// OnRun, when set, is called by the handler of every run with the
	// number of runs so far (this one included).
	OnRun func(n int64)
	// OnCall, when set, is called with the code of every call as it ends.
	OnCall func(middleware.Code)
}

// Result is what a run did.
type Result struct {
	// Ran maps each execution whose handler ran to its amount; Spent is
	// their sum.
	Ran   map[string]int64
	Spent int64
	// Codes counts the calls by their outcome.
	Codes map[middleware.Code]int
	// Over counts the moments a concurrent reader saw the window past the
	// limit.
	Over int
	// Engine is one of the engines, to read the budget with.
	Engine *middleware.Engine
}

// Run races r and returns what it did. Every call has its own execution:
// its amount is 1 to 5, drawn from a fixed seed.
func Run(t testing.TB, r Race) Result {
	t.Helper()
	engines := make([]*middleware.Engine, len(r.Stores))
	for i, s := range r.Stores {
		reg := middleware.NewRegistry().Register(Procedure, middleware.Capability{SideEffect: middleware.SideEffectWrite, Budgets: []middleware.Budget{Budget(r.Limit)}})
		eng, err := middleware.New(reg, append([]middleware.Option{middleware.WithBudgetStore(s), middleware.WithProtoFiles(nil),
			middleware.WithLogger(slog.New(slog.DiscardHandler))}, r.Options...)...)
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = eng
	}
	var (
		mu    sync.Mutex
		res   = Result{Ran: map[string]int64{}, Codes: map[middleware.Code]int{}, Engine: engines[0]}
		runs  atomic.Int64
		wg    sync.WaitGroup
		done  = make(chan struct{})
		watch sync.WaitGroup
	)
	// A reader watches the window while the race runs.
	watch.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			left, err := engines[0].Budget(context.Background(), "refunds", middleware.Actor{})
			if err == nil && left < 0 {
				mu.Lock()
				res.Over++
				mu.Unlock()
			}
			time.Sleep(time.Millisecond) // a sample, not a wait for anything
		}
	})
	for e, eng := range engines {
		for c := range r.Callers {
			rng := rand.New(rand.NewPCG(uint64(e), uint64(c)))
			wg.Go(func() {
				for range r.Calls {
					amount := rng.Int64N(5) + 1
					in := adapter.JSONInput(fmt.Appendf(nil, `{"amount":%d}`, amount))
					_, _, err := adapter.Execute(context.Background(), adapter.Resolve(eng, Procedure), adapter.Call[any]{Input: in, Surface: adapter.SurfaceHTTP},
						func(ctx context.Context) (any, error) {
							x, _ := middleware.ExecutionFromContext(ctx)
							mu.Lock()
							res.Ran[x.ID] = amount
							res.Spent += amount
							mu.Unlock()
							if r.OnRun != nil {
								r.OnRun(runs.Add(1))
							}
							return "refunded", nil
						})
					mu.Lock()
					res.Codes[middleware.CodeOf(err)]++
					mu.Unlock()
					if r.OnCall != nil {
						r.OnCall(middleware.CodeOf(err))
					}
				}
			})
		}
	}
	wg.Wait()
	close(done)
	watch.Wait()
	return res
}

// Check holds a run to the guarantee: what ran never passed the limit,
// nobody saw the window past it, enough demand filled it to within the
// largest amount, and the store holds exactly the reservations of what
// ran (none twice, none of an execution that did not run) — unless
// leftovers is set, for runs where a store that went away may keep the
// reservation of a call whose reply it could not send (then every run's
// reservation must still be there, nothing past the limit, and it is what
// the store holds that demand fills to within the largest amount).
func Check(t testing.TB, r Race, res Result, leftovers bool) {
	t.Helper()
	if res.Spent > r.Limit || res.Over > 0 {
		t.Errorf("runs spent %d against a limit of %d; a reader saw the window past the limit %d times", res.Spent, r.Limit, res.Over)
	}
	if res.Codes[middleware.CodeBudgetExceeded] == 0 {
		t.Errorf("no call was refused: the demand (%v) did not reach the limit, the test proved nothing", res.Codes)
	}
	// Executions that did not run give their reservations back, some in
	// the background: wait for the store to settle.
	held := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		left, err := res.Engine.Budget(context.Background(), "refunds", middleware.Actor{})
		h := r.Limit - left
		if err == nil && (h == res.Spent || leftovers && h >= res.Spent && h <= r.Limit) {
			held = h
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the store holds %d (%v) for runs that spent %d: a reservation taken twice, lost, or left behind by an execution that did not run", h, err, res.Spent)
			return
		}
	}
	if held < r.Limit-4 {
		t.Errorf("runs spent %d of %d (the store holds %d) although every caller wanted more: a reservation that fit was refused (outcomes %v)", res.Spent, r.Limit, held, res.Codes)
	}
}

// StoreClock checks that a budget's window is judged by the store's clock
// alone: two engines whose own clocks are an hour ahead and an hour behind
// share a budget of 2 calls an hour through stores[0] and stores[1]
// (instances of one store); advance moves the store's clock. A reservation
// counts until the window has passed on the store's clock, and at the
// window plus a little it no longer does, whatever the instances' clocks
// say.
func StoreClock(t testing.TB, stores [2]store.BudgetStore, advance func(time.Duration)) {
	t.Helper()
	const window = time.Hour
	budget := middleware.Budget{Name: "calls", Limit: 2, Window: window, Per: "audience"}
	var engines []*middleware.Engine
	for i, skew := range []time.Duration{time.Hour, -time.Hour} {
		eng, err := middleware.New(middleware.NewRegistry().Register("send", middleware.Capability{SideEffect: middleware.SideEffectWrite, Budgets: []middleware.Budget{budget}}),
			middleware.WithBudgetStore(stores[i]), middleware.WithClock(func() time.Time { return time.Now().Add(skew) }),
			middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, eng)
	}
	call := func(eng *middleware.Engine) middleware.Envelope {
		_, env, _ := adapter.Execute(context.Background(), adapter.Resolve(eng, "send"), adapter.Call[any]{Surface: adapter.SurfaceHTTP},
			func(context.Context) (any, error) { return "sent", nil })
		return env
	}
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Fatalf("a call within the limit: %+v", env.Error)
		}
	}
	if env := call(engines[1]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter <= window-time.Minute || env.RetryAfter > window {
		t.Fatalf("a third call: %+v (RetryAfter %s), want BUDGET_EXCEEDED, to retry in just under an hour by the store's clock", env.Error, env.RetryAfter)
	}
	advance(window - time.Minute)
	if env := call(engines[0]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded {
		t.Fatalf("a minute before the window passed on the store's clock: %+v, want BUDGET_EXCEEDED", env.Error)
	}
	advance(time.Minute + 10*time.Millisecond)
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Errorf("the window passed on the store's clock, yet %+v", env.Error)
		}
	}
}
