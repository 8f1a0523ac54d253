package twirpadapter

import (
	"context"
	"net/http"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/twitchtv/twirp"
)

// TwirpServer is the method set of every Twirp-generated server (each
// generated package declares it under that name), so [Wrap] accepts the
// server of any service and [Server] can stand in for it.
type TwirpServer interface {
	http.Handler
	ServiceDescriptor() ([]byte, int)
	ProtocGenTwirpVersion() string
	PathPrefix() string
}

// Server is a Twirp server governed by an engine. It satisfies the
// TwirpServer interface of every generated package, so it mounts and routes
// like the server it wraps:
//
//	mux.Handle(srv.PathPrefix(), srv)
type Server struct {
	inner           TwirpServer
	eng             *middleware.Engine
	prefix, service string
}

// Wrap builds a Twirp server governed by eng, in one call that wraps the
// generated constructor: newServer receives the server options to pass on
// to it, agentsafe's interceptor among them.
//
//	srv := twirpadapter.Wrap(eng, func(opts ...any) orderv1.TwirpServer {
//		return orderv1.NewOrderServiceServer(svc, opts...)
//	})
//
// The returned server also makes the request headers agentsafe reads
// (Agentsafe-Approval-Id) and the response headers it writes visible to the
// interceptor, which Twirp alone does not. Options given with
// [WithServerOptions] are passed first, so agentsafe's interceptor runs
// inside every interceptor of yours: an authentication interceptor runs
// before the engine's actor function. Wrap's options add a
// RequestReceived hook to yours, run after them: the guard that answers a
// hidden call with bad_route before Twirp reads its body (see the package
// documentation).
//
// Wrap panics if eng or newServer is nil, if newServer does not pass the
// options on (the service would run ungoverned without anyone noticing),
// or if an option it passes after Wrap's replaces the server's hooks (the
// guard would be gone without anyone noticing: pass hooks with
// WithServerOptions).
func Wrap[S TwirpServer](eng *middleware.Engine, newServer func(opts ...any) S, opts ...Option) *Server {
	if eng == nil || newServer == nil {
		panic("twirpadapter: Wrap needs an engine and a server constructor")
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	var options *twirp.ServerOptions
	var hooks *twirp.ServerHooks
	ours := twirp.ServerOption(func(o *twirp.ServerOptions) {
		options = o
		twirp.WithServerInterceptors(interceptor(eng))(o)
		// The guard runs last of the RequestReceived hooks: after yours
		// (authentication, say), before Twirp reads the body.
		o.Hooks = twirp.ChainHooks(o.Hooks, &twirp.ServerHooks{RequestReceived: guard})
		hooks = o.Hooks
	})
	inner := newServer(append(cfg.serverOpts, ours)...)
	switch {
	case options == nil:
		panic("twirpadapter: the constructor given to Wrap must pass its options to the generated New…Server function")
	case options.Hooks != hooks:
		panic("twirpadapter: an option passed after Wrap's replaced its server hooks, and with them the guard that answers hidden calls as absent; pass hooks with WithServerOptions")
	}
	// "/twirp/package.Service/": the prefix of its methods' paths.
	prefix := inner.PathPrefix()
	service := strings.TrimSuffix(prefix, "/")
	return &Server{inner: inner, eng: eng, prefix: prefix, service: service[strings.LastIndex(service, "/")+1:]}
}

// wire is what the interceptor and the guard need of the HTTP exchange
// and Twirp does not show them: the request's headers, and the
// response's; the request's method and path, for a hidden call's
// bad_route; and the route of the method the request is for, when Twirp
// will route it to one.
type wire struct {
	req, resp    http.Header
	method, path string
	route        adapter.Route
}

type wireKey struct{}

// ServeHTTP makes the request's and the response's headers visible to the
// interceptor, then serves the request with the wrapped server.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &wire{req: r.Header, resp: w.Header(), method: r.Method, path: r.URL.Path}
	// What Twirp routes to a method: a POST of the server's prefix and a
	// method name. Anything else Twirp refuses as it does for a method it
	// does not have.
	if name, ok := strings.CutPrefix(r.URL.Path, s.prefix); ok && r.Method == http.MethodPost && name != "" && !strings.Contains(name, "/") {
		x.route = adapter.Resolve(s.eng, "/"+s.service+"/"+name)
	}
	s.inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), wireKey{}, x)))
}

// guard is the last RequestReceived hook of a wrapped server: a call the
// engine hides (adapter.Route.Absent) gets Twirp's bad_route for a path
// it has no handler for, written by Twirp itself with your Error and
// ResponseSent hooks called as for such a path, before Twirp reads the
// body.
func guard(ctx context.Context) (context.Context, error) {
	if w, ok := ctx.Value(wireKey{}).(*wire); ok && w.route.Absent(ctx, adapter.SurfaceRPC) {
		return ctx, absent(w)
	}
	return ctx, nil
}

// PathPrefix returns the wrapped server's path prefix, for routing.
func (s *Server) PathPrefix() string { return s.inner.PathPrefix() }

// ServiceDescriptor returns the wrapped server's service descriptor.
func (s *Server) ServiceDescriptor() ([]byte, int) { return s.inner.ServiceDescriptor() }

// ProtocGenTwirpVersion returns the protoc-gen-twirp version of the wrapped
// server.
func (s *Server) ProtocGenTwirpVersion() string { return s.inner.ProtocGenTwirpVersion() }

// Option configures [Wrap].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	serverOpts []any // twirp.ServerOption values, as generated constructors take them
}

// WithServerOptions passes Twirp server options (hooks, interceptors, path
// prefix, JSON settings) to the generated constructor, ahead of agentsafe's
// interceptor. By default only agentsafe's interceptor is passed. Nil
// options are ignored.
func WithServerOptions(opts ...twirp.ServerOption) Option {
	return optionFunc(func(c *config) {
		for _, o := range opts {
			if o != nil {
				c.serverOpts = append(c.serverOpts, o)
			}
		}
	})
}
