package budgetstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// Memory keeps budgets in one process: for one instance, and for tests.
// Every instance has budgets of its own, so N instances allow N times
// each limit, and a restart forgets what was spent; the engine warns
// about it at start-up. Use [Redis], or agentsafepg, for more than one
// instance.
type Memory struct {
	cfg config

	mu        sync.Mutex
	keys      map[string]*ledger
	lastSweep time.Time
}

var _ store.BudgetStore = (*Memory)(nil)

// ledger is one budget key's reservations, oldest first, and their sum.
type ledger struct {
	res   []reservation
	total int64
	// end is when the newest reservation stops counting: the key is
	// garbage from then on.
	end time.Time
}

type reservation struct {
	execution string
	amount    int64
	at        time.Time
	overdraft bool
}

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...MemoryOption) *Memory {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyMemory(&cfg)
		}
	}
	return &Memory{cfg: cfg, keys: make(map[string]*ledger)}
}

// trim drops the reservations that stopped counting at now, by window.
func (l *ledger) trim(now time.Time, window time.Duration) {
	n := 0
	for n < len(l.res) && !now.Before(l.res[n].at.Add(window)) {
		l.total -= l.res[n].amount
		n++
	}
	if n > 0 {
		clear(l.res[:n])
		l.res = l.res[n:]
	}
}

// find returns the index of execution's reservation, or -1.
func (l *ledger) find(execution string) int {
	for i := len(l.res) - 1; i >= 0; i-- { // a repeat comes soon after its first
		if l.res[i].execution == execution {
			return i
		}
	}
	return -1
}

// Reserve implements [store.BudgetStore]: the checks and the write happen
// under one lock.
func (m *Memory) Reserve(_ context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	if err := store.CheckBudgetRequest(req); err != nil {
		return store.BudgetReservation{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	m.sweep(now)
	l := m.keys[req.Key]
	if l == nil {
		l = &ledger{}
		m.keys[req.Key] = l
	}
	l.trim(now, req.Window)
	if i := l.find(req.ExecutionID); i >= 0 {
		return store.BudgetReservation{Reserved: true, Overdraft: l.res[i].overdraft, Spent: l.total}, nil
	}
	over := l.total+req.Amount > req.Limit
	if over && !req.Overdraft {
		ends := make([]time.Time, len(l.res))
		amounts := make([]int64, len(l.res))
		for i, r := range l.res {
			ends[i], amounts[i] = r.at.Add(req.Window), r.amount
		}
		return store.BudgetReservation{Spent: l.total,
			RetryAfter: store.BudgetRetryAfter(now, ends, amounts, l.total, req.Amount, req.Limit)}, nil
	}
	l.res = append(l.res, reservation{execution: req.ExecutionID, amount: req.Amount, at: now, overdraft: over})
	l.total += req.Amount
	l.end = now.Add(req.Window)
	return store.BudgetReservation{Reserved: true, Overdraft: over, Spent: l.total}, nil
}

// Release implements [store.BudgetStore].
func (m *Memory) Release(_ context.Context, key, executionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.keys[key]
	if l == nil {
		return nil
	}
	if i := l.find(executionID); i >= 0 {
		l.total -= l.res[i].amount
		l.res = slices.Delete(l.res, i, i+1)
	}
	return nil
}

// Read implements [store.BudgetStore].
func (m *Memory) Read(_ context.Context, key string, window time.Duration) (store.BudgetUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	var u store.BudgetUsage
	l := m.keys[key]
	if l == nil {
		return u, nil
	}
	for _, r := range l.res {
		if !now.Before(r.at.Add(window)) {
			continue
		}
		u.Spent += r.amount
		u.Reservations++
		if r.overdraft {
			u.Overdrafts++
			u.Overdrawn += r.amount
		}
	}
	return u, nil
}

// sweep forgets keys whose every reservation stopped counting, at most
// once a minute.
func (m *Memory) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < time.Minute {
		return
	}
	m.lastSweep = now
	for k, l := range m.keys {
		if !now.Before(l.end) {
			delete(m.keys, k)
		}
	}
}

// ProcessLocal reports that the memory store keeps budgets in this
// process only; the engine warns about it at start-up.
func (*Memory) ProcessLocal() bool { return true }
