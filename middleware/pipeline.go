package middleware

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware/store"
	retry "github.com/sethvargo/go-retry"
)

// errAttemptTimeout is the cause an attempt's own timer cancels it with, so
// that context.Cause tells a timeout from the caller leaving.
var errAttemptTimeout = errors.New("agentsafe: attempt timed out")

// overrunWarnEvery rate-limits, per capability, the warning about Inline
// attempts that overran their deadline.
const overrunWarnEvery = time.Minute

// execute governs one call of c's procedure: it opens an execution, runs
// attempts of fn under the capability's timeout and retry rules, and
// finalizes exactly once (see route.Execute).
func (e *Engine) execute(ctx context.Context, proc string, c *capability, call seam.Call) (any, Envelope, error) {
	x := e.open(ctx, proc, call, c, false)
	if c == nil {
		x.requested()
		return x.finish(nil, e.notFound(proc))
	}
	if err := x.admit(); err != nil {
		return x.finish(nil, err)
	}
	if r := x.replaying(); r != nil { // a stored result: nothing runs
		return x.finish(r.v, r.err)
	}
	if (x.consumed || x.spends != nil) && x.ctx.Err() != nil {
		// The caller left between the consumption (or the reservation) and
		// the first attempt: nothing ran, so the approval is given back
		// (and the budgets, by finish).
		x.giveBack()
		return x.finish(nil, x.cancelled())
	}
	started := Event{Type: EventStarted, Attempt: 1, ApprovalID: x.approvalID()}
	if x.e.observed {
		x.budgetFields(&started)
	}
	if err := x.unaudited(x.emit(started)); err != nil {
		x.giveBack() // nothing ran
		return x.finish(nil, err)
	}
	return x.finish(x.loop())
}

// refuse records a governed call that its adapter cannot even hand to the
// engine as an execution finalized at once with err (see route.Refuse).
func (e *Engine) refuse(ctx context.Context, proc string, c *capability, call seam.Call, err *Error) (Envelope, error) {
	if err == nil {
		err = &Error{Code: CodeInvalidArgument, Message: "the call was refused"}
	}
	x := e.open(ctx, proc, seam.Call{ApprovalID: call.ApprovalID, Surface: call.Surface}, c, false) // nothing was read to bind
	if c != nil {
		if hide := x.hiding(); hide != nil {
			err = hide // no refusal may tell a hidden procedure apart
		}
	}
	x.requested()
	_, env, ferr := x.finish(nil, err)
	return env, ferr
}

// notFound is the error of a governed call without a capability.
func (e *Engine) notFound(procedure string) *Error {
	if e.undeclared[procedure] {
		return &Error{Code: CodeCapabilityNotFound, Message: fmt.Sprintf("%s declares a capability option the engine was not built with (see WithProtoFiles); refusing rather than running it ungoverned", procedure)}
	}
	return &Error{Code: CodeCapabilityNotFound, Message: fmt.Sprintf("no capability is registered for %q", procedure)}
}

// execution is the state of one governed call. Only the goroutine running
// Execute writes it after open; attempt goroutines read what was written
// before they started. It is allocated on every call and lives as long as
// the call is in flight, so what only some calls need (approvals,
// policies, previews, a failed actor) is in more, allocated when first
// written, and the fields are ordered to leave no padding: the record
// fits the allocator's 512-byte class.
type execution struct {
	e              *Engine
	cap            *capability // its procedure is the execution's
	call           seam.Call
	ctx            context.Context // the caller's, with the tracer's values
	sinkCtx        context.Context // ctx, never cancelled
	id             string
	idempotencyKey string
	actor          Actor
	digest         string // plain, for approvals
	eventDigest    string // keyed when configured
	more           *executionMore
	keyed          *keyed         // the caller's key or a dedup window, when the engine stores results
	endTrace       func(Envelope) // the tracer's, or nil
	start          time.Time
	// spends are what the execution did with each budget of its
	// capability (budget.go).
	spends []spend
	// last is the latest attempt; guarded by mu.
	last *attempt
	// emitting admits one sink delivery at a time per execution, in order.
	// A channel, not a sync.Mutex: a goroutine waiting on a channel is
	// durably blocked for testing/synctest, one waiting on a mutex is not.
	emitting chan struct{}
	// callerLeft is when the caller's context ended (unix nanoseconds),
	// recorded for Inline attempts, which measure their overrun from it.
	callerLeft atomic.Int64
	first      attempt // attempt 1 lives here: one allocation less
	attempts   int32
	// noEffects counts the attempts that returned NoEffect in time
	// (noeffect.go).
	noEffects int32
	finalized atomic.Bool
	// mu guards final and last: whether finish has run, and the latest
	// attempt, so that an attempt left running at finalization records its
	// own result in the approval record exactly once.
	mu        sync.Mutex
	final     bool
	hidden    bool // stage 2.0 answered it as absent
	consumed  bool // an approval was consumed: its outcome is recorded
	streaming bool
}

