package twirpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// guard bounds every wait on the system under test, so a broken rule fails
// the test instead of hanging it. Nothing waits this long when rules hold.
const guard = 10 * time.Second

const (
	procRead       = testv1.TestService_Read_FullMethodName
	procUngoverned = testv1.TestService_Ungoverned_FullMethodName
)

// service is the test service: every method behaves as the request says.
// Attempts numbered up to FailTimes fail with FailCode: "" is
// twirp.Unavailable, "plain" a plain Go error, "panic" a panic, "declared"
// a *middleware.Error, any other value that Twirp code. Mode "honour" waits
// for the context to end and answers twirp.DeadlineExceeded; mode "nil"
// answers neither a response nor an error. hook, when
// set, runs first and answers when it returns something.
type service struct {
	runs atomic.Int32
	hook func(ctx context.Context, in *testv1.Request, x middleware.Execution) (*testv1.Response, error)
}

func (s *service) handle(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	s.runs.Add(1)
	x, governed := middleware.ExecutionFromContext(ctx)
	if !governed {
		x.Attempt = 1 // an ungoverned call is run once
	}
	_ = twirp.SetHTTPResponseHeader(ctx, "X-Attempt", strconv.Itoa(x.Attempt))
	if s.hook != nil {
		if resp, err := s.hook(ctx, in, x); resp != nil || err != nil {
			return resp, err
		}
	}
	if int(in.FailTimes) >= x.Attempt {
		switch in.FailCode {
		case "":
			return nil, twirp.NewError(twirp.Unavailable, "try again")
		case "plain":
			return nil, errors.New("database password is s3cr3t")
		case "panic":
			panic("database password is s3cr3t")
		default:
			return nil, twirp.NewError(twirp.ErrorCode(in.FailCode), "declared by the handler").WithMeta("hint", "check the id")
		}
	}
	if in.Mode == "nil" {
		return nil, nil
	}
	if in.Mode == "honour" {
		<-ctx.Done()
		return nil, twirp.NewError(twirp.DeadlineExceeded, "gave up")
	}
	return &testv1.Response{Id: in.Id, Attempt: int32(x.Attempt), ExecutionId: x.ID, IdempotencyKey: x.IdempotencyKey}, nil
}

func (s *service) Read(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) Write(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) IdempotentWrite(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) Slow(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) Gated(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) Ungoverned(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

func (s *service) Stream(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, in)
}

// harness is a real HTTP server with the governed test service, and an
// engine whose final events arrive on a channel.
type harness struct {
	t      *testing.T
	svc    *service
	eng    *middleware.Engine
	finals chan middleware.Event
	srv    *httptest.Server
}

func newHarness(t *testing.T, reg *middleware.Registry, svc *service, opts ...middleware.Option) *harness {
	t.Helper()
	h := &harness{t: t, svc: svc, finals: make(chan middleware.Event, 64)}
	sink := middleware.EventSinkFunc(func(_ context.Context, e middleware.Event) {
		if e.Type.Final() {
			h.finals <- e
		}
	})
	eng, err := middleware.New(reg, append([]middleware.Option{middleware.WithEventSink(sink), middleware.WithApprovalStore(approvalstore.NewMemory())}, opts...)...)
	if err != nil {
		t.Fatalf("middleware.New: %v", err)
	}
	h.eng = eng
	srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(svc, opts...)
	})
	mux := http.NewServeMux()
	mux.Handle(srv.PathPrefix(), srv)
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	return h
}

// encodings are Twirp's two wire encodings, each with its generated client.
var encodings = []struct {
	name      string
	newClient func(string, testv1.HTTPClient, ...twirp.ClientOption) testv1.TestService
}{
	{"protobuf", testv1.NewTestServiceProtobufClient},
	{"json", testv1.NewTestServiceJSONClient},
}

// client returns a generated client of the given encoding whose transport
// records the envelope headers (twirpadapter.Transport) and, for contexts
// from withHeaders, every response header.
func (h *harness) client(newClient func(string, testv1.HTTPClient, ...twirp.ClientOption) testv1.TestService) testv1.TestService {
	hc := &http.Client{Transport: headerCapture{twirpadapter.Transport(h.srv.Client().Transport)}}
	return newClient(h.srv.URL, hc)
}

func (h *harness) final() middleware.Event {
	h.t.Helper()
	return recv(h.t, h.finals, "a final event")
}

type headersKey struct{}

// withHeaders returns a context whose call's response headers are stored
// in the returned header.
func withHeaders(ctx context.Context) (context.Context, *http.Header) {
	h := new(http.Header)
	return context.WithValue(ctx, headersKey{}, h), h
}

type headerCapture struct{ next http.RoundTripper }

func (c headerCapture) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if h, ok := req.Context().Value(headersKey{}).(*http.Header); ok && err == nil {
		*h = resp.Header.Clone()
	}
	return resp, err
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// twerr returns err as a Twirp error or fails.
func twerr(t *testing.T, err error) twirp.Error {
	t.Helper()
	var te twirp.Error
	if !errors.As(err, &te) {
		t.Fatalf("error %v is not a twirp.Error", err)
	}
	return te
}

// call makes one call with a context from twirpadapter.RecordEnvelope and
// withHeaders, and returns what the client saw: the envelope (as the
// Recorder reads it), the response headers and the error.
func call(ctx context.Context, do func(context.Context) error) (middleware.Envelope, http.Header, error) {
	ctx, rec := twirpadapter.RecordEnvelope(ctx)
	ctx, header := withHeaders(ctx)
	err := do(ctx)
	env, _ := rec.Envelope(err)
	if env.Error == nil {
		env.Error = &middleware.EnvelopeError{}
	}
	return env, *header, err
}
