package adapter

import (
	"context"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Route is what an engine says about one procedure, resolved once per
// call ([Resolve]): whether the call is governed, its capability, and the
// decisions that depend on it. The zero Route governs nothing.
type Route struct{ r engineRoute }

// engineRoute is the engine's side of a Route: an unexported type of
// package middleware, reached through internal/seam.
type engineRoute interface {
	Governed() bool
	Procedure() string
	Capability() (middleware.Capability, bool)
	MayRetry() bool
	// StoresResults reports whether the engine stores results, which is
	// when an execution needs the adapter's codec.
	StoresResults() bool
	// The call goes by value: an interface call would move a pointer to
	// it to the heap, once per call.
	Execute(ctx context.Context, call seam.Call) (any, middleware.Envelope, error)
	ExecuteStream(ctx context.Context, call seam.Call, fn func(context.Context) error) (middleware.Envelope, error)
	Refuse(ctx context.Context, call seam.Call, err *middleware.Error) (middleware.Envelope, error)
	Listed(ctx context.Context, surface uint8) bool
	Actor(ctx context.Context) (middleware.Actor, error)
	Absent(ctx context.Context, surface uint8) bool
	Hides(ctx context.Context, surface uint8) bool
}

// Resolve returns e's route for procedure: "/package.Service/Method" for
// RPC frameworks (Twirp's path prefix stripped), the registered name for
// net/http routes. It is stage 1 of the pipeline, once per call, and
// allocates nothing for a governed procedure. It panics if e is nil: a
// missing engine must not silently leave procedures ungoverned.
func Resolve(e *middleware.Engine, procedure string) Route {
	if e == nil {
		panic("agentsafe/adapter: Resolve needs a non-nil *middleware.Engine")
	}
	r, _ := seam.Resolve(e, procedure).(engineRoute)
	return Route{r}
}

// Governed reports whether a call ends in an envelope: the procedure has a
// capability; or its linked descriptor declares one the engine was not
// built with, or the engine is strict (middleware.WithStrict) and the
// procedure is not exempt — those calls are refused with
// CAPABILITY_NOT_FOUND. Adapters pass other calls straight to the handler
// ([Execute] does so too).
func (r Route) Governed() bool { return r.r != nil && r.r.Governed() }

// Procedure returns the procedure the route was resolved for.
func (r Route) Procedure() string {
	if r.r == nil {
		return ""
	}
	return r.r.Procedure()
}

// Capability returns the capability governing the route, with its defaults
// resolved (Timeout, Retry.Backoff and Approval.ExpiresIn filled in); false
// when there is none.
func (r Route) Capability() (middleware.Capability, bool) {
	if r.r == nil {
		return middleware.Capability{}, false
	}
	return r.r.Capability()
}

// MayRetry reports whether an execution of the route may run more than one
// attempt: then the first attempt may use the call's input, and every later
// one needs its own copy of a snapshot taken before the first (a
// handler may mutate its input, and an abandoned attempt may still run).
// When it is false, no copy is needed.
func (r Route) MayRetry() bool { return r.r != nil && r.r.MayRetry() }

// Procedure returns the procedure name of a method, as the engine and the
// RPC adapters name it: "/package.Service/Method".
func Procedure(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}