// executionMore is the state of an execution that only some calls have,
// allocated by extra when first written.
type executionMore struct {
	actorErr   error
	bindErr    error  // why the input does not bind, once tried
	json       []byte // the input as policies read it, once rendered
	approvalID string
	approval   *store.ConsumedApproval
	preview    previewed
	// hints are what an envelope asking for a decision tells (hints.go).
	hints     approvalHints
	inputRead bool // a policy read the input (or its digest)
}

// extra returns x.more, allocating it: for writers, on the Execute
// goroutine before any attempt starts.
func (x *execution) extra() *executionMore {
	if x.more == nil {
		x.more = new(executionMore)
	}
	return x.more
}

// proc is the execution's procedure.
func (x *execution) proc() string { return x.cap.procedure }

// approvalID is the approval the execution requested or consumed, or "".
func (x *execution) approvalID() string {
	if x.more == nil {
		return ""
	}
	return x.more.approvalID
}

// actorErr is why the actor function failed, or nil.
func (x *execution) actorErr() error {
	if x.more == nil {
		return nil
	}
	return x.more.actorErr
}

// approval is the approval the execution consumed, or nil.
func (x *execution) approval() *store.ConsumedApproval {
	if x.more == nil {
		return nil
	}
	return x.more.approval
}

// preview is what the capability's preview computed, if it ran.
func (x *execution) preview() previewed {
	if x.more == nil {
		return previewed{}
	}
	return x.more.preview
}

// bindErr is why the input does not bind, once tried, or nil.
func (x *execution) bindErr() error {
	if x.more == nil {
		return nil
	}
	return x.more.bindErr
}

// open starts stage 2: the execution's ids and its actor. Nothing is
// emitted yet: admit decides when the trail starts.
func (e *Engine) open(ctx context.Context, proc string, call seam.Call, c *capability, streaming bool) *execution {
	a, err := e.actorOf(ctx)
	return e.opened(ctx, proc, call, c, streaming, a, err)
}

// opened is open for a caller whose actor is known already.
func (e *Engine) opened(ctx context.Context, proc string, call seam.Call, c *capability, streaming bool, a Actor, actorErr error) *execution {
	if c == nil { // a governed call with no capability: only refused
		c = &capability{procedure: proc}
	}
	x := &execution{e: e, cap: c, call: call, ctx: ctx, start: e.cfg.now(), streaming: streaming}
	x.id, x.idempotencyKey = ids.Pair(executionIDPrefix, idempotencyKeyPrefix)
	x.actor = a
	if actorErr != nil {
		x.extra().actorErr = actorErr
	}
	if e.observed {
		x.emitting = make(chan struct{}, 1)
	}
	return x
}

// actorOf asks the application's actor function who ctx's caller is. A
// panic in it is an error: the call fails closed, UNAUTHENTICATED.
func (e *Engine) actorOf(ctx context.Context) (a Actor, err error) {
	f := e.cfg.actor
	if f == nil {
		return Actor{}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			a, err = Actor{}, fmt.Errorf("agentsafe: the actor function panicked: %v", p)
		}
	}()
	return f(ctx)
}

