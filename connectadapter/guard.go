package connectadapter

import (
	"net/http"

	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// Guard wraps the (path, handler) pair of a generated service handler so
// that a call the engine hides gets exactly what connect-go's service
// handler sends for a procedure it does not have: http.NotFound's 404,
// byte for byte, in the Connect, gRPC and gRPC-Web protocols alike. It
// returns path unchanged, so it goes around the generated constructor in
// the line that mounts it:
//
//	interceptor := connectadapter.NewInterceptor(eng)
//	mux.Handle(interceptor.Guard(ordersv1connect.NewOrderServiceHandler(svc,
//		connect.WithInterceptors(interceptor))))
//
// connect-go decodes a unary request before any interceptor runs, so
// without the guard an interceptor can only answer a hidden call once its
// body decoded: an undecodable body gets InvalidArgument, a request
// Connect refuses (a wrong method or content type) its 405 or 415, and a
// hidden call Unimplemented with Connect's own body where a procedure
// that does not exist gets the plain 404. The guard decides first, on the
// request's path and context, before the body, any header or the
// deadline is read (adapter.Route.Absent): the capability is not exposed
// on rpc, or a policy hides it when asked as at a listing. It sees the
// request's context, not what interceptors add to it later, so the
// engine's actor function must find the caller there (put authentication
// in HTTP middleware around the handler, or read the credentials in the
// actor function itself); hiding that depends on what an interceptor
// adds, or on the input, is decided by the interceptor after decoding.
// Calls it does not hide go to h untouched. It panics if h is nil.
func (i *Interceptor) Guard(path string, h http.Handler) (string, http.Handler) {
	if h == nil {
		panic("connectadapter: Guard needs the service's http.Handler")
	}
	return path, guard{i: i, next: h}
}

type guard struct {
	i    *Interceptor
	next http.Handler
}

// ServeHTTP answers a hidden call as the generated handler answers a
// procedure it does not have, and hands every other call on. The
// procedure is the path, as connect-go routes it.
func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if adapter.Resolve(g.i.eng, r.URL.Path).Absent(r.Context(), adapter.SurfaceRPC) {
		http.NotFound(w, r)
		return
	}
	g.next.ServeHTTP(w, r)
}
