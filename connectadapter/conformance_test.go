package connectadapter_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestConformance runs the conformance suite through the Connect adapter,
// once per protocol a Connect client speaks.
func TestConformance(t *testing.T) {
	for _, p := range []protocol{protocols[0], protocols[4], protocols[5]} { // connect/http1, grpc/h2c, grpcweb/h2c
		t.Run(p.name, func(t *testing.T) {
			conformance.RunAdapter(t, conformanceHarness{p})
		})
	}
}

type conformanceHarness struct{ p protocol }

func (conformanceHarness) Procedure(f conformance.Fixture) string { return fixture.Procedure(f) }

func (h conformanceHarness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, stream conformance.StreamHandler) conformance.Client {
	mux := http.NewServeMux()
	interceptor := connectadapter.NewInterceptor(eng)
	mux.Handle(interceptor.Guard(testv1connect.NewTestServiceHandler(conformanceService{handle, stream},
		connect.WithInterceptors(interceptor))))
	url := serve(t, mux)
	// A Connect server without the service: the mux's 404, as the generated
	// handler also answers a method it does not know.
	none := serve(t, http.NewServeMux())
	return conformanceClient{
		c:      testv1connect.NewTestServiceClient(httpClient(t, h.p.h2c), url, slices.Clone(h.p.opts)...),
		absent: testv1connect.NewTestServiceClient(httpClient(t, h.p.h2c), none, slices.Clone(h.p.opts)...),
		raw:    rawClient{hc: httpClient(t, h.p.h2c), url: url, none: none, wire: h.p.wire()},
	}
}

// wire is the protocol's framing for raw calls.
func (p protocol) wire() fixture.Wire {
	switch {
	case strings.HasPrefix(p.name, "grpcweb"):
		return fixture.WireGRPCWeb
	case strings.HasPrefix(p.name, "grpc"):
		return fixture.WireGRPC
	}
	return fixture.WireConnect
}

// rawClient makes the harness's raw calls.
type rawClient struct {
	hc        *http.Client
	url, none string
	wire      fixture.Wire
}

// CallRaw makes the call in the harness's protocol, as bytes.
func (c conformanceClient) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	base := c.raw.url
	if absent {
		base = c.raw.none
	}
	r, ok := fixture.RawRequest(ctx, c.raw.wire, base+fixture.Procedure(f), req, shape)
	if !ok {
		return conformance.RawResponse{}, false
	}
	return fixture.Do(c.raw.hc, r), true
}

type conformanceService struct {
	handle conformance.Handler
	stream conformance.StreamHandler
}

func toFixture(r *testv1.Request) conformance.Request {
	return fixture.Request(r)
}

func fromFixture(r conformance.Response) *testv1.Response {
	return fixture.ProtoResponse(r)
}

func (s conformanceService) serve(ctx context.Context, f conformance.Fixture, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	// Response headers go through Connect's own per-call API, which the
	// adapter isolates per attempt.
	info, _ := connect.CallInfoForHandlerContext(ctx)
	resp, err := s.handle(ctx, f, toFixture(req.Msg), info.ResponseHeader().Set)
	if req.Msg.GetMode() == string(conformance.ModeMutate) {
		req.Msg.Id = conformance.MutatedID // a careless handler changes its input, in place
	}
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(fromFixture(resp)), nil
}

// connectError is the suite's *conformance.Status as Connect's own error,
// its detail as an error detail; other errors are left as they are.
func connectError(err error) error {
	st, ok := errors.AsType[*conformance.Status](err)
	if !ok {
		return err
	}
	ce := connect.NewError(connect.Code(st.Code), errors.New(st.Message))
	if st.Detail != "" {
		d, derr := connect.NewErrorDetail(wrapperspb.String(st.Detail))
		if derr != nil {
			panic(derr)
		}
		ce.AddDetail(d)
	}
	return ce
}

func (s conformanceService) Read(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureRead, r)
}
func (s conformanceService) Write(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureWrite, r)
}
func (s conformanceService) IdempotentWrite(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureIdempotentWrite, r)
}
func (s conformanceService) Slow(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureSlow, r)
}
func (s conformanceService) Gated(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureGated, r)
}
func (s conformanceService) Ungoverned(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return connect.NewResponse(&testv1.Response{}), nil
}
func (s conformanceService) Stream(ctx context.Context, r *connect.Request[testv1.Request], st *connect.ServerStream[testv1.Response]) error {
	return connectError(s.stream(ctx, toFixture(r.Msg), st.ResponseHeader().Set,
		func(resp conformance.Response) error { return st.Send(fromFixture(resp)) }))
}

type conformanceClient struct {
	c, absent testv1connect.TestServiceClient
	raw       rawClient
}

// CallUnhandled makes the call on a server that has no handler for it.
func (c conformanceClient) CallUnhandled(ctx context.Context, f conformance.Fixture, req conformance.Request) conformance.Result {
	return conformanceClient{c: c.absent}.Call(ctx, f, req, "")
}

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

func (c conformanceClient) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	r := connect.NewRequest(fixture.ProtoRequest(req))
	if approvalID != "" {
		r.Header().Set(adapter.HeaderApprovalID, approvalID)
	}
	if key != "" {
		r.Header().Set(adapter.HeaderIdempotencyKey, key)
	}
	call := map[conformance.Fixture]func(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error){
		conformance.FixtureRead: c.c.Read, conformance.FixtureWrite: c.c.Write, conformance.FixtureIdempotentWrite: c.c.IdempotentWrite,
		conformance.FixtureSlow: c.c.Slow, conformance.FixtureGated: c.c.Gated,
	}[f]
	res, err := call(ctx, r)
	env, _ := connectadapter.ReadEnvelope(res, err)
	if err != nil {
		return failed(env, http.Header{}, err)
	}
	out := conformance.Result{Envelope: env, Header: res.Header().Clone(), Response: new(fixture.Response(res.Msg))}
	maps.Copy(out.Header, res.Trailer())
	return out
}

// failed is the result of a failed call: the Connect error as the client
// decoded it, and whether agentsafe's detail came with it.
func failed(env middleware.Envelope, header http.Header, err error) conformance.Result {
	out := conformance.Result{Envelope: env, Header: header, Err: err}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return out
	}
	maps.Copy(out.Header, ce.Meta())
	out.Status = &conformance.Status{Code: uint32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		switch v, _ := d.Value(); v := v.(type) {
		case *wrapperspb.StringValue:
			out.Status.Detail = v.GetValue()
		case *agentsafev1.ErrorDetail:
			out.EngineDetail = true
		}
	}
	return out
}

func (c conformanceClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	st, err := c.c.Stream(ctx, connect.NewRequest(fixture.ProtoRequest(req)))
	if err != nil {
		env, _ := connectadapter.ReadEnvelope(nil, err)
		return nil, failed(env, http.Header{}, err)
	}
	defer st.Close()
	var msgs []conformance.Response
	for st.Receive() {
		msgs = append(msgs, fixture.Response(st.Msg()))
	}
	h := st.ResponseHeader().Clone()
	maps.Copy(h, st.ResponseTrailer())
	env, _ := connectadapter.ReadEnvelopeHeader(st.ResponseTrailer(), st.Err())
	if st.Err() != nil {
		return msgs, failed(env, h, st.Err())
	}
	return msgs, conformance.Result{Envelope: env, Header: h, Response: &conformance.Response{}}
}

// Surface: Connect, gRPC and gRPC-Web calls come in on rpc.
func (conformanceHarness) Surface() middleware.Surface { return middleware.SurfaceRPC }
