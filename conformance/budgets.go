package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// BudgetStoreUnderTest is one fresh, empty budget store for
// [RunBudgetStore], with a way to move its clock.
type BudgetStoreUnderTest struct {
	Store store.BudgetStore
	// Advance moves the clock the store stamps and ages reservations
	// with forward by d. Required, like Store: the suite refuses a store
	// under test without it.
	Advance func(d time.Duration)
}

// RunBudgetStore checks the [store.BudgetStore] contract: one named
// subtest per rule, each on a fresh store from open. A failure message
// names the rule it checks. The window rules move the clock by exactly
// the window and one microsecond less, so a store must keep time to the
// microsecond at least.
func RunBudgetStore(t *testing.T, open func(t *testing.T) BudgetStoreUnderTest) {
	t.Helper()
	for _, r := range budgetRules {
		t.Run(r.name, func(t *testing.T) {
			s := open(t)
			switch {
			case s.Store == nil:
				t.Fatal("conformance: RunBudgetStore's open returned no Store: every rule needs a fresh store")
			case s.Advance == nil:
				t.Fatal("conformance: RunBudgetStore's open returned no Advance: the window rules move the store's clock")
			}
			r.check(&budgetCheck{T: t, s: s, ctx: t.Context()})
		})
	}
}

type budgetCheck struct {
	*testing.T
	s   BudgetStoreUnderTest
	ctx context.Context
	n   int
}

// The budget of most rules: 100 over an hour.
const (
	budgetLimit  = 100
	budgetWindow = time.Hour
)

// key returns a fresh budget key of the check.
func (c *budgetCheck) key() string {
	c.n++
	return fmt.Sprintf("%s%032x", store.BudgetKeyPrefix, c.n)
}

// req is a reservation of amount on key by execution, under the rules'
// budget.
func req(key, execution string, amount int64) store.BudgetRequest {
	return store.BudgetRequest{Key: key, ExecutionID: execution, Amount: amount, Limit: budgetLimit, Window: budgetWindow}
}

func (c *budgetCheck) reserve(r store.BudgetRequest) store.BudgetReservation {
	c.Helper()
	got, err := c.s.Store.Reserve(c.ctx, r)
	if err != nil {
		c.Fatalf("Reserve: %v", err)
	}
	return got
}

// reserved reserves and fails the rule unless the store did.
func (c *budgetCheck) reserved(rule string, r store.BudgetRequest, spent int64) {
	c.Helper()
	if got := c.reserve(r); !got.Reserved || got.Overdraft || got.Spent != spent {
		c.Errorf("%s: Reserve of %d by %s answered %+v, want reserved with %d spent", rule, r.Amount, r.ExecutionID, got, spent)
	}
}

// refused reserves and fails the rule if the store did.
func (c *budgetCheck) refused(rule string, r store.BudgetRequest, spent int64) store.BudgetReservation {
	c.Helper()
	got := c.reserve(r)
	if got.Reserved || got.Spent != spent {
		c.Errorf("%s: Reserve of %d by %s answered %+v, want refused with %d spent", rule, r.Amount, r.ExecutionID, got, spent)
	}
	return got
}

func (c *budgetCheck) read(key string, window time.Duration) store.BudgetUsage {
	c.Helper()
	u, err := c.s.Store.Read(c.ctx, key, window)
	if err != nil {
		c.Fatalf("Read: %v", err)
	}
	return u
}

// spent checks what Read finds on key within the rules' window.
func (c *budgetCheck) spent(rule, key string, spent int64, reservations int) {
	c.Helper()
	if u := c.read(key, budgetWindow); u.Spent != spent || u.Reservations != reservations {
		c.Errorf("%s: Read found %d spent in %d reservations, want %d in %d", rule, u.Spent, u.Reservations, spent, reservations)
	}
}

// release releases what execution reserved on key, as the engine does:
// with the request it reserved with.
func (c *budgetCheck) release(key, execution string, amount int64) {
	c.Helper()
	if err := c.s.Store.Release(c.ctx, req(key, execution, amount)); err != nil {
		c.Fatalf("Release: %v", err)
	}
}

