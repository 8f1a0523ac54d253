package connectadapter

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// Interceptor is the handler-side [connect.Interceptor] that governs the
// procedures its engine knows. Install it with one
// connect.WithInterceptors(i) on a handler or on every handler of a service.
// It is safe for concurrent use. On a client it does nothing: use
// [ClientInterceptor] there.
type Interceptor struct {
	eng *middleware.Engine
}

var _ connect.Interceptor = (*Interceptor)(nil)

// NewInterceptor returns an interceptor around an engine built with
// [middleware.New]. It panics if eng is nil: a missing engine must not
// silently leave procedures ungoverned.
func NewInterceptor(eng *middleware.Engine) *Interceptor {
	if eng == nil {
		panic("connectadapter: NewInterceptor needs a non-nil *middleware.Engine")
	}
	return &Interceptor{eng: eng}
}

// Engine returns the interceptor's engine, for listing capabilities and
// deciding approvals.
func (i *Interceptor) Engine() *middleware.Engine { return i.eng }

// WrapUnary implements [connect.Interceptor]: a governed unary call runs the
// whole pipeline, with runtime retries where the capability allows them.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		route := adapter.Resolve(i.eng, req.Spec().Procedure)
		if !route.Governed() {
			return next(ctx, req)
		}
		return unary(ctx, route, req, next)
	}
}

// WrapStreamingClient implements [connect.Interceptor] with a no-op.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements [connect.Interceptor]: a governed stream
// runs once, synchronously, with ids in its response headers before the
// first message and the envelope in its trailers; it is never retried.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().IsClient {
			return next(ctx, conn)
		}
		route := adapter.Resolve(i.eng, conn.Spec().Procedure)
		if !route.Governed() {
			return next(ctx, conn)
		}
		return stream(ctx, route, conn, next)
	}
}

// status is the adapter's one function from Connect's errors to codes
// ([adapter.Call].Status): a *connect.Error anywhere in err's chain, one a
// handler returned or one Connect raised, is Connect's own, with its code
// and the message Connect sends.
func status(err error) (code uint32, message string, ok bool) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return 0, "", false
	}
	return uint32(ce.Code()), ce.Message(), true
}