// admit runs the rest of stage 2, then the approval gate (stage 3), in
// SPEC's order (§3). Nothing has run when it refuses; every refusal is
// recorded, capability.requested first.
//
//	2.0  hiding: exposure, then every policy as at a listing
//	     the caller already gone
//	2a   the cheap checks: agentsafe headers, the actor, the abandoned cap
//	2b   binding the input, only when something needs its digest
//	     capability.requested (with the digest, or without it at a
//	     refusal before the binding)
//	2c   the policies, which may read the input once it is known to bind
//	2d   the result store: claim, or replay (a replay never reaches the gate)
//	2e   budgets: reserve, or refuse, or require approval (budget.go)
//	3    the approval gate; the approved resume of a budget that
//	     required approval then reserves past its limit
func (x *execution) admit() *Error {
	if err := x.hiding(); err != nil { // 2.0
		x.requested() // through the audit sink's queue: it cannot tell the procedure exists
		return err
	}
	if x.ctx.Err() != nil {
		x.requested()
		return x.cancelled()
	}
	if err := x.cheapChecks(); err != nil { // 2a
		x.requested()
		return err
	}
	if err := x.bind(); err != nil { // 2b
		x.requested()
		return err
	}
	if err := x.requested(); err != nil {
		return err
	}
	reasons, err := x.decide() // 2c
	if err != nil {
		return err
	}
	if err := x.claim(len(reasons) > 0); err != nil || x.replaying() != nil { // 2d
		return err // a replay never reaches the gate, nor spends a budget
	}
	over, err := x.reserveBudgets() // 2e
	if err != nil {
		return err
	}
	reasons = append(reasons, over...)
	if len(reasons) == 0 {
		return nil
	}
	// Last: an approval consumed here must be followed by an attempt.
	if err := x.gate(reasons); err != nil { // 3
		return err
	}
	return x.overdraw() // the approved resume of an escalated budget
}

// cheapChecks is stage 2a: what costs nothing to refuse.
func (x *execution) cheapChecks() *Error {
	if x.streaming && x.cap.Approval.Required {
		// Validation refuses this for procedures known to stream; a registry
		// entry the engine could not check still fails closed.
		return &Error{Code: CodeInvalidArgument, Message: "a streaming call cannot be gated by an approval: " + x.proc()}
	}
	if x.call.ApprovalID != "" && !store.ValidApprovalID(x.call.ApprovalID) {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("malformed %s header: want \"apr_\" and 32 lowercase hex digits, got %d characters", seam.HeaderApprovalID, len(x.call.ApprovalID))}
	}
	if err := x.actorErr(); err != nil {
		return &Error{Code: CodeUnauthenticated, Message: "the caller could not be authenticated", Cause: err}
	}
	if err := x.callerKey(); err != nil {
		return err
	}
	if x.cap.abandoned.Load() >= int64(x.e.cfg.maxAbandoned) {
		return &Error{Code: CodeResourceExhausted, Message: fmt.Sprintf("too many abandoned attempts of %s are still running", x.proc())}
	}
	return nil
}

// bind is stage 2b: the I-JSON check and the input digest, computed only
// when something needs them. An input that cannot be bound is refused when
// the call's safety depends on it (an approval, or a condition that reads
// the input); for events alone it is just left without a digest.
func (x *execution) bind() *Error {
	strict := x.cap.Approval.Required || x.e.cfg.condition || x.keyed != nil || x.cap.bindsInput
	if x.call.Input == nil || x.streaming || !(strict || x.e.observed || x.e.cfg.tracer != nil) {
		return nil
	}
	d, err := x.call.Input.Digest(x.proc())
	if err != nil {
		if strict {
			return &Error{Code: CodeInvalidArgument, Message: "the input cannot be bound to " + x.boundTo() + ": " + err.Error(), Cause: unboundInput{err}}
		}
		x.extra().bindErr = err // a policy that reads the input refuses it
		return nil
	}
	x.digest, x.eventDigest = d, x.e.keyedDigest(d)
	return nil
}

// unboundInput is the cause of a refusal of an input that does not bind.
// The caller's message says where and why, quoting the offending value;
// its text, which events carry, quotes none: no payload in events, ever.
// errors.Is and errors.As still reach the digest's error.
type unboundInput struct{ err error }

func (u unboundInput) Error() string { return "the input cannot be bound to a digest" }
func (u unboundInput) Unwrap() error { return u.err }

// requested starts the execution's trail and its trace, once the digest is
// known (or known not to come). It fails when the strict audit sink did not
// record the request: then nothing may run.
func (x *execution) requested() *Error {
	x.startTracing(x.streaming)
	if x.e.observed {
		x.sinkCtx = context.WithoutCancel(x.ctx)
	}
	return x.unaudited(x.emit(Event{Type: EventRequested}))
}

// unaudited is the error of an execution whose strict audit sink failed:
// no record, no effect; or that the caller left while it waited.
func (x *execution) unaudited(err error) *Error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errCallerLeft) {
		return x.cancelled()
	}
	return &Error{Code: CodeAuditUnavailable, Message: "the audit trail could not record the call; nothing ran", Retryable: true, Cause: err}
}

