package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/digest"
	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// ApprovalQuery is what an approval condition (see [WithApprovalCondition])
// may look at to decide whether one call needs an approval.
type ApprovalQuery struct {
	Procedure  string
	Capability Capability
	Actor      Actor
	in         PolicyInput
}

// Input returns the call's input as JSON: a JSON body, or the pinned
// protojson rendering of a protobuf message; nil for an input that is not
// JSON, or a call without one. It has passed the I-JSON check the input
// digest applies, so it means one thing to every reader.
func (q ApprovalQuery) Input() ([]byte, error) { return q.in.Input() }

// validUTF8 reports whether every string of an actor is valid UTF-8: only
// such an identity is bound to an approval, since a store may keep it in an
// encoding that replaces invalid bytes, where two actors would become one.
func validUTF8(a Actor) bool {
	invalid := func(s string) bool { return !utf8.ValidString(s) }
	return !invalid(a.ID) && !invalid(a.Tenant) && !invalid(a.Kind) && !slices.ContainsFunc(a.OnBehalfOf, invalid)
}

// storeTimeout bounds the store calls the engine makes outside a caller's
// context: recording an outcome after the caller has left.
const storeTimeout = 5 * time.Second

// leaseGrace is added to an execution's longest possible run when it
// consumes an approval, before the record may be reported in_doubt.
const leaseGrace = time.Minute

// gate is stage 3, the approval gate, for a call that needs an approval
// (for reasons): without an approval id it requests one and runs nothing;
// with one it consumes it atomically before any attempt.
func (x *execution) gate(reasons []string) *Error {
	approvals := x.e.cfg.store
	if approvals == nil { // New refuses this; never trust that it ran
		return &Error{Code: CodeApprovalUnavailable, Message: "approval required, but this engine has no approval store (WithApprovalStore)", Retryable: true}
	}
	if x.actor.ID == "" {
		return &Error{Code: CodeUnauthenticated, Message: "approval required, and the caller has no authenticated identity"}
	}
	if !validUTF8(x.actor) { // stores could not tell it from another
		return &Error{Code: CodeUnauthenticated, Message: "approval required, and the caller's identity is not valid UTF-8"}
	}
	if x.digest == "" { // bind computed it for every input that binds
		return &Error{Code: CodeInvalidArgument, Message: "approval required, and the call has no input to bind the approval to"}
	}
	if x.call.ApprovalID == "" {
		return x.requestApproval(approvals, reasons)
	}
	return x.consumeApproval(approvals)
}

func (x *execution) requestApproval(approvals store.ApprovalStore, reasons []string) *Error {
	if err := x.runPreview(); err != nil {
		return err
	}
	view, err := x.approvalView()
	if err != nil {
		return &Error{Code: CodeApprovalUnavailable, Message: "could not render the input for approvers", Retryable: true, Cause: err}
	}
	c := x.cap
	rec, err := approvals.Create(x.ctx, x.previewed(store.ApprovalRequest{
		ID:          store.NewApprovalID(),
		Audience:    x.e.cfg.audience,
		Procedure:   x.proc(),
		Type:        c.Approval.Type,
		Quorum:      c.Approval.Quorum,
		Requester:   x.actor,
		RequestedBy: x.id,
		Digest:      x.digest,
		View:        view,
		Reasons:     reasons,
		SideEffect:  c.SideEffect.String(),
		Risk:        c.Risk.String(),
		ExpiresIn:   c.expiresIn,
		Payload:     x.mark().Payload,
	}))
	if err != nil {
		return x.storeError(err)
	}
	x.extra().approvalID, x.extra().hints.expires = rec.ID, rec.ExpiresAt
	x.emit(Event{Type: EventApprovalRequested, ApprovalID: rec.ID, Reason: strings.Join(reasons, "; ")})
	msg := fmt.Sprintf("%s needs an approval", x.proc())
	if c.Approval.Type != "" {
		msg = fmt.Sprintf("%s needs an approval by a %s", x.proc(), c.Approval.Type)
	}
	return &Error{Code: CodeApprovalRequired, Message: msg + "; once approved, call again with the same input and header " + seam.HeaderApprovalID + ": " + rec.ID}
}

func (x *execution) approvalView() (string, error) {
	view := x.e.cfg.view
	if view == nil {
		return "", nil
	}
	in, err := x.call.Input.JSON()
	if err != nil {
		return "", err
	}
	return view(x.ctx, x.proc(), in)
}

