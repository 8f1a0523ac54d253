package approvalstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// Memory keeps approvals in one process: the embedded default. A process
// that restarts loses its approvals (pending ones must be requested again;
// approved ones can no longer be consumed, which fails closed), and two
// processes never see each other's: use [Redis] for more than one instance.
type Memory struct {
	cfg config

	mu        sync.Mutex
	records   map[string]*store.ApprovalRecord
	lastSweep time.Time
}

var _ store.ApprovalStore = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...MemoryOption) *Memory {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyMemory(&cfg)
		}
	}
	return &Memory{cfg: cfg, records: make(map[string]*store.ApprovalRecord)}
}

// Create implements [store.ApprovalStore].
func (m *Memory) Create(_ context.Context, req store.ApprovalRequest) (store.ApprovalRecord, error) {
	if err := checkRequest(req); err != nil {
		return store.ApprovalRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	m.sweep(now)
	pending := 0
	for _, r := range m.records {
		// The cap counts the requester's records by audience, tenant and
		// id: every session of one agent together.
		q := r.Requester
		if status(r, now) != store.ApprovalPending || r.Audience != req.Audience || q.ID != req.Requester.ID || q.Tenant != req.Requester.Tenant {
			continue
		}
		if store.SameActor(q, req.Requester) && r.Procedure == req.Procedure && r.Digest == req.Digest && r.PreviewDigest == req.PreviewDigest {
			return clone(r, now), nil // the same call asked again: the same approval
		}
		pending++
	}
	if pending >= m.cfg.maxPending {
		return store.ApprovalRecord{}, fmt.Errorf("%w: %d pending", store.ErrTooManyPending, pending)
	}
	if _, taken := m.records[req.ID]; taken {
		return store.ApprovalRecord{}, fmt.Errorf("approvalstore: id %s already exists", req.ID)
	}
	r := &store.ApprovalRecord{ApprovalRequest: req, Status: store.ApprovalPending, RequestedAt: now, ExpiresAt: now.Add(req.ExpiresIn)}
	r.Reasons = slices.Clone(req.Reasons)
	r.Requester.OnBehalfOf = slices.Clone(req.Requester.OnBehalfOf)
	r.Payload = slices.Clone(req.Payload)
	m.records[req.ID] = r
	return clone(r, now), nil
}

// Get implements [store.ApprovalStore].
func (m *Memory) Get(_ context.Context, id string) (store.ApprovalRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	return clone(r, m.cfg.now()), nil
}

// Decide implements [store.ApprovalStore]. The approver rule and
// policy run outside the lock (the policy is application code, which may
// be slow or use the store); every other check runs again under the lock
// on the record as it is then, which may be gone.
func (m *Memory) Decide(ctx context.Context, id string, d store.Decision) (store.ApprovalRecord, bool, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return store.ApprovalRecord{}, false, err
	}
	if rec.Audience != d.Audience {
		return store.ApprovalRecord{}, false, store.ErrApprovalNotFound
	}
	// The requester and approval type never change, so these hold for
	// the record under the lock too.
	if err := m.cfg.checkApprover(ctx, rec, d.Approver); err != nil {
		return store.ApprovalRecord{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id] // a Create may have swept it meanwhile
	now := m.cfg.now()
	if !ok {
		return store.ApprovalRecord{}, false, store.ErrApprovalNotFound
	}
	switch err := store.CheckVote(r, status(r, now), d, m.cfg.allowSelf); err {
	case nil:
	case store.ErrRepeatedVote:
		return clone(r, now), false, nil
	default:
		return store.ApprovalRecord{}, false, err
	}
	addVote(r, d, now)
	return clone(r, now), true, nil
}

// Consume implements [store.ApprovalStore]. The checks and the write
// happen under one lock: one atomic step.
func (m *Memory) Consume(_ context.Context, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	now := m.cfg.now()
	if !ok {
		return store.ConsumedApproval{}, store.ErrApprovalNotFound
	}
	if err := store.CheckConsume(r, status(r, now), req); err != nil {
		if err == store.ErrConsumedByCaller {
			return consumedApproval(r), nil
		}
		return store.ConsumedApproval{}, err
	}
	r.Status, r.ConsumedBy, r.ConsumedAt, r.LeaseUntil = store.ApprovalConsumed, req.ExecutionID, now, now.Add(req.Lease)
	return consumedApproval(r), nil
}

// Release implements [store.ApprovalStore].
func (m *Memory) Release(_ context.Context, id, executionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok || r.Status != store.ApprovalConsumed || r.ConsumedBy != executionID {
		return nil
	}
	r.Status, r.ConsumedBy, r.ConsumedAt, r.LeaseUntil = store.ApprovalApproved, "", time.Time{}, time.Time{}
	return nil
}

// RecordOutcome implements [store.ApprovalStore].
func (m *Memory) RecordOutcome(_ context.Context, id, executionID string, o store.Outcome) error {
	if err := store.CheckOutcome(o); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok || r.ConsumedBy == "" || r.ConsumedBy != executionID {
		return store.ErrApprovalNotFound
	}
	if !takesOutcome(r.Status, o) {
		return nil // it has its result already
	}
	o.At = m.cfg.now()
	r.Status, r.Outcome = o.Status, o
	return nil
}

// List implements [store.ApprovalStore].
func (m *Memory) List(_ context.Context, f store.ApprovalFilter) ([]store.ApprovalRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	var out []store.ApprovalRecord
	for _, r := range m.records {
		if matches(r, f, now) {
			v := *r
			v.Payload = nil // List never returns it
			out = append(out, clone(&v, now))
		}
	}
	return oldest(out, listLimit(f)), nil
}

// sweep forgets records past their retention, at most once a minute.
func (m *Memory) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < time.Minute {
		return
	}
	m.lastSweep = now
	for id, r := range m.records {
		if now.After(retainUntil(r, m.cfg.retention)) {
			delete(m.records, id)
		}
	}
}

// clone returns a copy of r that shares nothing with the store, with its
// status as of now.
func clone(r *store.ApprovalRecord, now time.Time) store.ApprovalRecord {
	c := *r
	c.Reasons = slices.Clone(r.Reasons)
	c.Payload = slices.Clone(r.Payload)
	c.Requester.OnBehalfOf = slices.Clone(r.Requester.OnBehalfOf)
	c.Approver.OnBehalfOf = slices.Clone(r.Approver.OnBehalfOf)
	c.Votes = slices.Clone(r.Votes)
	for i := range c.Votes {
		c.Votes[i].Approver.OnBehalfOf = slices.Clone(r.Votes[i].Approver.OnBehalfOf)
	}
	c.Status = status(r, now)
	return c
}

// ProcessLocal reports that the memory store keeps approvals in this
// process only; the engine warns about it at start-up when a capability
// needs an approval.
func (*Memory) ProcessLocal() bool { return true }
