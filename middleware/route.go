package middleware

import (
	"context"
	"errors"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// route is the engine's answer for one procedure, resolved once per call
// by the adapter SPI (package middleware/adapter, through internal/seam):
// whether the engine governs it, with which capability, and the rules that
// depend on it. Its methods are exported for the SPI's interface, never
// reachable from this package's API.
type route struct {
	e    *Engine
	proc string
	cap  *capability // nil: ungoverned, or governed without a capability (refused)
	// governed: the call ends in an envelope.
	governed bool
}

func init() {
	seam.Resolve = func(engine any, procedure string) any {
		e, _ := engine.(*Engine)
		if e == nil {
			return nil
		}
		return e.route(procedure)
	}
	seam.Hidden = func(err error) bool {
		e, ok := errors.AsType[*Error](err)
		return ok && e.hidden
	}
	seam.HandlerError = func(err error) (error, bool) {
		if e, ok := errors.AsType[*Error](err); ok && e.own {
			return e.Cause, true
		}
		return nil, false
	}
}

// route returns the route of procedure: precomputed for every capability,
// so resolving a governed call allocates nothing.
func (e *Engine) route(procedure string) *route {
	if c, ok := e.caps[procedure]; ok {
		return c.route
	}
	return &route{e: e, proc: procedure, governed: e.governs(procedure)}
}

func (r *route) Governed() bool    { return r.governed }
func (r *route) Procedure() string { return r.proc }

func (r *route) Capability() (Capability, bool) {
	if r.cap == nil {
		return Capability{}, false
	}
	return r.cap.resolved(), true
}

// MayRetry reports whether an execution may run more than one attempt, so
// that every attempt after the first needs its own pristine copy of the
// input: the cloning decision, made here once for every adapter.
func (r *route) MayRetry() bool { return r.cap != nil && r.cap.retryAllowed() }

// StoresResults reports whether the engine stores results: only then does
// an execution use the adapter's codec.
func (r *route) StoresResults() bool { return r.e.cfg.results != nil }

func (r *route) Execute(ctx context.Context, call seam.Call) (any, Envelope, error) {
	if !r.governed {
		v, err := call.Attempt.RunAttempt(ctx)
		return v, Envelope{}, err
	}
	return r.e.execute(ctx, r.proc, r.cap, call)
}

func (r *route) ExecuteStream(ctx context.Context, call seam.Call, fn func(context.Context) error) (Envelope, error) {
	if !r.governed {
		return Envelope{}, fn(ctx)
	}
	return r.e.executeStream(ctx, r.proc, r.cap, call, fn)
}

func (r *route) Refuse(ctx context.Context, call seam.Call, err *Error) (Envelope, error) {
	if !r.governed {
		if err == nil {
			return Envelope{}, nil
		}
		return Envelope{}, err
	}
	return r.e.refuse(ctx, r.proc, r.cap, call, err)
}

// Actor returns the caller of ctx as the engine's actor function finds
// it (see Engine.actorOf).
func (r *route) Actor(ctx context.Context) (Actor, error) { return r.e.actorOf(ctx) }

// Absent decides stage 2.0 for a call its adapter has read nothing of
// yet (see Engine.absent).
func (r *route) Absent(ctx context.Context, s uint8) bool {
	return r.cap != nil && r.e.absent(ctx, r.proc, r.cap, Surface(s), true)
}

// Hides is Absent for a call that is not made: nothing is recorded.
func (r *route) Hides(ctx context.Context, s uint8) bool {
	return r.cap != nil && r.e.absent(ctx, r.proc, r.cap, Surface(s), false)
}

// Listed reports whether the route's capability is listed as a tool on
// surface s for the caller of ctx (see Engine.listed).
func (r *route) Listed(ctx context.Context, s uint8) bool {
	return r.cap != nil && r.e.listed(ctx, r.proc, r.cap, Surface(s))
}
