package resultstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// Memory keeps results in one process: for one instance, and for tests. A
// process that restarts forgets them (a repeat then runs again), and two
// processes never see each other's: use [Redis] for more than one
// instance. An owner's quota is counted under the store's lock, over its
// own records.
type Memory struct {
	cfg config

	mu sync.Mutex
	// records holds each owner's records by key.
	records   map[string]map[string]*store.ResultRecord
	lastSweep time.Time
}

var _ store.ResultStore = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...MemoryOption) *Memory {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyMemory(&cfg)
		}
	}
	return &Memory{cfg: cfg, records: make(map[string]map[string]*store.ResultRecord)}
}

// record returns the record of k, or nil.
func (m *Memory) record(k store.ResultKey) *store.ResultRecord { return m.records[k.Owner][k.Key] }

// put stores r under its key.
func (m *Memory) put(r *store.ResultRecord) {
	own := m.records[r.Owner]
	if own == nil {
		own = make(map[string]*store.ResultRecord)
		m.records[r.Owner] = own
	}
	own[r.Key] = r
}

// remove forgets the record of k.
func (m *Memory) remove(k store.ResultKey) {
	delete(m.records[k.Owner], k.Key)
	if len(m.records[k.Owner]) == 0 {
		delete(m.records, k.Owner)
	}
}

// usage counts what owner keeps as of now: its live records, and the
// sizes of its live done ones.
func (m *Memory) usage(owner string, now time.Time) (records int, bytes int64) {
	for _, r := range m.records[owner] {
		if v, ok := view(r, now); ok {
			records++
			if v.State == store.ResultDone {
				bytes += v.Result.Size()
			}
		}
	}
	return records, bytes
}

// Claim implements [store.ResultStore]: the checks and the write happen
// under one lock.
func (m *Memory) Claim(_ context.Context, req store.ClaimRequest) (store.Claim, error) {
	if !req.ResultKey.Valid() {
		return store.Claim{}, malformed(req.ResultKey)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	m.sweep(now)
	r := m.record(req.ResultKey)
	var v store.ResultRecord
	ok := r != nil
	if ok {
		v, ok = view(r, now)
	}
	if !ok {
		if req.Quota.Exceeded(m.usage(req.Owner, now)) {
			return store.Claim{Status: store.ClaimQuotaExceeded}, nil
		}
		m.put(claimed(req, now))
		return store.Claim{Status: store.ClaimAcquired}, nil
	}
	if v.Digest != req.Digest {
		return store.Claim{Status: store.ClaimKeyReused}, nil
	}
	switch v.State {
	case store.ResultDone:
		return store.Claim{Status: store.ClaimDone, ExecutionID: v.ExecutionID, Result: cloneResult(v.Result)}, nil
	case store.ResultInDoubt:
		if !req.Reconcile {
			return store.Claim{Status: store.ClaimInDoubt, ExecutionID: v.ExecutionID}, nil
		}
		c := claimed(req, now)
		c.ReconcileOf = v.ExecutionID
		m.put(c)
		return store.Claim{Status: store.ClaimReconcile, ExecutionID: v.ExecutionID}, nil
	}
	switch {
	case v.ExecutionID != req.ExecutionID:
		return store.Claim{Status: store.ClaimInFlight, ExecutionID: v.ExecutionID}, nil
	case v.ReconcileOf != "":
		return store.Claim{Status: store.ClaimReconcile, ExecutionID: v.ReconcileOf}, nil
	}
	return store.Claim{Status: store.ClaimAcquired}, nil
}

// held returns the record of key held by executionID, as of now.
func (m *Memory) held(key store.ResultKey, executionID string, now time.Time) (*store.ResultRecord, store.ResultRecord, bool) {
	r := m.record(key)
	if r == nil {
		return nil, store.ResultRecord{}, false
	}
	v, ok := view(r, now)
	if !ok || v.ExecutionID != executionID {
		return nil, store.ResultRecord{}, false
	}
	return r, v, true
}

// Complete implements [store.ResultStore].
func (m *Memory) Complete(_ context.Context, key store.ResultKey, executionID string, res store.Result) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	r, v, ok := m.held(key, executionID, now)
	switch {
	case !ok:
		return store.ErrNotHeld
	case v.State == store.ResultDone:
		return nil
	}
	settle(r, store.ResultDone, now)
	r.Result = cloneResult(res)
	return nil
}

// Release implements [store.ResultStore].
func (m *Memory) Release(_ context.Context, key store.ResultKey, executionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, v, ok := m.held(key, executionID, m.cfg.now()); ok && v.State != store.ResultDone {
		m.remove(key)
	}
	return nil
}

// MarkInDoubt implements [store.ResultStore].
func (m *Memory) MarkInDoubt(_ context.Context, key store.ResultKey, executionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	r, _, ok := m.held(key, executionID, now)
	switch {
	case !ok:
		return store.ErrNotHeld
	case r.State == store.ResultInFlight: // its lease over or not
		if r.ReconcileOf != "" { // a reconciler that could not tell: in doubt about the one it reconciled
			r.ExecutionID = r.ReconcileOf
		}
		settle(r, store.ResultInDoubt, now)
	}
	return nil
}

// Get implements [store.ResultStore].
func (m *Memory) Get(_ context.Context, key store.ResultKey) (store.ResultRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.record(key)
	if r == nil {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	v, ok := view(r, m.cfg.now())
	if !ok {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	v.Result = cloneResult(v.Result)
	return v, nil
}

// sweep forgets records that are gone, at most once a minute.
func (m *Memory) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < time.Minute {
		return
	}
	m.lastSweep = now
	for owner, own := range m.records {
		for k, r := range own {
			if _, ok := view(r, now); !ok {
				delete(own, k)
			}
		}
		if len(own) == 0 {
			delete(m.records, owner)
		}
	}
}

func cloneResult(r store.Result) store.Result {
	r.Envelope, r.Sealed = slices.Clone(r.Envelope), slices.Clone(r.Sealed)
	return r
}

// ProcessLocal reports that the memory store keeps results in this
// process only; the engine warns about it at start-up.
func (*Memory) ProcessLocal() bool { return true }
