package twirpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

func TestConformance(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			conformance.RunAdapter(t, conformanceHarness{enc.newClient})
		})
	}
}

// conformanceHarness serves the fixtures as agentsafe.test.v1.TestService
// over a real HTTP server, called with the generated client of one
// encoding. Twirp has no streams: the stream rules are skipped.
type conformanceHarness struct {
	newClient func(string, testv1.HTTPClient, ...twirp.ClientOption) testv1.TestService
}

var fixtureMethods = map[conformance.Fixture]string{
	conformance.FixtureRead:            "Read",
	conformance.FixtureWrite:           "Write",
	conformance.FixtureIdempotentWrite: "IdempotentWrite",
	conformance.FixtureSlow:            "Slow",
	conformance.FixtureGated:           "Gated",
}

func (conformanceHarness) Procedure(f conformance.Fixture) string {
	return "/agentsafe.test.v1.TestService/" + fixtureMethods[f]
}

func (c conformanceHarness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, _ conformance.StreamHandler) conformance.Client {
	svc := &fixtureService{handle: handle}
	srv := httptest.NewServer(twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(svc, opts...)
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: headerCapture{twirpadapter.Transport(srv.Client().Transport)}}
	return conformanceClient{c.newClient(srv.URL, hc)}
}

type fixtureService struct {
	testv1.TestService // Ungoverned and Stream are not fixtures
	handle             conformance.Handler
}

func (s *fixtureService) serve(ctx context.Context, f conformance.Fixture, in *testv1.Request) (*testv1.Response, error) {
	req := fixture.Request(in)
	resp, err := s.handle(ctx, f, req, func(k, v string) { _ = twirp.SetHTTPResponseHeader(ctx, k, v) })
	if err != nil {
		return nil, err
	}
	return &testv1.Response{Id: resp.ID, Attempt: int32(resp.Attempt), ExecutionId: resp.ExecutionID, IdempotencyKey: resp.IdempotencyKey}, nil
}

func (s *fixtureService) Read(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.serve(ctx, conformance.FixtureRead, in)
}

func (s *fixtureService) Write(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.serve(ctx, conformance.FixtureWrite, in)
}

func (s *fixtureService) IdempotentWrite(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.serve(ctx, conformance.FixtureIdempotentWrite, in)
}

func (s *fixtureService) Slow(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.serve(ctx, conformance.FixtureSlow, in)
}

func (s *fixtureService) Gated(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.serve(ctx, conformance.FixtureGated, in)
}

type conformanceClient struct{ c testv1.TestService }

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	if approvalID != "" {
		var err error
		if ctx, err = twirp.WithHTTPRequestHeaders(ctx, http.Header{middleware.HeaderApprovalID: {approvalID}}); err != nil {
			return conformance.Result{Err: err}
		}
	}
	ctx, rec := twirpadapter.RecordEnvelope(ctx)
	ctx, header := withHeaders(ctx)
	in := fixture.ProtoRequest(req)
	call := map[conformance.Fixture]func(context.Context, *testv1.Request) (*testv1.Response, error){
		conformance.FixtureRead: c.c.Read, conformance.FixtureWrite: c.c.Write, conformance.FixtureIdempotentWrite: c.c.IdempotentWrite,
		conformance.FixtureSlow: c.c.Slow, conformance.FixtureGated: c.c.Gated,
	}[f]
	resp, err := call(ctx, in)
	env, _ := rec.Envelope(err)
	res := conformance.Result{Envelope: env, Header: *header, Err: err}
	if err == nil {
		res.Response = &conformance.Response{ID: resp.Id, Attempt: int(resp.Attempt), ExecutionID: resp.ExecutionId, IdempotencyKey: resp.IdempotencyKey}
	}
	return res
}
