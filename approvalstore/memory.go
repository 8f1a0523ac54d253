package approvalstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// Memory keeps approvals in one process: the embedded default. A process
// that restarts loses its approvals (pending ones must be requested again;
// approved ones can no longer be consumed, which fails closed), and two
// processes never see each other's: use [Redis] for more than one instance.
type Memory struct {
	cfg config

	mu        sync.Mutex
	records   map[string]*middleware.ApprovalRecord
	lastSweep time.Time
}

var _ middleware.ApprovalStore = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...Option) *Memory {
	cfg := newConfig(opts)
	return &Memory{cfg: cfg, records: make(map[string]*middleware.ApprovalRecord)}
}

// Create implements [middleware.ApprovalStore].
func (m *Memory) Create(_ context.Context, req middleware.ApprovalRequest) (middleware.ApprovalRecord, error) {
	if err := checkRequest(req); err != nil {
		return middleware.ApprovalRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	m.sweep(now)
	pending := 0
	for _, r := range m.records {
		if status(r, now) != middleware.ApprovalPending || r.Audience != req.Audience || !sameActor(r.Requester, req.Requester) {
			continue
		}
		if r.Procedure == req.Procedure && r.Digest == req.Digest {
			return clone(r, now), nil // the same call asked again: the same approval
		}
		pending++
	}
	if pending >= m.cfg.maxPending {
		return middleware.ApprovalRecord{}, fmt.Errorf("%w: %d pending", middleware.ErrTooManyPending, pending)
	}
	if _, taken := m.records[req.ID]; taken {
		return middleware.ApprovalRecord{}, fmt.Errorf("approvalstore: id %s already exists", req.ID)
	}
	r := &middleware.ApprovalRecord{ApprovalRequest: req, Status: middleware.ApprovalPending, RequestedAt: now, ExpiresAt: now.Add(req.ExpiresIn)}
	r.Reasons = slices.Clone(req.Reasons)
	r.Requester.OnBehalfOf = slices.Clone(req.Requester.OnBehalfOf)
	m.records[req.ID] = r
	return clone(r, now), nil
}

// Get implements [middleware.ApprovalStore].
func (m *Memory) Get(_ context.Context, id string) (middleware.ApprovalRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok {
		return middleware.ApprovalRecord{}, middleware.ErrApprovalNotFound
	}
	return clone(r, m.cfg.now()), nil
}

// Decide implements [middleware.ApprovalStore].
func (m *Memory) Decide(ctx context.Context, id string, d middleware.Decision) (middleware.ApprovalRecord, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return rec, err
	}
	// The requester and approval type never change, so the approver checks
	// can run outside the lock (the policy is application code).
	if err := m.cfg.checkApprover(ctx, rec, d.Approver); err != nil {
		return middleware.ApprovalRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[id]
	now := m.cfg.now()
	switch s := status(r, now); {
	case s == middleware.ApprovalPending:
		r.Status = middleware.ApprovalRejected
		if d.Approve {
			r.Status = middleware.ApprovalApproved
		}
		r.Approver, r.Comment, r.DecidedAt = d.Approver, d.Comment, now
		r.Approver.OnBehalfOf = slices.Clone(d.Approver.OnBehalfOf)
		return clone(r, now), nil
	case sameDecision(r, d):
		return clone(r, now), nil // the same decision again: a no-op
	case s == middleware.ApprovalExpired && r.DecidedAt.IsZero():
		return middleware.ApprovalRecord{}, middleware.ErrApprovalExpired
	default:
		return middleware.ApprovalRecord{}, fmt.Errorf("%w: it is %s", middleware.ErrNotPending, s)
	}
}

// Consume implements [middleware.ApprovalStore]. The checks and the write
// happen under one lock: one atomic step.
func (m *Memory) Consume(_ context.Context, id string, req middleware.ConsumeRequest) (middleware.ApprovalRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	now := m.cfg.now()
	if err := consumable(r, ok, req, now); err != nil {
		if err == errAlreadyMine {
			return clone(r, now), nil
		}
		return middleware.ApprovalRecord{}, err
	}
	r.Status, r.ConsumedBy, r.ConsumedAt, r.LeaseUntil = middleware.ApprovalConsumed, req.ExecutionID, now, now.Add(req.Lease)
	return clone(r, now), nil
}

// RecordOutcome implements [middleware.ApprovalStore].
func (m *Memory) RecordOutcome(_ context.Context, id, executionID string, outcome middleware.Code) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok || r.ConsumedBy == "" || r.ConsumedBy != executionID {
		return middleware.ErrApprovalNotFound
	}
	if r.Status != middleware.ApprovalConsumed {
		return nil // recorded already
	}
	r.Status, r.Outcome, r.OutcomeAt = outcomeStatus(outcome), outcome, m.cfg.now()
	return nil
}

// List implements [middleware.ApprovalStore].
func (m *Memory) List(_ context.Context, f middleware.ApprovalFilter) ([]middleware.ApprovalRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.now()
	var out []middleware.ApprovalRecord
	for _, r := range m.records {
		if matches(r, f, now) {
			out = append(out, clone(r, now))
		}
	}
	slices.SortFunc(out, func(a, b middleware.ApprovalRecord) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), cmp.Compare(a.ID, b.ID))
	})
	return limit(out, f.Limit), nil
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
func clone(r *middleware.ApprovalRecord, now time.Time) middleware.ApprovalRecord {
	c := *r
	c.Reasons = slices.Clone(r.Reasons)
	c.Requester.OnBehalfOf = slices.Clone(r.Requester.OnBehalfOf)
	c.Approver.OnBehalfOf = slices.Clone(r.Approver.OnBehalfOf)
	c.Status = status(r, now)
	return c
}
