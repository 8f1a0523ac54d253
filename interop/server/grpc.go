package main

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/agentsafe/agentsafe/grpcadapter"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor, as the grpc-go reference server has it
)

// newGRPCServer serves the service with grpc.NewServer: the gRPC protocol
// over HTTP/2, in clear text or with TLS. With eng, every procedure is
// governed through grpcadapter.ServerOptions. d is how the handlers wait a
// response delay.
func newGRPCServer(req *conformancev1.ServerCompatRequest, tlsConf *tls.Config, eng *middleware.Engine, d delay) (*grpc.Server, error) {
	if p := req.GetProtocol(); p != conformancev1.Protocol_PROTOCOL_GRPC {
		return nil, fmt.Errorf("protocol %s is not supported by the grpc-go server", p)
	}
	if v := req.GetHttpVersion(); v != conformancev1.HTTPVersion_HTTP_VERSION_2 {
		return nil, fmt.Errorf("HTTP version %s is not supported by the grpc-go server", v)
	}
	// First, before agentsafe's: record the client's deadline.
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recordDeadlineUnary),
		grpc.ChainStreamInterceptor(recordDeadlineStream),
	}
	if eng != nil {
		opts = append(opts, grpcadapter.ServerOptions(eng)...)
	}
	if n := req.GetMessageReceiveLimit(); n > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(int(n)))
	}
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	srv := grpc.NewServer(opts...)
	var registrar grpc.ServiceRegistrar = srv
	if eng != nil { // mounted as the adoption snippets mount it
		registrar = grpcadapter.Guard(eng, srv)
	}
	conformancev1.RegisterConformanceServiceServer(registrar, grpcService{delay: d})
	return srv, nil
}

// grpc-go reads the grpc-timeout header itself and keeps it out of the
// metadata handlers see (it is a reserved header): the only trace of it is
// the deadline the transport puts on the call's context before any
// interceptor runs. These interceptors, chained before agentsafe's, record
// that deadline as the client's (see withClientDeadline).

func recordDeadlineUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if d, ok := ctx.Deadline(); ok {
		ctx = withClientDeadline(ctx, d)
	}
	return handler(ctx, req)
}

func recordDeadlineStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if d, ok := ss.Context().Deadline(); ok {
		ss = &contextStream{ServerStream: ss, ctx: withClientDeadline(ss.Context(), d)}
	}
	return handler(srv, ss)
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
