package middleware

import (
	"context"
	"runtime/debug"
)

// StreamFunc runs a streaming handler once, on the caller's goroutine.
type StreamFunc func(ctx context.Context) error

// ExecuteStream governs a streaming call. A stream cannot be abandoned or
// replayed, so it runs synchronously on the caller's goroutine: one attempt,
// never retried, no approval and no digest; a timeout only if the capability
// sets one explicitly, and then it only cancels the context. ids are
// available to fn through [ExecutionFromContext] before the first message,
// and the execution still ends in exactly one envelope and final event.
//
// A procedure the engine does not govern passes through with a zero
// envelope, as in [Engine.Execute].
func (e *Engine) ExecuteStream(ctx context.Context, call Call, fn StreamFunc) (Envelope, error) {
	if fn == nil {
		return Envelope{}, &Error{Code: CodeInvalidArgument, Message: "agentsafe: ExecuteStream needs a non-nil StreamFunc"}
	}
	c, ok := e.caps[call.Procedure]
	if !ok && !e.Governs(call.Procedure) {
		return Envelope{}, fn(ctx)
	}
	call.Input = nil // a stream's input is not one message: nothing is bound
	if !ok {
		c = &capability{procedure: call.Procedure}
	}
	x := e.open(ctx, call, c, true)
	_, env, err := x.finish(nil, x.runStream(ok, fn))
	reraiseAbort(err)
	return env, err
}

func (x *execution) runStream(governed bool, fn StreamFunc) *Error {
	if !governed {
		x.requested()
		return x.e.notFound(x.call.Procedure)
	}
	if x.cap.Approval.Required {
		x.requested()
		// Validation refuses this for procedures known to stream; a registry
		// entry the engine could not check still fails closed.
		return &Error{Code: CodeInvalidArgument, Message: "a streaming call cannot be gated by an approval: " + x.call.Procedure}
	}
	x.call.ApprovalID = ""
	if err := x.admit(); err != nil {
		return err
	}
	a := &x.first
	a.x, a.n = x, 1
	parent := x.attemptParent(a)
	if t := x.cap.explicitTimeout; t > 0 {
		a.Context, a.cancel = context.WithTimeoutCause(parent, t, errAttemptTimeout)
	} else {
		a.Context, a.cancel = context.WithCancel(parent)
	}
	defer a.cancel()
	x.attempts = 1
	x.emit(Event{Type: EventStarted, Attempt: 1})
	var r attemptResult
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.panic = &PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		r.err = fn(a)
		r.ctxEnded = a.Err() != nil
	}()
	_, err := x.settle(a, r)
	a.traceEnd(err)
	return err
}
