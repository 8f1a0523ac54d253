package middleware

import "context"

// Tracer observes executions and their attempts from the inside, with a
// context of their own, which an [EventSink] cannot: events are reported
// after the fact, while a tracer's context is the one the work runs in.
// Package agentsafeotel implements it with OpenTelemetry spans; install one
// with [WithTracer].
//
// The engine calls StartExecution when it opens an execution (stage 2, after
// the actor and the input digest are known): the context it returns is the
// one the approval gate, the store calls, the events of the execution and
// every attempt derive from. It calls StartAttempt with that context before
// each attempt: the context it returns becomes the PARENT of the attempt's
// timeout context, so what the tracer puts there (a span) is what the
// handler's own spans nest under, while the attempt's deadline and its
// classification (TIMEOUT or CANCELLED) stay the engine's.
//
// Both must return a context derived from the one given that only adds
// values: a tracer that cancels or replaces it changes the execution's
// semantics. A nil context keeps the one given; a nil end function is never
// called. They run synchronously on the execution's goroutine, so they must
// be fast and must not panic.
//
// A Tracer that also implements [EventSink] receives every event, on the
// execution's goroutine, in the execution's (traced) context, before the
// event sinks' queues do: a span can carry the events of its execution.
//
// The end functions are called exactly once each, on the execution's
// goroutine: an attempt's when the engine has its outcome, which for an
// attempt abandoned at its deadline is TIMEOUT (or CANCELLED) while the
// handler may still be running; the execution's once its envelope is
// built, after the final event was delivered to the sinks. An execution
// refused before any attempt (approval required, unauthenticated, caller
// gone) ends with no attempt started.
type Tracer interface {
	StartExecution(ctx context.Context, x ExecutionInfo) (context.Context, func(Envelope))
	StartAttempt(ctx context.Context, attempt int) (context.Context, func(AttemptOutcome))
}

// ExecutionInfo is what a [Tracer] learns when an execution opens. Like an
// event, it carries ids and the input digest, never a payload.
type ExecutionInfo struct {
	ID        string
	Procedure string
	Actor     ActorRef
	// InputDigest is keyed (HMAC) when the engine has a digest key, as on
	// events; empty when the call has no input or the input cannot be bound.
	InputDigest string
	SideEffect  SideEffect
	Risk        Risk
	// Streaming is true for a streaming call (adapter.ExecuteStream).
	Streaming bool
}

// AttemptOutcome is how one attempt ended, as the engine classified it.
type AttemptOutcome struct {
	// Code is CodeOK when the attempt succeeded.
	Code Code
	// Retryable is the engine's runtime classification of the failure: a
	// further attempt would have been allowed by the error (the capability
	// and the remaining budget decide whether one is made).
	Retryable bool
	// Abandoned means the engine stopped waiting at the attempt's deadline
	// or the caller's cancellation; the handler may still be running.
	Abandoned bool
}

// WithTracer installs t (see [Tracer]); the last one given wins and nil
// removes it. By default there is none, and the engine neither calls nor
// allocates anything for tracing.
func WithTracer(t Tracer) Option {
	return optionFunc(func(c *config) { c.tracer = t })
}

// startTracing opens the execution's tracing context, when a tracer is set.
func (x *execution) startTracing(streaming bool) {
	t := x.e.cfg.tracer
	if t == nil {
		return
	}
	ctx, end := t.StartExecution(x.ctx, ExecutionInfo{
		ID:          x.id,
		Procedure:   x.proc(),
		Actor:       ref(x.actor),
		InputDigest: x.eventDigest,
		SideEffect:  x.cap.SideEffect,
		Risk:        x.cap.Risk,
		Streaming:   streaming,
	})
	if ctx != nil {
		x.ctx = ctx
	}
	x.endTrace = end
}

// attemptParent returns the context an attempt's timeout context derives
// from: the execution's, or the tracer's attempt context inside it.
func (x *execution) attemptParent(a *attempt) context.Context {
	a.endTrace = nil
	t := x.e.cfg.tracer
	if t == nil {
		return x.ctx
	}
	ctx, end := t.StartAttempt(x.ctx, a.n)
	a.endTrace = end
	if ctx == nil {
		return x.ctx
	}
	return ctx
}

// traceEnd reports an attempt's outcome to the tracer, once.
func (a *attempt) traceEnd(err *Error) {
	end := a.endTrace
	if end == nil {
		return
	}
	a.endTrace = nil
	out := AttemptOutcome{Code: CodeOK, Abandoned: a.abandoned}
	if err != nil {
		out.Code, out.Retryable = err.Code, err.Retryable
	}
	end(out)
}
