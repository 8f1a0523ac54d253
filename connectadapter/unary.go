package connectadapter

import (
	"context"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/protobuf/proto"
)

// unaryCall is one governed unary call: what every attempt of it needs.
type unaryCall struct {
	next connect.UnaryFunc
	req  connect.AnyRequest
	// snapshot is a pristine copy of the request message, taken before the
	// first attempt when the capability may retry; every attempt after the
	// one that takes req clones it. Nil when there is nothing to clone.
	snapshot proto.Message
	// taken is set by the first attempt to run, which gets req itself.
	taken atomic.Bool
	// frame is the framework's CallInfo of the call, or nil.
	frame connect.CallInfo
}

func (i *Interceptor) unary(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	procedure := req.Spec().Procedure
	u := &unaryCall{next: next, req: req}
	u.frame, _ = connect.CallInfoForHandlerContext(ctx)
	call := middleware.Call{Procedure: procedure, ApprovalID: req.Header().Get(middleware.HeaderApprovalID)}
	if msg, ok := req.Any().(proto.Message); ok {
		// The engine reads the input (digest, approval) before any attempt
		// starts, so the original message is safe to bind.
		call.Input = middleware.ProtoInput(msg)
		if c, _ := i.eng.Lookup(procedure); c.Retry.MaxRetries > 0 {
			u.snapshot = proto.Clone(msg)
		}
	}
	v, env, err := i.eng.Execute(ctx, call, u.attempt)
	if err != nil {
		if ae, ok := asAttemptError(err); ok {
			u.commit(ae.sink) // the reported attempt returned: its headers are final
		}
		werr := wireError(err, env)
		setEnvelope(u.header(nil, werr), env)
		return nil, werr
	}
	var res connect.AnyResponse
	switch r := v.(type) {
	case *attemptContext:
		u.commit(&r.info)
		res = r.res
	case connect.AnyResponse:
		res = r
	}
	if res != nil {
		// Connect sends the response's own headers and trailers too.
		dropEnvelope(res.Header())
		dropEnvelope(res.Trailer())
	}
	setEnvelope(u.header(res, nil), env)
	return res, nil
}

// attempt runs one attempt of the handler with its own request message and
// its own response header and trailer sink.
func (u *unaryCall) attempt(ctx context.Context) (any, error) {
	req := u.req
	if !u.taken.CompareAndSwap(false, true) && u.snapshot != nil {
		req = withMessage(u.req, proto.Clone(u.snapshot))
	}
	if u.frame == nil {
		res, err := u.next(ctx, req)
		if err != nil {
			return nil, declare(ctx, err, nil)
		}
		return res, nil
	}
	a := &attemptContext{Context: ctx, frame: u.frame, info: attemptCallInfo{CallInfo: u.frame}}
	res, err := u.next(a, req)
	if err != nil {
		return nil, declare(ctx, err, &a.info)
	}
	a.res = res
	return a, nil
}

// commit copies the finalized attempt's response headers and trailers into
// the framework's, on the serving goroutine, once the attempt has returned,
// without the envelope's keys, which are the engine's alone.
func (u *unaryCall) commit(sink *attemptCallInfo) {
	if sink == nil || u.frame == nil {
		return
	}
	dropEnvelope(sink.header)
	dropEnvelope(sink.trailer)
	merge(u.frame.ResponseHeader(), sink.header)
	merge(u.frame.ResponseTrailer(), sink.trailer)
}

// header returns where the envelope's headers go: the framework's response
// headers, which Connect sends on success and on error in every protocol;
// without a CallInfo (only if connect ever stops providing one), the
// response's headers or the error's metadata.
func (u *unaryCall) header(res connect.AnyResponse, err *connect.Error) http.Header {
	switch {
	case u.frame != nil:
		return u.frame.ResponseHeader()
	case err != nil:
		return err.Meta()
	default:
		return res.Header()
	}
}

func merge(into, from http.Header) {
	for k, vs := range from {
		into[k] = append(into[k], vs...)
	}
}