var budgetRules = []struct {
	name  string
	check func(c *budgetCheck)
}{
	{"Reserve/reservations up to the limit are taken", func(c *budgetCheck) {
		const rule = "reservations whose sum stays within the limit are all taken, and each answer says what is spent with it"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 40), 40)
		c.reserved(rule, req(key, "exe_b", 60), 100)
		c.spent(rule, key, 100, 2)
	}},
	{"Reserve/a reservation past the limit is refused and changes nothing", func(c *budgetCheck) {
		const rule = "a reservation that would take the window past its limit is refused, and the key is left as it was"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 70), 70)
		c.refused(rule, req(key, "exe_b", 31), 70)
		c.spent(rule, key, 70, 1)
		c.reserved(rule, req(key, "exe_c", 30), 100) // what was refused took nothing
	}},
	{"Reserve/an amount over the limit never fits", func(c *budgetCheck) {
		const rule = "an amount over the limit is refused even on an empty key, with no RetryAfter: it never fits"
		got := c.refused(rule, req(c.key(), "exe_a", budgetLimit+1), 0)
		if got.RetryAfter != 0 {
			c.Errorf("%s: RetryAfter %s, want 0", rule, got.RetryAfter)
		}
	}},
	{"Reserve/a zero amount fits while the window is within its limit", func(c *budgetCheck) {
		const rule = "a reservation of 0 is taken on a key at its limit"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", budgetLimit), budgetLimit)
		c.reserved(rule, req(key, "exe_b", 0), budgetLimit)
	}},
	{"Reserve/is idempotent per execution id", func(c *budgetCheck) {
		const rule = "Reserve repeated by the same execution (a lost reply) answers reserved again and adds nothing"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 60), 60)
		for range 2 {
			c.reserved(rule, req(key, "exe_a", 60), 60)
		}
		c.spent(rule, key, 60, 1)
		c.refused(rule, req(key, "exe_b", 41), 60) // the repeats took nothing either
	}},
	{"Reserve/keys are independent", func(c *budgetCheck) {
		const rule = "what one budget key holds never counts against another"
		a, b := c.key(), c.key()
		c.reserved(rule, req(a, "exe_a", budgetLimit), budgetLimit)
		c.reserved(rule, req(b, "exe_a", budgetLimit), budgetLimit)
		c.spent(rule, b, budgetLimit, 1)
	}},
	{"Window/a reservation counts until its age is the window", func(c *budgetCheck) {
		const rule = "a reservation counts while its age is under the window, by the store's clock, and not from the window on"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 80), 80)
		c.s.Advance(budgetWindow - time.Microsecond)
		c.spent(rule+" (window − 1µs)", key, 80, 1)
		c.refused(rule+" (window − 1µs)", req(key, "exe_b", 21), 80)
		c.s.Advance(time.Microsecond)
		c.spent(rule+" (window)", key, 0, 0)
		c.reserved(rule+" (window)", req(key, "exe_b", budgetLimit), budgetLimit)
	}},
	{"Window/the window rolls one reservation at a time", func(c *budgetCheck) {
		const rule = "the window rolls: the oldest reservation stops counting first, the younger ones still count"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 50), 50)
		c.s.Advance(budgetWindow / 2)
		c.reserved(rule, req(key, "exe_b", 50), 100)
		c.s.Advance(budgetWindow / 2)
		c.spent(rule, key, 50, 1)
		c.reserved(rule, req(key, "exe_c", 50), 100)
		c.refused(rule, req(key, "exe_d", 1), 100)
	}},
	{"Window/Read counts by the window it is given", func(c *budgetCheck) {
		const rule = "Read sums the reservations younger than the window it is asked about"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 30), 30)
		c.s.Advance(10 * time.Minute)
		c.reserved(rule, req(key, "exe_b", 20), 50)
		if u := c.read(key, 10*time.Minute); u.Spent != 20 || u.Reservations != 1 {
			c.Errorf("%s: Read over 10m: %+v, want 20 in 1 reservation", rule, u)
		}
		if u := c.read(c.key(), budgetWindow); u != (store.BudgetUsage{}) {
			c.Errorf("%s: Read of an unknown key: %+v, want nothing", rule, u)
		}
	}},
	{"RetryAfter/says when enough of the window frees", func(c *budgetCheck) {
		const rule = "a refusal's RetryAfter is when enough of the oldest reservations have aged out for the amount to fit"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 30), 30)
		c.s.Advance(10 * time.Minute)
		c.reserved(rule, req(key, "exe_b", 30), 60)
		c.s.Advance(10 * time.Minute)
		c.reserved(rule, req(key, "exe_c", 40), 100)
		// 50 needs exe_a and exe_b gone: exe_b ages out 50 minutes from now.
		got := c.refused(rule, req(key, "exe_d", 50), 100)
		if got.RetryAfter != budgetWindow-10*time.Minute {
			c.Errorf("%s: RetryAfter %s, want %s", rule, got.RetryAfter, budgetWindow-10*time.Minute)
		}
		c.s.Advance(got.RetryAfter)
		c.reserved(rule+" (after RetryAfter)", req(key, "exe_d", 50), 90)
	}},
	{"Release/gives back the execution's own reservation only", func(c *budgetCheck) {
		const rule = "Release removes the releasing execution's reservation, never another's, and frees its amount at once"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 60), 60)
		c.reserved(rule, req(key, "exe_b", 40), 100)
		c.release(key, "exe_z", 60) // holds nothing
		c.release(c.key(), "exe_a", 60)
		c.spent(rule+" (a release of what is not held)", key, 100, 2)
		c.release(key, "exe_a", 60)
		c.spent(rule, key, 40, 1)
		c.release(key, "exe_a", 60) // repeated: a no-op
		c.spent(rule+" (repeated)", key, 40, 1)
		c.reserved(rule, req(key, "exe_c", 60), 100)
	}},
	{"Release/a released execution may reserve again", func(c *budgetCheck) {
		const rule = "after its Release, an execution holds nothing: its next Reserve is a new reservation"
		key := c.key()
		c.reserved(rule, req(key, "exe_a", 60), 60)
		c.release(key, "exe_a", 60)
		c.reserved(rule, req(key, "exe_a", 70), 70)
		c.spent(rule, key, 70, 1)
	}},
	{"Overdraft/an approved overdraft is taken and recorded", func(c *budgetCheck) {
		const rule = "a reservation with Overdraft is taken past the limit and recorded as an overdraft; one that fits is not one"
		key := c.key()
		fits := req(key, "exe_a", 90)
		fits.Overdraft = true
		c.reserved(rule, fits, 90)
		over := req(key, "exe_b", 30)
		over.Overdraft = true
		if got := c.reserve(over); !got.Reserved || !got.Overdraft || got.Spent != 120 {
			c.Errorf("%s: Reserve past the limit with Overdraft answered %+v, want an overdraft with 120 spent", rule, got)
		}
		if got := c.reserve(over); !got.Reserved || !got.Overdraft || got.Spent != 120 {
			c.Errorf("%s: the overdraft repeated answered %+v, want it as the first", rule, got)
		}
		if u := c.read(key, budgetWindow); u.Spent != 120 || u.Reservations != 2 || u.Overdrafts != 1 || u.Overdrawn != 30 {
			c.Errorf("%s: Read found %+v, want 120 spent, 2 reservations, 1 overdraft of 30", rule, u)
		}
		c.refused(rule+" (a window past its limit takes nothing more)", req(key, "exe_c", 0), 120)
		c.release(key, "exe_b", 30)
		if u := c.read(key, budgetWindow); u.Spent != 90 || u.Overdrafts != 0 {
			c.Errorf("%s: an overdraft released: Read found %+v, want 90 spent and no overdraft", rule, u)
		}
		c.s.Advance(budgetWindow)
		if u := c.read(key, budgetWindow); u != (store.BudgetUsage{}) {
			c.Errorf("%s: an overdraft ages out like any reservation: %+v", rule, u)
		}
	}},
	{"Reserve/concurrent reservations never pass the limit", func(c *budgetCheck) {
		const rule = "any number of concurrent reservations on one key: what is taken never passes the limit, and none that fit is refused"
		key := c.key()
		var wg sync.WaitGroup
		var mu sync.Mutex
		taken := int64(0)
		for i := range 40 {
			wg.Go(func() {
				got, err := c.s.Store.Reserve(c.ctx, req(key, fmt.Sprintf("exe_%d", i), 5))
				if err != nil {
					c.Errorf("Reserve: %v", err)
					return
				}
				if got.Reserved {
					mu.Lock()
					taken += 5
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if taken != budgetLimit {
			c.Errorf("%s: %d taken by 40 reservations of 5 against %d", rule, taken, budgetLimit)
		}
		c.spent(rule, key, budgetLimit, budgetLimit/5)
	}},
	{"Reserve/malformed requests are refused", func(c *budgetCheck) {
		const rule = "a request no store may act on (malformed key, no execution, negative amount, no limit or window) is an error"
		key := c.key()
		for name, r := range map[string]store.BudgetRequest{
			"key":       req("bgt_{x}", "exe_a", 1),
			"execution": req(key, "", 1),
			"amount":    req(key, "exe_a", -1),
			"limit":     {Key: key, ExecutionID: "exe_a", Amount: 1, Window: budgetWindow},
			"window":    {Key: key, ExecutionID: "exe_a", Amount: 1, Limit: budgetLimit},
		} {
			if _, err := c.s.Store.Reserve(c.ctx, r); err == nil {
				c.Errorf("%s: a request with a bad %s was taken", rule, name)
			} else if !errors.Is(err, store.ErrBudgetRequest) {
				c.Errorf("%s: a request with a bad %s: %v, want store.ErrBudgetRequest", rule, name, err)
			}
		}
		c.spent(rule, key, 0, 0)
	}},
}
