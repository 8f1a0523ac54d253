package twirpadapter

import (
	"context"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
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
	inner TwirpServer
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
// before the engine's actor function.
//
// Wrap panics if eng or newServer is nil, or if newServer does not pass the
// options on (the service would run ungoverned without anyone noticing).
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
	installed := false
	ours := twirp.ServerOption(func(o *twirp.ServerOptions) {
		installed = true
		twirp.WithServerInterceptors(interceptor(eng))(o)
	})
	inner := newServer(append(cfg.serverOpts, ours)...)
	if !installed {
		panic("twirpadapter: the constructor given to Wrap must pass its options to the generated New…Server function")
	}
	return &Server{inner: inner}
}

// wire is what the interceptor needs of the HTTP exchange and Twirp does
// not show it: the request's headers, and the response's.
type wire struct{ req, resp http.Header }

type wireKey struct{}

// ServeHTTP makes the request's and the response's headers visible to the
// interceptor, then serves the request with the wrapped server.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), wireKey{}, &wire{r.Header, w.Header()})))
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
