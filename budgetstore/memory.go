package budgetstore

import (
	"context"
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
	// lastKey and last are the key reserved on last, and its ledger: a
	// run of calls spends on one key.
	lastKey string
	last    *ledger
}

var _ store.BudgetStore = (*Memory)(nil)

// ledger is one budget key's reservations, oldest first, in a ring, and
// their sum. A released reservation stays in the ring, marked, until it
// ages out; held finds the live ones by execution, by their sequence
// number (the oldest's is base): no pointer per reservation for the
// collector, and no allocation per reservation once the ring is as large
// as a window's worth.
type ledger struct {
	ring  []reservation // its length a power of two
	head  int           // where the oldest is
	n     int           // how many the ring holds
	base  int64
	held  map[string]int64
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
	released  bool
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

// at returns the ith reservation from the oldest.
func (l *ledger) at(i int) *reservation { return &l.ring[(l.head+i)&(len(l.ring)-1)] }

// push adds r as the newest, doubling the ring when it is full.
func (l *ledger) push(r reservation) {
	if l.n == len(l.ring) {
		grown := make([]reservation, max(8, 2*len(l.ring)))
		for i := range l.n {
			grown[i] = *l.at(i)
		}
		l.ring, l.head = grown, 0
	}
	*l.at(l.n) = r
	l.n++
}

// trim drops the reservations that stopped counting at now, by window:
// those at or before now - window. A dropped slot is not cleared: the next
// push overwrites it.
func (l *ledger) trim(now time.Time, window time.Duration) {
	edge := now.Add(-window)
	for l.n > 0 {
		r := l.at(0)
		if r.at.After(edge) {
			return
		}
		if !r.released {
			l.total -= r.amount
			delete(l.held, r.execution)
		}
		l.head = (l.head + 1) & (len(l.ring) - 1)
		l.n--
		l.base++
	}
}

// find returns execution's live reservation, or nil.
func (l *ledger) find(execution string) *reservation {
	seq, ok := l.held[execution]
	if !ok {
		return nil
	}
	return l.at(int(seq - l.base))
}

// live iterates the reservations not released, oldest first.
func (l *ledger) live(yield func(*reservation) bool) {
	for i := range l.n {
		if r := l.at(i); !r.released && !yield(r) {
			return
		}
	}
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
	l := m.last
	if l == nil || m.lastKey != req.Key {
		if l = m.keys[req.Key]; l == nil {
			l = &ledger{held: make(map[string]int64)}
			m.keys[req.Key] = l
		}
		m.lastKey, m.last = req.Key, l
	}
	l.trim(now, req.Window)
	if r := l.find(req.ExecutionID); r != nil {
		return store.BudgetReservation{Reserved: true, Overdraft: r.overdraft, Spent: l.total}, nil
	}
	over := l.total+req.Amount > req.Limit
	if over && !req.Overdraft {
		var ends []time.Time
		var amounts []int64
		for r := range l.live {
			ends, amounts = append(ends, r.at.Add(req.Window)), append(amounts, r.amount)
		}
		return store.BudgetReservation{Spent: l.total,
			RetryAfter: store.BudgetRetryAfter(now, ends, amounts, l.total, req.Amount, req.Limit)}, nil
	}
	l.held[req.ExecutionID] = l.base + int64(l.n)
	l.push(reservation{execution: req.ExecutionID, amount: req.Amount, at: now, overdraft: over})
	l.total += req.Amount
	l.end = now.Add(req.Window)
	return store.BudgetReservation{Reserved: true, Overdraft: over, Spent: l.total}, nil
}

// Release implements [store.BudgetStore].
func (m *Memory) Release(_ context.Context, req store.BudgetRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.keys[req.Key]
	if l == nil {
		return nil
	}
	if r := l.find(req.ExecutionID); r != nil {
		r.released = true
		l.total -= r.amount
		delete(l.held, req.ExecutionID)
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
	for r := range l.live {
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
	m.lastKey, m.last = "", nil // it may be gone
}

// ProcessLocal reports that the memory store keeps budgets in this
// process only; the engine warns about it at start-up.
func (*Memory) ProcessLocal() bool { return true }
