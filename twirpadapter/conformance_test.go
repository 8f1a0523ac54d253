package twirpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// TestConformance runs the suite in both of Twirp's encodings, over a real
// HTTP server and in process (on synctest's fake clock).
func TestConformance(t *testing.T) {
	for _, enc := range encodings {
		for _, inProcess := range []bool{false, true} {
			name := enc.name + "/network"
			if inProcess {
				name = enc.name + "/in-process"
			}
			t.Run(name, func(t *testing.T) {
				conformance.RunAdapter(t, conformanceHarness{enc.newClient, inProcess})
			})
		}
	}
}

// conformanceHarness serves the fixtures as agentsafe.test.v1.TestService,
// called with the generated client of one encoding, through a real HTTP
// server or in process. Twirp has no streams: the stream rules are
// skipped.
type conformanceHarness struct {
	newClient func(string, testv1.HTTPClient, ...twirp.ClientOption) testv1.TestService
	inProcess bool
}

func (conformanceHarness) Procedure(f conformance.Fixture) string { return fixture.Procedure(f) }

func (c conformanceHarness) InProcess() bool { return c.inProcess }

func (c conformanceHarness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, _ conformance.StreamHandler) conformance.Client {
	srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(newFixtureService(handle), opts...)
	})
	var rt http.RoundTripper = serveInProcess{srv}
	url := "http://in-process"
	if !c.inProcess {
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		rt, url = hs.Client().Transport, hs.URL
	}
	hc := &http.Client{Transport: headerCapture{twirpadapter.Transport(rt)}}
	// A Twirp server of another service at the same path prefix: it has no
	// handler for any TestService path, and answers as Twirp does.
	elsewhere := testv1.NewElsewhereServer(nil)
	var none http.RoundTripper = serveInProcess{elsewhere}
	noneURL := "http://in-process"
	if !c.inProcess {
		hs := httptest.NewServer(elsewhere)
		t.Cleanup(hs.Close)
		none, noneURL = hs.Client().Transport, hs.URL
	}
	return conformanceClient{c: c.newClient(url, hc), absent: c.newClient(noneURL, &http.Client{Transport: headerCapture{none}}),
		raw: rawClient{rt: rt, url: url, none: none, noneURL: noneURL}}
}

// rawClient makes the harness's raw calls.
type rawClient struct {
	rt, none     http.RoundTripper
	url, noneURL string
}

// CallRaw makes the call as bytes, in Twirp's protobuf encoding; absent,
// on the Twirp server of another service. Twirp carries no deadline.
func (c conformanceClient) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	rt, url := c.raw.rt, c.raw.url
	if absent {
		rt, url = c.raw.none, c.raw.noneURL
	}
	r, ok := fixture.RawRequest(ctx, fixture.WireTwirp, url+"/twirp"+fixture.Procedure(f), req, shape)
	if !ok {
		return conformance.RawResponse{}, false
	}
	return fixture.Do(&http.Client{Transport: rt}, r), true
}

// serveInProcess answers a request with its handler, on the caller's
// goroutine.
type serveInProcess struct{ h http.Handler }

func (s serveInProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w.Result(), nil
}

// suiteCodes are the Twirp codes of the canonical codes the suite's
// statuses use: the harness's own, so that the adapter's table is what
// the suite checks, not what the harness assumes.
var suiteCodes = map[uint32]twirp.ErrorCode{
	conformance.StatusCanceled:          twirp.Canceled,
	conformance.StatusDeadlineExceeded:  twirp.DeadlineExceeded,
	conformance.StatusResourceExhausted: twirp.ResourceExhausted,
	conformance.StatusUnimplemented:     twirp.Unimplemented,
	conformance.StatusInternal:          twirp.Internal,
	conformance.StatusUnavailable:       twirp.Unavailable,
}

// twirpError turns the suite's status into a twirp.Error, its detail as
// meta.
func twirpError(st *conformance.Status) error {
	twerr := twirp.NewError(suiteCodes[st.Code], st.Message)
	if st.Detail != "" {
		twerr = twerr.WithMeta("detail", st.Detail)
	}
	return twerr
}

// fixtureService is the shared test service; Ungoverned and Stream are
// not fixtures (the nil interface one level deeper has them).
type fixtureService struct {
	*fixture.Service
	notFixtures
}

type notFixtures struct{ testv1.TestService }

func newFixtureService(handle conformance.Handler) fixtureService {
	return fixtureService{Service: &fixture.Service{Handle: handle, Error: twirpError,
		SetHeader: func(ctx context.Context, k, v string) { _ = twirp.SetHTTPResponseHeader(ctx, k, v) }}}
}

type conformanceClient struct {
	c, absent testv1.TestService
	raw       rawClient
}

// CallUnhandled makes the call on a Twirp server that has no handler for
// its path.
func (c conformanceClient) CallUnhandled(ctx context.Context, f conformance.Fixture, req conformance.Request) conformance.Result {
	return conformanceClient{c: c.absent}.Call(ctx, f, req, "")
}

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

func (c conformanceClient) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	h := http.Header{}
	if approvalID != "" {
		h.Set(adapter.HeaderApprovalID, approvalID)
	}
	if key != "" {
		h.Set(adapter.HeaderIdempotencyKey, key)
	}
	if len(h) > 0 {
		var err error
		if ctx, err = twirp.WithHTTPRequestHeaders(ctx, h); err != nil {
			return conformance.Result{Err: err}
		}
	}
	ctx, rec := twirpadapter.RecordEnvelope(ctx)
	ctx, header := withHeaders(ctx)
	call := map[conformance.Fixture]func(context.Context, *testv1.Request) (*testv1.Response, error){
		conformance.FixtureRead: c.c.Read, conformance.FixtureWrite: c.c.Write, conformance.FixtureIdempotentWrite: c.c.IdempotentWrite,
		conformance.FixtureSlow: c.c.Slow, conformance.FixtureGated: c.c.Gated,
	}[f]
	resp, err := call(ctx, fixture.ProtoRequest(req))
	if ctx.Err() != nil {
		return conformance.Result{Err: err} // the client left: Twirp's client reads no answer then
	}
	res := conformance.Result{Header: *header, Err: err}
	res.Envelope, _ = rec.Envelope(err)
	if twerr, ok := errors.AsType[twirp.Error](err); ok {
		res.Status = &conformance.Status{Code: 2, Message: twerr.Msg(), Detail: twerr.Meta("detail")} // 2: Unknown, a code the suite does not use
		for code, tc := range suiteCodes {
			if tc == twerr.Code() {
				res.Status.Code = code
			}
		}
		if res.Status.Code == 2 && res.Status.Detail == "" {
			// Twirp's own codes (bad_route, malformed) and their meta.
			res.Status.Detail = string(twerr.Code()) + " " + twerr.Meta("twirp_invalid_route")
		}
		for k := range twerr.MetaMap() {
			res.EngineDetail = res.EngineDetail || strings.HasPrefix(k, "agentsafe_")
		}
	} else if err == nil {
		res.Response = new(fixture.Response(resp))
	}
	return res
}

// Surface: Twirp calls come in on rpc.
func (conformanceHarness) Surface() middleware.Surface { return middleware.SurfaceRPC }
