package adapter

import (
	"context"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
)

// inProcessKey keys the marks a bridge sets on its in-process calls
// ([WithSurface], [WithCallerProbe]): one context value, so that a call
// looks them up once.
type inProcessKey struct{}

type inProcessMark struct {
	surface middleware.Surface
	probe   *callerProbe
}

// WithSurface marks the calls made with ctx, in process, as coming in on
// surface s, whatever adapter serves them: a bridge that turns its own
// requests into calls of another adapter (the MCP bridge calls Connect
// handlers in process, on SurfaceMCP) marks them through the request's
// context, never through a header a remote caller could send. [Execute],
// [ExecuteStream] and [Refuse] read the mark in place of [Call].Surface and
// take it off the context the handler sees, so calls the handler makes in
// turn are not marked. A zero s removes a mark.
func WithSurface(ctx context.Context, s middleware.Surface) context.Context {
	m, _ := ctx.Value(inProcessKey{}).(inProcessMark)
	m.surface = s
	return context.WithValue(ctx, inProcessKey{}, m)
}

// surfaceOf is s, or the surface ctx is marked with.
func surfaceOf(ctx context.Context, s middleware.Surface) uint8 {
	if m, ok := ctx.Value(inProcessKey{}).(inProcessMark); ok && m.surface != 0 {
		return uint8(m.surface)
	}
	return uint8(s)
}

// marked applies the in-process marks of ctx to a call of route r: it
// answers a caller probe of r's procedure and reports true (nothing may
// run then); otherwise it applies a surface mark to call and returns ctx
// without it.
func marked(ctx context.Context, r engineRoute, call *seam.Call) (context.Context, bool) {
	m, ok := ctx.Value(inProcessKey{}).(inProcessMark)
	if !ok {
		return ctx, false
	}
	if p := m.probe; p != nil && p.procedure == r.Procedure() {
		p.found(r.Actor(ctx))
		return ctx, true
	}
	if m.surface == 0 {
		return ctx, false
	}
	call.Surface = uint8(m.surface)
	m.surface = 0
	return context.WithValue(ctx, inProcessKey{}, m), false
}

// Hidden reports whether err, from [Execute], [ExecuteStream] or [Refuse],
// says the call must be answered exactly as the framework answers a
// procedure with no handler: a policy hid it, or it came in on a surface
// its capability is not exposed on. The adapter then writes its
// framework's not-found response and nothing else — no envelope headers,
// no detail — as a procedure that does not exist would get: gRPC and
// Connect's Unimplemented, Twirp's bad_route, the mux's 404, the MCP SDK's
// unknown-tool error.
func Hidden(err error) bool { return err != nil && seam.Hidden(err) }

// Absent decides, for a call the adapter has read nothing of yet, whether
// it must be answered exactly as its framework answers a procedure it does
// not have (SPEC §3 stage 2.0): the route's capability is not exposed on
// surface s (a mark of ctx, [WithSurface], takes its place), or a policy
// hides it when asked as at a listing — no input, and the zero actor when
// the engine's actor function fails on ctx. When it reports true, the
// engine has recorded the call (capability.requested and its failure,
// through the sinks' queues, the strict audit sink's too), and the adapter
// writes its framework's not-found answer and nothing else, without
// reading the call's headers or body: no malformed header, undecodable
// body or expired deadline can then tell the procedure exists. Otherwise
// nothing is recorded, and the call goes on to [Execute], which decides
// again on the context it has then (an interceptor's, say, where
// authentication added what the actor function needs). A route without
// a capability is never absent.
//
// It is what an adapter's guard calls where its framework decodes a
// request before any interceptor runs (connect-go's handlers, grpc-go's
// method handlers, Twirp's generated server) or reads it before the
// engine (a net/http body).
func (r Route) Absent(ctx context.Context, s middleware.Surface) bool {
	if r.r == nil {
		return false
	}
	return r.r.Absent(ctx, surfaceOf(ctx, s))
}

// Hides reports what [Route.Absent] would decide for a call of the route
// by the caller of ctx, and records nothing: for an adapter that must know
// whether a procedure other than the one a request calls is hidden from
// its caller, such as a mux that lists in a 405's Allow only the methods
// of the patterns its caller may see.
func (r Route) Hides(ctx context.Context, s middleware.Surface) bool {
	if r.r == nil {
		return false
	}
	return r.r.Hides(ctx, surfaceOf(ctx, s))
}

// Listed reports whether the route's capability is listed as a tool on
// surface s for the caller of ctx (the actor the engine's actor function
// finds in ctx): it is exposed on s, and no policy hides it when asked with
// Listing set. A policy's error leaves it out. A route without a
// capability is never listed.
func (r Route) Listed(ctx context.Context, s middleware.Surface) bool {
	return r.r != nil && r.r.Listed(ctx, uint8(s))
}
