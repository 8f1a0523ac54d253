package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

func TestConformance(t *testing.T) {
	conformance.RunAdapter(t, harness{})
}

// harness serves the conformance fixtures as agentsafe.test.v1.TestService
// over a real gRPC server on loopback.
type harness struct{}

func (harness) Procedure(f conformance.Fixture) string { return fixture.Procedure(f) }

func (harness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, stream conformance.StreamHandler) conformance.Client {
	conn, addr := serveAddr(t, eng, newService(handle, stream))
	return client{c: testv1.NewTestServiceClient(conn), t: t, addr: addr}
}

// CallRaw makes the call as bytes, in gRPC over cleartext HTTP/2; absent,
// on a server whose TestService has no handler for f's method.
//
// An expired deadline is not sent: grpc-go resets a stream whose deadline
// passes (RST_STREAM CANCEL) from a timer that races with the answer, for
// a method it does not have too, so no two calls need get the same bytes;
// TestAHiddenMethodWithAnExpiredDeadlineIsNeverCancelled holds a hidden
// method to what an absent one may get.
func (c client) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	if shape == conformance.ShapeExpired {
		return conformance.RawResponse{}, false
	}
	addr := c.addr
	if absent {
		srv, a := withoutMethod(c.t, f)
		defer srv.Stop()
		addr = a
	}
	r, ok := fixture.RawRequest(ctx, fixture.WireGRPC, "http://"+addr+fixture.Procedure(f), req, shape)
	if !ok {
		return conformance.RawResponse{}, false
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	return fixture.Do(&http.Client{Transport: tr}, r), true
}

// withoutMethod starts a plain gRPC server whose TestService has no
// handler for f's method: grpc-go's own answer for it.
func withoutMethod(t *testing.T, f conformance.Fixture) (*grpc.Server, string) {
	desc := testv1.TestService_ServiceDesc
	desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool {
		return "/"+desc.ServiceName+"/"+m.MethodName == fixture.Procedure(f)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&desc, newService(nil, nil))
	go srv.Serve(lis)
	return srv, lis.Addr().String()
}

// CallUnhandled makes the call on a gRPC server whose TestService has no
// handler for f's method: grpc-go's own answer.
func (c client) CallUnhandled(ctx context.Context, f conformance.Fixture, req conformance.Request) conformance.Result {
	srv, addr := withoutMethod(c.t, f)
	defer srv.Stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	return client{c: testv1.NewTestServiceClient(conn)}.Call(ctx, f, req, "")
}

// serve starts a gRPC server for svc governed by eng, mounted as the
// adoption snippets mount it, and returns a connection to it.
func serve(t *testing.T, eng *middleware.Engine, svc testv1.TestServiceServer, clientOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, _ := serveAddr(t, eng, svc, clientOpts...)
	return conn
}

// serveAddr is serve, also returning the server's address.
func serveAddr(t *testing.T, eng *middleware.Engine, svc testv1.TestServiceServer, clientOpts ...grpc.DialOption) (*grpc.ClientConn, string) {
	t.Helper()
	return serveRegistered(t, grpcadapter.ServerOptions(eng), func(s grpc.ServiceRegistrar) grpc.ServiceRegistrar { return grpcadapter.Guard(eng, s) }, svc, clientOpts...)
}

// serveWith starts a gRPC server for svc with srvOpts on loopback and
// returns a connection to it.
func serveWith(t *testing.T, srvOpts []grpc.ServerOption, svc testv1.TestServiceServer, clientOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, _ := serveRegistered(t, srvOpts, func(s grpc.ServiceRegistrar) grpc.ServiceRegistrar { return s }, svc, clientOpts...)
	return conn
}

