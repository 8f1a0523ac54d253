package adapter

import (
	"context"

	"github.com/agentsafe/agentsafe/middleware"
)

// callerProbe is the mark [WithCallerProbe] sets.
type callerProbe struct {
	procedure string
	found     func(middleware.Actor, error)
}

// errProbed is what [Execute], [ExecuteStream] and [Refuse] return for a
// caller probe: the adapter writes it as any refusal, and nothing ran.
var errProbed = &middleware.Error{Code: middleware.CodeInvalidArgument, Message: "agentsafe: a caller probe runs nothing"}

// WithCallerProbe marks the call of procedure made with ctx, in process,
// as a question rather than a call: who is its caller? [Execute],
// [ExecuteStream] and [Refuse] answer it by calling found with the actor
// the engine's actor function finds in the context the adapter hands them
// — after the service's own authentication, exactly as for a call of the
// procedure — or with that function's error, and return at once with an
// error the adapter writes as any refusal: nothing runs, no execution is
// opened, no event is emitted. found is not called when the call never
// reaches the engine (the service refused it first).
//
// A bridge asks before it hands a caller what belongs to one actor only:
// the MCP bridge opens the arguments kept with an approval for its
// requester alone, and learns who asks by sending the procedure an empty
// request marked so. Like [WithApprovalMark], the mark is a value of the
// request's context, which only code in the same process can set; calls of
// other procedures made with ctx ignore it.
func WithCallerProbe(ctx context.Context, procedure string, found func(middleware.Actor, error)) context.Context {
	m, _ := ctx.Value(inProcessKey{}).(inProcessMark)
	m.probe = nil
	if found != nil {
		m.probe = &callerProbe{procedure: procedure, found: found}
	}
	return context.WithValue(ctx, inProcessKey{}, m)
}
