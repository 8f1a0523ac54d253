package middleware

import (
	"sync"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The poll of a waiting gate: a decision made through this engine wakes it
// at once; one made elsewhere (another instance sharing the store) is seen
// within the poll, which starts at pollFirst and doubles up to pollMax.
const (
	pollFirst = 200 * time.Millisecond
	pollMax   = time.Second
)

// mark returns the in-process caller's approval mark for this call, if any.
func (x *execution) mark() seam.ApprovalMark {
	m, ok := x.ctx.Value(seam.ApprovalMarkKey{}).(seam.ApprovalMark)
	if !ok || m.Procedure != x.proc() {
		return seam.ApprovalMark{}
	}
	return m
}

// undecided handles a Consume that found the approval still pending
// (pendingErr). It learns the approval's expiry for the envelope's hints
// and, when the call's in-process caller asked to wait (an MCP bridge's
// answering round), waits for the decision: first it re-checks, as
// Consume would once the record is decided, that the record is this
// caller's (the same whole actor; else not found, revealing nothing), for
// this procedure and approval metadata, and for this input, so that a
// call that could never consume it never waits; then it waits until the
// record leaves pending, at most the mark's Wait and never past the
// approval's expiry, and consumes it, in one atomic step that checks
// everything again (and says EXPIRED for a record that expired meanwhile,
// APPROVAL_PENDING for one still undecided). The caller leaving ends the
// wait, and nothing is consumed.
func (x *execution) undecided(approvals store.ApprovalStore, id string, req store.ConsumeRequest, pendingErr error) (store.ConsumedApproval, error) {
	rec, ok := x.pendingRecord(approvals, id, req)
	if !ok {
		return store.ConsumedApproval{}, pendingErr
	}
	x.extra().hints.expires = rec.ExpiresAt
	wait := x.mark().Wait
	if wait <= 0 {
		return store.ConsumedApproval{}, pendingErr
	}
	if err := bound(rec, req); err != nil {
		return store.ConsumedApproval{}, err
	}
	// The store's clock decides expiry; this bound only stops the wait.
	if err := x.awaitDecision(approvals, id, min(wait, rec.ExpiresAt.Sub(x.e.cfg.now()))); err != nil {
		return store.ConsumedApproval{}, err
	}
	// Decided, expired or still pending: Consume says which, and consumes
	// an approved record, checked against the state as it is now.
	if err := x.runPreview(); err != nil {
		return store.ConsumedApproval{}, err
	}
	req.PreviewDigest = x.preview().digest
	return x.consume(approvals, id, req)
}

// pendingRecord reads the record a Consume found pending; false when it
// cannot be read or is not this caller's to know about.
func (x *execution) pendingRecord(approvals store.ApprovalStore, id string, req store.ConsumeRequest) (store.ApprovalRecord, bool) {
	rec, err := approvals.Get(x.ctx, id)
	if err != nil || rec.Audience != req.Audience || !store.SameActor(rec.Requester, req.Actor) {
		return store.ApprovalRecord{}, false
	}
	return rec, true
}

// bound checks what Consume checks after the status, in its order: the
// procedure and approval metadata, then the input digest.
func bound(rec store.ApprovalRecord, req store.ConsumeRequest) error {
	if rec.Procedure != req.Procedure || rec.Type != req.Type || max(rec.Quorum, 1) != max(req.Quorum, 1) {
		return store.ErrApprovalResumeMismatch
	}
	if rec.Digest != req.Digest {
		return store.ErrApprovalInputMismatch
	}
	if store.Stale(rec.PreviewDigest, req.PreviewDigest) {
		return store.ErrApprovalStale // it could never be consumed as things are
	}
	return nil
}

// awaitDecision waits up to d for record id to leave pending. A store
// failure while waiting is its error, the caller leaving the context's.
func (x *execution) awaitDecision(approvals store.ApprovalStore, id string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	limit := time.NewTimer(d)
	defer limit.Stop()
	poll := pollFirst
	for {
		woken := x.e.decisions.wait()
		t := time.NewTimer(poll)
		select {
		case <-x.ctx.Done():
			t.Stop()
			return x.ctx.Err()
		case <-limit.C:
			t.Stop()
			return nil
		case <-woken:
		case <-t.C:
			poll = min(2*poll, pollMax)
		}
		t.Stop()
		rec, err := approvals.Get(x.ctx, id)
		if err != nil {
			return err
		}
		if rec.Status != store.ApprovalPending {
			return nil
		}
	}
}

// decisionSignal wakes the gates of one engine waiting for decisions
// whenever the engine records a vote: a broadcast, by closing a channel.
type decisionSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next decision.
func (s *decisionSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// wake closes the channel of everyone waiting.
func (s *decisionSignal) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