// loop is stage 5, the only stage that retries.
func (x *execution) loop() (any, *Error) {
	var backoff retry.Backoff
	for n := 1; ; n++ {
		a := x.startAttempt(n)
		v, err := x.await(a)
		a.traceEnd(err)
		if err == nil {
			return v, nil
		}
		if !x.retryEligible(err, n) {
			return v, err
		}
		if backoff == nil {
			backoff = x.e.newBackoff(x.cap.backoff)
		}
		wait, ok := x.nextBackoff(backoff)
		if !ok {
			return v, err
		}
		if err := x.sleep(wait); err != nil {
			return nil, err
		}
		if a.abandoned && x.cap.SideEffect.WriteLike() {
			// Never two attempts of a write at once: wait for the one left
			// behind, at most one attempt timeout.
			if err := x.awaitReturn(a, err); err != nil {
				return nil, err
			}
		}
		x.emit(Event{Type: EventRetried, Attempt: n + 1, PreviousErrorCode: err.Code, ApprovalID: x.approvalID()})
	}
}

// retryEligible checks every condition for another attempt except the
// backoff against the caller's deadline.
func (x *execution) retryEligible(err *Error, n int) bool {
	c := x.cap
	if n > c.Retry.MaxRetries || !err.Retryable || err.Code == CodeCancelled {
		return false
	}
	// The retry-safety rule, again at run time: never trust that
	// validation ran.
	if !c.retryAllowed() {
		return false
	}
	return !vetoed(c.Retry.RetryOn, err)
}

// classify asks the application's classifier; a panic in it means not
// retryable.
func (e *Engine) classify(err error) (retryable bool) {
	defer func() {
		if recover() != nil {
			retryable = false
		}
	}()
	return e.cfg.classify(err)
}

// redact renders an error for events with the application's redactor; a
// panic in it never reaches the execution.
func (e *Engine) redact(err error) (text string) {
	defer func() {
		if recover() != nil {
			text = "<the redactor panicked>"
		}
	}()
	return e.cfg.redact(err)
}

func vetoed(retryOn func(*Error) bool, err *Error) (veto bool) {
	if retryOn == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			veto = true
		}
	}()
	return !retryOn(err)
}

// nextBackoff returns the wait before the next attempt, or false when the
// caller's deadline would pass first.
func (x *execution) nextBackoff(b retry.Backoff) (time.Duration, bool) {
	wait, stop := b.Next()
	if stop {
		return 0, false
	}
	if deadline, ok := x.ctx.Deadline(); ok && time.Until(deadline) <= wait {
		return 0, false // the caller will be gone before the next attempt starts
	}
	return wait, true
}

// sleep waits out a backoff; the caller leaving ends the execution.
func (x *execution) sleep(d time.Duration) *Error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-x.ctx.Done():
		return x.cancelled()
	}
}

// awaitReturn waits for an abandoned attempt to return before a write is
// re-attempted. If it does not return within one attempt timeout, the
// execution ends with last rather than risk two writes at once.
func (x *execution) awaitReturn(a *attempt, last *Error) *Error {
	t := time.NewTimer(x.cap.timeout)
	defer t.Stop()
	select {
	case <-a.left.returned:
		return nil
	case <-t.C:
		return last
	case <-x.ctx.Done():
		return x.cancelled()
	}
}

// attempt is one run of the handler. It is the context the handler sees:
// the attempt's deadline plus the execution's identity.
type attempt struct {
	context.Context
	cancel context.CancelFunc
	x      *execution
	n      int
	state  atomic.Int32
	// w runs the attempt; when the handler returned before the engine
	// gave up on it, the result is in its r (see run). Nil for an Inline
	// attempt, which runs on the Execute goroutine.
	w         *attemptWorker
	abandoned bool // set by the Execute goroutine only
	// left is what an attempt left behind its deadline needs: made by the
	// Execute goroutine as it abandons the attempt, or under the
	// execution's mu as an Inline attempt returns late. It is made before
	// the abandoning CAS, which the worker's read of it follows; so an
	// attempt that returned just as the CAS was tried may have one, unused
	// (its returnedLate is false). Nil otherwise.
	left     *leftBehind
	endTrace func(AttemptOutcome) // the tracer's, or nil; Execute goroutine only
}