// serveRegistered starts a gRPC server with srvOpts, registers svc
// through what registrar makes of it, and returns a connection to it and
// its address.
func serveRegistered(t *testing.T, srvOpts []grpc.ServerOption, registrar func(grpc.ServiceRegistrar) grpc.ServiceRegistrar, svc testv1.TestServiceServer, clientOpts ...grpc.DialOption) (*grpc.ClientConn, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(srvOpts...)
	testv1.RegisterTestServiceServer(registrar(srv), svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(clientOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, lis.Addr().String()
}

// service is the shared test service, plus the stream fixture.
type service struct {
	*fixture.Service
	unimplemented
	stream conformance.StreamHandler
}

// unimplemented sits one level deeper than the shared service, so that its
// methods win.
type unimplemented struct {
	testv1.UnimplementedTestServiceServer
}

func newService(handle conformance.Handler, stream conformance.StreamHandler) *service {
	return &service{Service: &fixture.Service{Handle: handle, Error: grpcError,
		SetHeader: func(ctx context.Context, k, v string) { grpc.SetHeader(ctx, metadata.Pairs(k, v)) }}, stream: stream}
}

// grpcError turns the suite's *conformance.Status into gRPC's own error, its
// detail as a google.protobuf.StringValue.
func grpcError(st *conformance.Status) error {
	s := status.New(codes.Code(st.Code), st.Message)
	if st.Detail != "" {
		s, _ = s.WithDetails(wrapperspb.String(st.Detail))
	}
	return s.Err()
}

func (s *service) Stream(r *testv1.Request, ss grpc.ServerStreamingServer[testv1.Response]) error {
	err := s.stream(ss.Context(), fixture.Request(r), func(k, v string) { ss.SetHeader(metadata.Pairs(k, v)) },
		func(resp conformance.Response) error { return ss.Send(fixture.ProtoResponse(resp)) })
	if st, ok := errors.AsType[*conformance.Status](err); ok {
		return grpcError(st)
	}
	return err
}

type client struct {
	c    testv1.TestServiceClient
	t    *testing.T
	addr string
}

func (c client) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

func (c client) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	if approvalID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "agentsafe-approval-id", approvalID) // exactly as given
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	in := fixture.ProtoRequest(req)
	call := map[conformance.Fixture]func(context.Context, *testv1.Request, ...grpc.CallOption) (*testv1.Response, error){
		conformance.FixtureRead: c.c.Read, conformance.FixtureWrite: c.c.Write, conformance.FixtureIdempotentWrite: c.c.IdempotentWrite,
		conformance.FixtureSlow: c.c.Slow, conformance.FixtureGated: c.c.Gated,
	}[f]
	var header, trailer metadata.MD
	resp, err := call(ctx, in, grpc.Header(&header), grpc.Trailer(&trailer))
	return result(header, trailer, resp, err)
}

func (c client) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	st, err := c.c.Stream(ctx, fixture.ProtoRequest(req))
	if err != nil {
		return nil, conformance.Result{Err: err}
	}
	var msgs []conformance.Response
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			header, _ := st.Header()
			r := result(header, st.Trailer(), &testv1.Response{}, err)
			return msgs, r
		}
		msgs = append(msgs, fixture.Response(m))
	}
}

func result(header, trailer metadata.MD, resp *testv1.Response, err error) conformance.Result {
	env, _ := grpcadapter.EnvelopeFrom(header, trailer, err)
	h := http.Header{}
	for k, vs := range metadata.Join(header, trailer) {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	r := conformance.Result{Envelope: env, Header: h, Err: err}
	if err == nil && resp != nil {
		r.Response = new(fixture.Response(resp))
	}
	if err != nil {
		st := status.Convert(err)
		r.Status = &conformance.Status{Code: uint32(st.Code()), Message: st.Message()}
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *wrapperspb.StringValue:
				r.Status.Detail = d.GetValue()
			case *agentsafev1.ErrorDetail:
				r.EngineDetail = true
			}
		}
	}
	return r
}

// Surface: gRPC calls come in on rpc.
func (harness) Surface() middleware.Surface { return middleware.SurfaceRPC }
