package main

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1/conformancev1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

// newConnectServer serves the service with connect-go handlers: Connect,
// gRPC and gRPC-Web, over HTTP/1.1 or HTTP/2 (h2c, or TLS when asked).
// With eng, every procedure is governed through one connectadapter
// interceptor. d is how the handlers wait a response delay.
func newConnectServer(req *conformancev1.ServerCompatRequest, tlsConf *tls.Config, eng *middleware.Engine, d delay) (*http.Server, error) {
	opts := []connect.HandlerOption{connect.WithCodec(strictJSONCodec{})}
	var interceptor *connectadapter.Interceptor
	if eng != nil {
		interceptor = connectadapter.NewInterceptor(eng)
		opts = append(opts, connect.WithInterceptors(interceptor))
	}
	if req.GetMessageReceiveLimit() > 0 {
		opts = append(opts, connect.WithReadMaxBytes(int(req.GetMessageReceiveLimit())))
	}
	mux := http.NewServeMux()
	path, h := conformancev1connect.NewConformanceServiceHandler(connectService{delay: d}, opts...)
	if interceptor != nil { // mounted as the adoption snippets mount it
		path, h = interceptor.Guard(path, h)
	}
	mux.Handle(path, h)

	handler := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && strings.HasSuffix(r.URL.Path, conformancev1connect.ConformanceServiceBidiStreamProcedure) {
			// connect-go refuses bidi streams over HTTP/1.1; the suite's
			// half-duplex cases run them anyway, as its reference server
			// does, by presenting the request as HTTP/2.
			r.ProtoMajor, r.ProtoMinor = 2, 0
		}
		if d, ok := requestTimeout(r.Header); ok {
			r = r.WithContext(withClientDeadline(r.Context(), time.Now().Add(d)))
		}
		mux.ServeHTTP(w, r)
	}))

	// No ReadHeaderTimeout, nor any other timeout: the server closes no
	// connection on a timer. net/http starts ReadHeaderTimeout when it
	// accepts a connection, and its client pools connections it dialed
	// and did not need yet; a server that closes one as the client takes
	// it for a call fails the call, when its request body is a stream
	// (README.md, "A race at an unused connection"). The only client is
	// the suite's, on loopback, for the length of a run.
	srv := &http.Server{
		Handler:   handler,
		TLSConfig: tlsConf,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	switch req.GetHttpVersion() {
	case conformancev1.HTTPVersion_HTTP_VERSION_1:
		// A non-nil, empty map turns HTTP/2 off, also over TLS.
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	case conformancev1.HTTPVersion_HTTP_VERSION_2:
		if tlsConf == nil {
			srv.Handler = h2c.NewHandler(handler, &http2.Server{})
		}
	default:
		return nil, errors.New("HTTP version " + req.GetHttpVersion().String() + " is not supported")
	}
	return srv, nil
}

// serveHTTP serves srv on lis, with TLS if srv has a TLS configuration.
func serveHTTP(srv *http.Server, lis net.Listener) error {
	var err error
	if srv.TLSConfig != nil {
		err = srv.ServeTLS(lis, "", "")
	} else {
		err = srv.Serve(lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
