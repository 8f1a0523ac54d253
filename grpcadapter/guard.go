package grpcadapter

import (
	"context"
	"slices"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/grpc"
)

// Guard returns a grpc.ServiceRegistrar that registers services with r,
// each method the engine governs wrapped so that a call the engine hides
// gets exactly what grpc-go answers for a method the service does not
// have — Unimplemented, "unknown method M for service S", no metadata —
// before grpc-go decodes its request. Register services through it:
//
//	srv := grpc.NewServer(grpcadapter.ServerOptions(eng)...)
//	ordersv1.RegisterOrderServiceServer(grpcadapter.Guard(eng, srv), svc)
//
// grpc-go decodes a unary request (the handler's dec) before any
// interceptor runs, so without the guard an interceptor can only answer a
// hidden call once its body decoded: an undecodable one gets Internal.
// The guard decides first, in the method's handler, before dec and before
// the interceptors (adapter.Route.Absent): the capability is not exposed
// on rpc, or a policy hides it when asked as at a listing. It sees the
// call's context as grpc-go made it — the incoming metadata and the peer,
// not what an interceptor adds later — so the engine's actor function must
// work from the metadata for the guard to hide by actor; hiding that
// depends on what an authentication interceptor adds, or on the input, is
// decided by the interceptor after decoding. A method the engine does not
// govern is registered untouched, and so are streams: grpc-go runs the
// stream interceptors before a stream's handler, and a stream's request is
// decoded only once its handler reads it, so [StreamServerInterceptor]
// already decides before anything is read (list it before interceptors of
// yours that could refuse a call, such as authentication: grpc-go runs no
// interceptor for a method it does not have).
//
// It is a registrar, not a server option: grpc.InTapHandle is
// experimental, allows one handle per server, and runs on the
// connection's reader goroutine, before the stream has a context to ask
// the actor function with. Guard panics if eng or r is nil.
func Guard(eng *middleware.Engine, r grpc.ServiceRegistrar) grpc.ServiceRegistrar {
	mustEngine(eng)
	if r == nil {
		panic("grpcadapter: Guard needs a grpc.ServiceRegistrar (a *grpc.Server)")
	}
	return registrar{eng: eng, next: r}
}

type registrar struct {
	eng  *middleware.Engine
	next grpc.ServiceRegistrar
}

// RegisterService registers a copy of desc whose governed unary methods'
// handlers ask first whether the call is absent.
func (g registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i, m := range d.Methods {
		proc := "/" + desc.ServiceName + "/" + m.MethodName
		route := adapter.Resolve(g.eng, proc)
		if _, ok := route.Capability(); !ok {
			continue
		}
		next := m.Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			if route.Absent(ctx, adapter.SurfaceRPC) {
				return nil, absent(proc)
			}
			return next(srv, ctx, dec, interceptor)
		}
	}
	g.next.RegisterService(&d, impl)
}
