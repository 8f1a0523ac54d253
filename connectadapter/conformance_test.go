package connectadapter_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
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
	mux.Handle(testv1connect.NewTestServiceHandler(conformanceService{handle, stream},
		connect.WithInterceptors(connectadapter.NewInterceptor(eng))))
	url := serve(t, mux)
	return conformanceClient{testv1connect.NewTestServiceClient(httpClient(t, h.p.h2c), url, slices.Clone(h.p.opts)...)}
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
	resp, err := s.handle(ctx, f, toFixture(req.Msg), func(k, v string) {
		if info != nil {
			info.ResponseHeader().Set(k, v)
		}
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(fromFixture(resp)), nil
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
	return s.stream(ctx, toFixture(r.Msg), func(k, v string) { st.ResponseHeader().Set(k, v) },
		func(resp conformance.Response) error { return st.Send(fromFixture(resp)) })
}

type conformanceClient struct {
	c testv1connect.TestServiceClient
}

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	r := connect.NewRequest(fixture.ProtoRequest(req))
	if approvalID != "" {
		r.Header().Set(middleware.HeaderApprovalID, approvalID)
	}
	call := map[conformance.Fixture]func(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error){
		conformance.FixtureRead: c.c.Read, conformance.FixtureWrite: c.c.Write, conformance.FixtureIdempotentWrite: c.c.IdempotentWrite,
		conformance.FixtureSlow: c.c.Slow, conformance.FixtureGated: c.c.Gated,
	}[f]
	res, err := call(ctx, r)
	env, _ := connectadapter.ReadEnvelope(res, err)
	out := conformance.Result{Envelope: env, Err: err, Header: http.Header{}}
	if err != nil {
		if ce, ok := err.(*connect.Error); ok {
			out.Header = ce.Meta()
		}
		return out
	}
	out.Header = res.Header().Clone()
	for k, vs := range res.Trailer() {
		out.Header[k] = append(out.Header[k], vs...)
	}
	m := res.Msg
	out.Response = new(fixture.Response(m))
	return out
}

func (c conformanceClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	st, err := c.c.Stream(ctx, connect.NewRequest(fixture.ProtoRequest(req)))
	if err != nil {
		env, _ := connectadapter.ReadEnvelope(nil, err)
		return nil, conformance.Result{Envelope: env, Err: err, Header: http.Header{}}
	}
	defer st.Close()
	var msgs []conformance.Response
	for st.Receive() {
		m := st.Msg()
		msgs = append(msgs, fixture.Response(m))
	}
	h := st.ResponseHeader().Clone()
	for k, vs := range st.ResponseTrailer() {
		h[k] = append(h[k], vs...)
	}
	env, _ := connectadapter.ReadEnvelopeHeader(h, st.Err())
	out := conformance.Result{Envelope: env, Err: st.Err(), Header: h}
	if st.Err() == nil {
		out.Response = &conformance.Response{}
	}
	return msgs, out
}
