package connectadapter

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
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

// New builds an engine from reg and opts (see [middleware.New]) and returns
// an interceptor around it. Every problem fails here, all at once: those
// with the capability metadata, from the registry or from the method options
// of the registered descriptors, in a *[middleware.ValidationError] naming
// procedure and field.
// The engine knows which procedures stream from their descriptors, so a Go
// entry requiring approval for a stream fails here even when its method
// carries no option.
func New(reg *middleware.Registry, opts ...middleware.Option) (*Interceptor, error) {
	eng, err := middleware.New(reg, opts...)
	if err != nil {
		return nil, err
	}
	return NewInterceptor(eng), nil
}

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
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		if !i.eng.Governs(spec.Procedure) {
			if err := undeclared(spec); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}
		return i.unary(ctx, req, next)
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
		spec := conn.Spec()
		if spec.IsClient {
			return next(ctx, conn)
		}
		if !i.eng.Governs(spec.Procedure) {
			if err := undeclared(spec); err != nil {
				return err
			}
			return next(ctx, conn)
		}
		return i.stream(ctx, conn, next)
	}
}

// undeclared fails closed, with Internal, when a procedure the engine does
// not govern declares a capability in its method descriptor: the engine
// has never seen that descriptor (it is not in protoregistry.GlobalFiles;
// a linked one the engine was not built with is governed, and refused with
// CAPABILITY_NOT_FOUND by the engine), and serving the method ungoverned
// would silently drop what its .proto file promises. The option is not
// read or validated here; only its presence is checked.
func undeclared(spec connect.Spec) error {
	md, ok := spec.Schema.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil || !proto.HasExtension(opts, agentsafev1.E_Capability) {
		return nil
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf(
		"agentsafe: %s declares a capability option that the engine was not built with; build it with middleware.WithProtoFiles holding the method's file, or register the procedure",
		spec.Procedure))
}