// leftBehind is the state of an attempt that outlived its context.
type leftBehind struct {
	// returned is closed when an abandoned attempt returns.
	returned chan struct{}
	// late is the attempt's own result, once it returned late
	// (returnedLate); guarded by the execution's mu.
	late         Code
	returnedLate bool
	lateResult   attemptResult // what it returned, for the result store
}

// returnedLate reports whether a returned after its context ended, with
// the code its own result stands for and that result; the execution's mu
// must be held.
func (a *attempt) returnedLate() (Code, attemptResult, bool) {
	if a.left == nil || !a.left.returnedLate {
		return CodeOK, attemptResult{}, false
	}
	return a.left.late, a.left.lateResult, true
}

type attemptKey struct{}

func (a *attempt) Value(key any) any {
	if key == (attemptKey{}) {
		return a
	}
	return a.Context.Value(key)
}

const (
	attemptRunning int32 = iota
	attemptReturned
	attemptAbandoned
)

type attemptResult struct {
	v     any
	err   error
	panic *PanicError
	// ctxEnded: the attempt's context had ended when the handler returned
	// (read on the attempt's goroutine: the engine cancels the context
	// once the result is delivered).
	ctxEnded bool
}

func (x *execution) startAttempt(n int) *attempt {
	a := &x.first
	if n > 1 {
		a = new(attempt)
	}
	a.x, a.n = x, n
	// The tracer's context is the parent of the timeout: the handler's spans
	// nest under the attempt, and the deadline stays the engine's.
	a.Context, a.cancel = context.WithTimeoutCause(x.attemptParent(a), x.cap.timeout, errAttemptTimeout)
	x.attempts = int32(n)
	x.mu.Lock()
	x.last = a
	x.mu.Unlock()
	if !x.cap.Inline { // an Inline attempt runs in await, on this goroutine
		x.e.workers.start(a)
	}
	return a
}

// run executes the handler on the attempt's goroutine. Whoever moves the
// state out of running first owns the outcome: this goroutine (the result
// is delivered) or the Execute goroutine (the attempt was abandoned and
// the result is reported, never used). The result is written to the
// worker's r before the state moves, so the Execute goroutine that sees
// it returned reads it; then the attempt's context is cancelled, which
// wakes the Execute goroutine (see await). It reports whether the result
// was delivered.
func (a *attempt) run() (delivered bool) {
	var r attemptResult
	returned := false
	defer func() {
		if p := recover(); p != nil {
			r = attemptResult{panic: &PanicError{Value: p, Stack: debug.Stack()}}
		} else if !returned {
			a.w.exited = true // runtime.Goexit: this goroutine ends here
		}
		a.w.r = r
		if a.state.CompareAndSwap(attemptRunning, attemptReturned) {
			delivered = true
		} else {
			a.w.r = attemptResult{}
			a.x.reportAbandoned(a, r)
			close(a.left.returned)
		}
		a.cancel()
	}()
	r.v, r.err = a.x.call.Attempt.RunAttempt(a)
	r.ctxEnded = a.Err() != nil
	returned = true
	return false
}

// taken is called once the Execute goroutine has received the attempt's
// signal: its worker may take another attempt.
func (a *attempt) taken() {
	if a.w != nil {
		a.w.pool.put(a.w)
	}
}

func (x *execution) reportAbandoned(a *attempt, r attemptResult) {
	x.cap.abandoned.Add(-1)
	if errors.Is(r.err, seam.ErrNoResponse) {
		r.err = nil // late, an implicit success is a success: it may have had an effect
	}
	if x.consumed || x.keyed != nil {
		x.lateReturn(a, x.lateCode(a, r), r)
	}
	if r.panic == nil && x.stopped(r.err) {
		return // it stopped because its context ended: nothing landed late that it knows of
	}
	ev := Event{Type: EventAbandonedResult, Attempt: a.n, Succeeded: r.err == nil && r.panic == nil, ApprovalID: x.approvalID()}
	switch {
	case r.panic != nil:
		ev.Error, ev.Stack = x.e.redact(r.panic), string(r.panic.Stack)
	case r.err != nil:
		ev.Error = x.e.redact(r.err)
	}
	x.emit(ev)
}

// lateCode is the code an abandoned attempt's own result stands for.
func (x *execution) lateCode(a *attempt, r attemptResult) Code {
	switch {
	case r.panic != nil:
		return CodeExecutionFailed
	case r.err == nil:
		return CodeOK
	case x.stopped(r.err):
		return x.contextError(a).Code
	}
	return CodeOf(r.err)
}

