package middleware

import (
	"context"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// executeStream governs a streaming call (see route.ExecuteStream): one
// attempt on the caller's goroutine, never retried, no approval and no
// digest; a timeout only if the capability sets one explicitly.
func (e *Engine) executeStream(ctx context.Context, proc string, c *capability, call seam.Call, fn func(context.Context) error) (Envelope, error) {
	// A stream's input is not one message: nothing is bound, and no
	// approval can be presented.
	x := e.open(ctx, proc, seam.Call{Surface: call.Surface, Status: call.Status}, c, true)
	_, env, err := x.finish(nil, x.runStream(c != nil, fn))
	return env, err
}

func (x *execution) runStream(governed bool, fn func(context.Context) error) *Error {
	if !governed {
		x.requested()
		return x.e.notFound(x.proc())
	}
	if err := x.admit(); err != nil {
		return err
	}
	if err := x.unaudited(x.emit(Event{Type: EventStarted, Attempt: 1})); err != nil {
		return err // no attempt started (nor its span): nothing ran
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
	_, err := x.settle(a, a.runHere(streamAttempt(fn)))
	a.traceEnd(err)
	return err
}

// streamAttempt runs a stream's handler as an attempt with no value.
type streamAttempt func(context.Context) error

func (f streamAttempt) RunAttempt(ctx context.Context) (any, error) { return nil, f(ctx) }