func (x *execution) consumeApproval(approvals store.ApprovalStore) *Error {
	id := x.call.ApprovalID
	x.extra().approvalID = id
	// The effect as the state is now, before the consumption checks it
	// against the approved one.
	if err := x.runPreview(); err != nil {
		return err
	}
	req := store.ConsumeRequest{
		Audience:    x.e.cfg.audience,
		Procedure:   x.proc(),
		Type:        x.cap.Approval.Type,
		Quorum:      x.cap.Approval.Quorum,
		Actor:       x.actor,
		Digest:      x.digest,
		ExecutionID: x.id,
		Lease:       x.cap.lease,
	}
	req.PreviewDigest = x.preview().digest
	got, err := x.consume(approvals, id, req)
	if errors.Is(err, store.ErrApprovalPending) {
		got, err = x.undecided(approvals, id, req, err) // wait.go
	}
	if e, ok := err.(*Error); ok { // the preview, computed again while the approval was undecided
		return e
	}
	if err != nil {
		e := x.storeError(err)
		x.emit(Event{Type: staleOr(e.Code), ApprovalID: id, Code: e.Code, Reason: e.Message})
		return e
	}
	x.consumed = true
	// Derived from the approval, so that if the same approval could ever run
	// twice (a Redis failover), the downstream still sees one key.
	x.idempotencyKey = ids.Derive(idempotencyKeyPrefix, id)
	x.extra().approval = &got
	x.emit(Event{Type: EventApprovalConsumed, ApprovalID: id, Approver: ref(got.Approver), Comment: got.Comment})
	return nil
}

// consumeRetries are the waits before the engine re-issues a Consume whose
// reply was lost or whose store failed mid-call: at most three tries.
var consumeRetries = [...]time.Duration{50 * time.Millisecond, 100 * time.Millisecond}

// consume calls the store's Consume, re-issuing it for the same execution
// (Consume is idempotent per execution) when the store failed rather than
// decided, within the caller's deadline. If every try failed, the approval
// may have been consumed by a try whose reply was lost: it is released in
// the background, which is a no-op unless this execution consumed it, so a
// lost reply never spends an approval.
func (x *execution) consume(approvals store.ApprovalStore, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	for try := 0; ; try++ {
		got, err := approvals.Consume(x.ctx, id, req)
		if err == nil || approvalCode(err) != CodeApprovalUnavailable {
			return got, err
		}
		// The store failed: a try whose reply was lost may have consumed.
		if x.ctx.Err() != nil || try == len(consumeRetries) || !x.sleepWithin(consumeRetries[try]) {
			x.e.release(x.ctx, id, x.id)
			return got, err
		}
	}
}

// sleepWithin waits d unless the caller leaves first or its deadline would
// pass; it reports whether it waited.
func (x *execution) sleepWithin(d time.Duration) bool {
	if deadline, ok := x.ctx.Deadline(); ok && time.Until(deadline) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.ctx.Done():
		return false
	}
}

// release gives an approval back when the engine knows nothing ran on its
// consumption. It runs in the background, outside the caller's context,
// bounded; a failure leaves the record to read in_doubt after its lease:
// visible, not silent.
func (e *Engine) release(ctx context.Context, id, executionID string) {
	inBackground(ctx, func(ctx context.Context) error { return e.cfg.store.Release(ctx, id, executionID) })
}

// inBackground makes a store write nobody waits for — the give-back of
// what a call held when nothing ran on it — on a goroutine of its own,
// outside ctx's cancellation, bounded by storeTimeout.
func inBackground(ctx context.Context, write func(context.Context) error) {
	ctx = context.WithoutCancel(ctx)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		_ = write(ctx)
	}()
}

// giveBack gives back, in the background, the approval this execution
// consumed, if any: nothing ran on it.
func (x *execution) giveBack() {
	if x.consumed {
		x.consumed = false
		x.e.release(x.ctx, x.approvalID(), x.id)
	}
}

// approvalMessages says what each refusal means to the caller.
var approvalMessages = map[Code]string{
	CodeApprovalNotFound:       "no such approval for this caller",
	CodeApprovalPending:        "the approval has not been decided yet",
	CodeApprovalRejected:       "the approval was rejected",
	CodeApprovalExpired:        "the approval has expired",
	CodeApprovalConsumed:       "the approval was already used",
	CodeApprovalInputMismatch:  "the input differs from the approved input",
	CodeApprovalResumeMismatch: "the approval is for another procedure or approval type",
	CodeApprovalStale:          "the state the approval was given for has changed since (the preview of the effect differs from the approved one); nothing ran: request a new approval",
	CodeResourceExhausted:      "too many approvals are pending for this caller",
	CodeApprovalUnavailable:    "the approval store is unavailable; nothing ran",
}

// storeError maps a store error to the execution's error through the one
// sentinel table, failing closed for everything else.
func (x *execution) storeError(err error) *Error {
	code := approvalCode(err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if x.ctx.Err() != nil {
			return x.cancelled()
		}
	}
	return &Error{Code: code, Message: approvalMessages[code], Retryable: code.retryable(), Cause: err}
}