// lateReturn hands an abandoned attempt's result to the approval record
// and the result store: recorded now if the execution has finalized with
// this attempt left running (its record says in_doubt), else kept for
// finish to record.
func (x *execution) lateReturn(a *attempt, code Code, r attemptResult) {
	x.mu.Lock()
	if a.left == nil { // an Inline attempt's
		a.left = new(leftBehind)
	}
	a.left.late, a.left.returnedLate, a.left.lateResult = code, true, r
	record := x.final && x.last == a
	doubtful := x.keyed != nil && x.keyed.doubtful
	x.mu.Unlock()
	if record && x.consumed {
		x.recordLate(code)
	}
	if record && doubtful {
		x.storeLate(a, r)
	}
}

// await returns when the attempt returns or its context ends, whichever is
// first: it never waits for a handler that ignores its context — unless
// the capability is Inline, whose attempt runs here (runInline).
func (x *execution) await(a *attempt) (any, *Error) {
	if x.cap.Inline {
		return x.runInline(a)
	}
	// Let the attempt run on this thread first: a quick handler then
	// finishes before this goroutine parks, saving the wake-ups of another
	// thread that parking and readying would cost.
	runtime.Gosched()
	// It usually has: then the context's done channel is never made.
	if a.state.Load() == attemptReturned {
		return x.settle(a, x.took(a))
	}
	// The attempt's goroutine cancels its context once its result is
	// delivered, so waiting for the context alone wakes this one
	// whichever comes first: no channel of the attempt's own, and one
	// waiter, where a select on two would hold two while it is in flight.
	<-a.Done()
	// A result returned in time, or at the same moment the deadline
	// fired, wins.
	if a.state.Load() == attemptReturned {
		return x.settle(a, x.took(a))
	}
	a.left = &leftBehind{returned: make(chan struct{})}
	if !a.state.CompareAndSwap(attemptRunning, attemptAbandoned) {
		return x.settle(a, x.took(a)) // it returned just now: its result is written
	}
	a.abandoned = true
	x.cap.abandoned.Add(1)
	return nil, x.contextError(a)
}

// runInline runs an attempt of an Inline capability on the Execute
// goroutine, and so waits for its handler however late it returns: the
// attempt is never abandoned. A result returned after the attempt's
// context ended is discarded as an abandoned one is — the outcome is the
// context's, TIMEOUT or CANCELLED — but it is known now, so a consumed
// approval and a caller's key record it at finalization, late, with no
// in_doubt before it and no abandoned_result after. A handler that only
// stopped when told (its context's error) has no result to record. One
// that returned more than the overrun grace after its context ended broke
// the promise Inline declares, and is reported (overran).
func (x *execution) runInline(a *attempt) (any, *Error) {
	var stop func() bool
	if x.ctx.Done() != nil {
		stop = context.AfterFunc(x.ctx, func() { x.callerLeft.CompareAndSwap(0, time.Now().UnixNano()) })
	}
	r := a.runHere(x.call.Attempt)
	if stop != nil {
		stop()
	}
	var none bool
	if r.err, none = withoutEffect(r.err); none && !r.ctxEnded {
		x.noEffects++ // only in time: a late result is the context's outcome
	}
	if !r.ctxEnded {
		return x.settle(a, r)
	}
	x.overran(a, time.Now())
	if r.panic == nil && (r.err != nil && x.stopped(r.err) || errors.Is(r.err, seam.ErrNoResponse)) {
		return x.settle(a, r) // it stopped when told to
	}
	if x.consumed || x.keyed != nil {
		x.lateReturn(a, x.lateCode(a, r), r)
	}
	a.cancel()
	err := x.contextError(a)
	if r.panic != nil { // the stack still reaches the final event
		err.Cause = fmt.Errorf("%w; then the handler panicked: %w", err.Cause, r.panic)
	}
	return nil, err
}

// runHere runs an attempt on the calling goroutine, recovering a panic.
func (a *attempt) runHere(f seam.Attempt) (r attemptResult) {
	defer func() {
		if p := recover(); p != nil {
			r = attemptResult{panic: &PanicError{Value: p, Stack: debug.Stack()}, ctxEnded: a.Err() != nil}
		}
	}()
	r.v, r.err = f.RunAttempt(a)
	r.ctxEnded = a.Err() != nil
	return r
}

// overran reports an Inline attempt that returned at now, after its
// context ended, when it took longer than the overrun grace to do so:
// capability.deadline_overrun, and a warning at most once a minute per
// capability.
func (x *execution) overran(a *attempt, now time.Time) {
	ended, ok := a.Deadline()
	if !ok || !errors.Is(a.Err(), context.DeadlineExceeded) {
		// The caller cancelled: from when it did, if the engine saw it.
		at := x.callerLeft.Load()
		if at == 0 {
			return
		}
		ended = time.Unix(0, at)
	}
	overrun := now.Sub(ended)
	if overrun <= x.e.cfg.overrunGrace {
		return
	}
	x.emit(Event{Type: EventDeadlineOverrun, Attempt: a.n, Duration: overrun, ApprovalID: x.approvalID()})
	c := x.cap
	last := c.overrunWarned.Load()
	if t := now.UnixNano(); (last == 0 || t-last >= int64(overrunWarnEvery)) && c.overrunWarned.CompareAndSwap(last, t) {
		x.e.cfg.logger.Warn("agentsafe: an Inline handler returned long after its context ended: it does not honour its context, and held its caller past the deadline",
			"procedure", x.proc(), "execution_id", x.id, "attempt", a.n, "overrun", overrun)
	}
}

// result takes the result of an attempt seen returned, and hands its
// worker back.
func (a *attempt) result() attemptResult {
	r := a.w.r
	a.w.r = attemptResult{}
	a.taken()
	return r
}

// settle turns an attempt's own result into the engine's terms.
func (x *execution) settle(a *attempt, r attemptResult) (any, *Error) {
	ctxEnded := r.ctxEnded
	a.cancel()
	switch {
	case r.panic != nil:
		return nil, &Error{Code: CodeExecutionFailed, Message: concealedMessage, Cause: r.panic}
	case r.err == nil:
		return r.v, nil
	case errors.Is(r.err, seam.ErrNoResponse):
		if ctxEnded {
			return nil, x.contextError(a) // it gave up when told to
		}
		return r.v, nil // an implicit success
	case ctxEnded && x.stopped(r.err):
		// The handler honoured its context, or its framework answered for
		// it: the engine classifies by the context's cause.
		return nil, x.contextError(a)
	}
	out := &Error{Code: CodeExecutionFailed, Message: concealedMessage, Retryable: x.e.classify(r.err), Cause: r.err}
	if declared, ok := errors.AsType[*Error](r.err); ok {
		if declared.Code != CodeOK {
			out.Code = declared.Code
		}
		if declared.Message != "" {
			out.Message = declared.Message
		}
	} else if code, msg, ok := x.status(r.err); ok {
		// A framework's own error passes to the wire unchanged; the
		// envelope says what its message says, and Unavailable is
		// transient.
		out.Message, out.own = msg, true
		out.Retryable = out.Retryable || code == seam.CodeUnavailable
	}
	return r.v, out // the value too: adapters write a failed attempt's own response
}

// status asks the adapter whether err is one of its framework's own
// errors, and its canonical code.
func (x *execution) status(err error) (code uint32, message string, ok bool) {
	if x.call.Status == nil {
		return 0, "", false
	}
	return x.call.Status(err)
}