// recordOutcome writes the consuming execution's outcome into the record,
// even when the caller has left. An execution that left its last attempt
// running records in_doubt ("it may have run"), never failed: that attempt
// records its own result when it returns (recordLate), and one that has
// already returned — or an Inline attempt that returned after its context
// ended — is recorded with its own result, late. A failure leaves
// the record to turn in_doubt after its lease, which List and Get report:
// visible, not silent.
func (x *execution) recordOutcome(code Code) {
	x.mu.Lock()
	x.final = true // from here on, a late attempt records itself
	last := x.last
	var late Code
	var returned bool
	if last != nil {
		late, _, returned = last.returnedLate()
	}
	left := last != nil && (last.abandoned || returned) // or an Inline attempt that returned late
	x.mu.Unlock()
	switch {
	case left && returned:
		x.recordLate(late)
	case left:
		x.storeOutcome(store.Outcome{Status: store.ApprovalInDoubt, Code: code.String()})
	case code == CodeOK:
		x.storeOutcome(store.Outcome{Status: store.ApprovalCompleted, Code: code.String()})
	default:
		x.storeOutcome(store.Outcome{Status: store.ApprovalFailed, Code: code.String()})
	}
}

// recordLate records the result of an abandoned attempt of an execution
// that consumed an approval, once it returns: it replaces in_doubt.
func (x *execution) recordLate(code Code) {
	o := store.Outcome{Status: store.ApprovalCompleted, Code: code.String(), Late: true}
	if code != CodeOK {
		o.Status = store.ApprovalFailed
	}
	x.storeOutcome(o)
}

func (x *execution) storeOutcome(o store.Outcome) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), storeTimeout)
	defer cancel()
	_ = x.e.cfg.store.RecordOutcome(ctx, x.approvalID(), x.id, o)
}

// Decide records an approver's decision through the engine's store and
// emits capability.approved or capability.rejected. Deciding executes
// nothing; the requester resumes the call. Store errors are returned as the
// store gave them (sentinels such as store.ErrSelfApproval or store.ErrNotPending).
func (e *Engine) Decide(ctx context.Context, id string, d store.Decision) (store.ApprovalRecord, error) {
	if e.cfg.store == nil {
		return store.ApprovalRecord{}, errNoStore
	}
	if !store.ValidApprovalID(id) {
		return store.ApprovalRecord{}, fmt.Errorf("%w: malformed approval id", store.ErrApprovalNotFound)
	}
	d.Audience = e.cfg.audience
	rec, changed, err := e.cfg.store.Decide(ctx, id, d)
	if err != nil {
		return rec, err
	}
	if changed {
		e.decisions.wake() // gates waiting in this process look again
	}
	if changed && e.observed {
		ev := Event{Time: e.cfg.now(), ExecutionID: rec.RequestedBy, Procedure: rec.Procedure, Actor: ref(rec.Requester),
			InputDigest: e.keyedDigest(rec.Digest), ApprovalID: rec.ID, Approver: ref(d.Approver), Comment: d.Comment}
		if c, ok := e.caps[rec.Procedure]; ok {
			ev.SideEffect, ev.Risk = c.SideEffect, c.Risk
		}
		sinkCtx := context.WithoutCancel(ctx)
		emit := func(t EventType) {
			ev.Type = t
			e.deliver(sinkCtx, ev)
		}
		if rec.Quorum > 1 {
			emit(EventApprovalVote) // every vote under a quorum
		}
		ev.Duration = rec.DecidedAt.Sub(rec.RequestedAt)
		switch rec.Status {
		case store.ApprovalApproved:
			emit(EventApproved) // once: at the vote that completed the quorum
		case store.ApprovalRejected:
			emit(EventRejected)
		}
	}
	return rec, nil
}

// errNoStore is what the approval views of an engine without a store fail with.
var errNoStore = errors.New("agentsafe: this engine has no approval store (WithApprovalStore)")

// Get returns the approval record with id, if it belongs to the engine's
// audience (see [WithAudience]); a record of another audience, like a
// malformed id, is store.ErrApprovalNotFound.
func (e *Engine) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	if e.cfg.store == nil {
		return store.ApprovalRecord{}, errNoStore
	}
	if !store.ValidApprovalID(id) {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	rec, err := e.cfg.store.Get(ctx, id)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	if rec.Audience != e.cfg.audience {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	return rec, nil
}

// List returns the approval records of the engine's audience that match
// f (its Audience is replaced by the engine's), oldest first.
func (e *Engine) List(ctx context.Context, f store.ApprovalFilter) ([]store.ApprovalRecord, error) {
	if e.cfg.store == nil {
		return nil, errNoStore
	}
	f.Audience = e.cfg.audience
	return e.cfg.store.List(ctx, f)
}

// lease is how long an execution of c may run, at most, plus a grace: the
// time after which a consumed approval without an outcome is in_doubt.
func (e *Engine) lease(c *capability) time.Duration {
	total := c.timeout * time.Duration(c.Retry.MaxRetries+1)
	if c.SideEffect.WriteLike() {
		// Before each re-attempt a write may wait one more timeout for the
		// attempt it abandoned.
		total += c.timeout * time.Duration(c.Retry.MaxRetries)
	}
	wait := c.backoff
	for range c.Retry.MaxRetries {
		total += min(wait, e.cfg.maxBackoff) + e.cfg.jitter
		wait *= 2
	}
	return total + leaseGrace
}

func (e *Engine) keyedDigest(d string) string { return digest.Keyed(e.cfg.digestKey, d) }