// stopped reports whether err says the handler stopped because its context
// ended: the context's own error, or a framework's cancel or deadline
// status (which does not wrap it).
func (x *execution) stopped(err error) bool {
	if isContextError(err) {
		return true
	}
	code, _, ok := x.status(err)
	return ok && (code == seam.CodeCanceled || code == seam.CodeDeadlineExceeded)
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// contextError classifies an attempt whose context ended: its own timer is
// TIMEOUT, anything else is the caller leaving.
func (x *execution) contextError(a *attempt) *Error {
	if context.Cause(a) == errAttemptTimeout {
		return &Error{Code: CodeTimeout, Message: fmt.Sprintf("attempt %d timed out after %s", a.n, x.cap.timeout), Retryable: true, Cause: errAttemptTimeout}
	}
	return x.cancelled()
}

// cancelled is the caller leaving. When its own deadline passed, the cause
// says so (context.DeadlineExceeded is in its chain) even under a custom
// cause: the wire reports it as every gRPC server does, DeadlineExceeded.
func (x *execution) cancelled() *Error {
	cause := context.Cause(x.ctx)
	if errors.Is(x.ctx.Err(), context.DeadlineExceeded) && !errors.Is(cause, context.DeadlineExceeded) {
		cause = fmt.Errorf("%w: %w", context.DeadlineExceeded, cause)
	}
	msg := "the caller cancelled the call"
	if errors.Is(cause, context.DeadlineExceeded) {
		msg = "the caller's deadline passed"
	}
	return &Error{Code: CodeCancelled, Message: msg, Cause: cause}
}

// finish is stage 6 and 7: the one place an envelope is built. The guard
// makes a second call impossible to go unnoticed.
func (x *execution) finish(v any, err *Error) (any, Envelope, error) {
	if !x.finalized.CompareAndSwap(false, true) {
		panic("agentsafe: execution " + x.id + " finalized twice")
	}
	env := Envelope{
		ExecutionID: x.id,
		Procedure:   x.proc(),
		Status:      StatusCompleted,
		Attempts:    int(x.attempts),
		Duration:    x.e.cfg.now().Sub(x.start),
		ApprovalID:  x.approvalID(),
	}
	code := CodeOK
	if err != nil {
		code = err.Code
		env.Status = code.Status()
		env.Error = &EnvelopeError{Code: code, Message: err.Message, Retryable: x.callerRetryable(err)}
		env.RetryAfter = err.retryAfter
		x.hint(&env)
	}
	x.settleBudgets()
	x.settleNoEffect()
	if x.consumed {
		x.recordOutcome(code)
	}
	if x.keyed != nil {
		env = x.settleKey(env, v, err)
	}
	if x.e.observed {
		x.emit(x.finalEvent(env, err))
	}
	if x.endTrace != nil {
		x.endTrace(env)
	}
	if err != nil {
		return v, env, err
	}
	return v, env, nil
}

// callerRetryable narrows a runtime-retryable error to "safe for the caller
// to re-invoke": a re-invocation runs under a new idempotency key, so it is
// safe when nothing ran yet, or for reads and declared-idempotent
// capabilities.
func (x *execution) callerRetryable(err *Error) bool {
	return err.Retryable && (x.attempts == 0 || !x.cap.SideEffect.WriteLike() || x.cap.Idempotent)
}

func (x *execution) finalEvent(env Envelope, err *Error) Event {
	ev := Event{Attempts: env.Attempts, Duration: env.Duration, ApprovalID: env.ApprovalID}
	if env.Replayed { // the stored result of another execution: nothing ran here
		ev = Event{Type: EventReplayed, ReplayOf: env.ExecutionID, Duration: x.e.cfg.now().Sub(x.start)}
		if env.Error != nil {
			ev.Code = env.Error.Code
		}
		return ev
	}
	switch env.Status {
	case StatusCompleted:
		ev.Type = EventCompleted
		return ev
	case StatusCancelled:
		ev.Type = EventCancelled
	default:
		ev.Type = EventFailed
	}
	ev.Code, ev.Retryable = env.Error.Code, env.Error.Retryable
	if err.Cause != nil {
		ev.Error = x.e.redact(err.Cause)
	}
	if p, ok := errors.AsType[*PanicError](err.Cause); ok {
		ev.Stack = string(p.Stack)
	}
	return ev
}

// emit fills the execution's common fields and hands ev to every sink's
// queue; the strict audit sink receives capability.requested and
// capability.started synchronously, and its error is returned: nothing may
// run on an event that was not recorded. A hidden call's requested goes
// through the queue instead: nothing runs, and the sink's failure must not
// tell the procedure exists.
func (x *execution) emit(ev Event) error {
	if !x.e.observed {
		return nil
	}
	ev.Time = x.e.cfg.now()
	ev.ExecutionID = x.id
	ev.Procedure = x.proc()
	ev.Actor = ref(x.actor)
	ev.InputDigest = x.eventDigest
	ev.SideEffect = x.cap.SideEffect
	ev.Risk = x.cap.Risk
	// A late attempt's abandoned_result is emitted from its own goroutine:
	// the lock keeps each execution's events queued in order.
	x.emitting <- struct{}{}
	defer func() { <-x.emitting }()
	if (ev.Type == EventRequested && !x.hidden) || ev.Type == EventStarted {
		return x.e.deliverAudited(x.sinkCtx, x.ctx, ev)
	}
	x.e.deliver(x.sinkCtx, ev)
	return nil
}
