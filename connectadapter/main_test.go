package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

const (
	procRead       = testv1connect.TestServiceReadProcedure
	procWrite      = testv1connect.TestServiceWriteProcedure
	procIdemWrite  = testv1connect.TestServiceIdempotentWriteProcedure
	procSlow       = testv1connect.TestServiceSlowProcedure
	procGated      = testv1connect.TestServiceGatedProcedure
	procUngoverned = testv1connect.TestServiceUngovernedProcedure
	procStream     = testv1connect.TestServiceStreamProcedure
)

// waitBound bounds every wait for something a server does after the client
// has its answer; reaching it fails the test instead of hanging it.
const waitBound = 5 * time.Second

// protocol is one way a Connect client reaches the server.
type protocol struct {
	name string
	h2c  bool // HTTP/2 over cleartext; HTTP/1.1 otherwise
	opts []connect.ClientOption
}

var protocols = []protocol{
	{name: "connect/http1"},
	{name: "grpc/http1", opts: []connect.ClientOption{connect.WithGRPC()}},
	{name: "grpcweb/http1", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	{name: "connect/h2c", h2c: true},
	{name: "grpc/h2c", h2c: true, opts: []connect.ClientOption{connect.WithGRPC()}},
	{name: "grpcweb/h2c", h2c: true, opts: []connect.ClientOption{connect.WithGRPCWeb()}},
}

// eachProtocol runs f once per protocol, in parallel subtests.
func eachProtocol(t *testing.T, f func(t *testing.T, p protocol)) {
	t.Helper()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f(t, p)
		})
	}
}

// sink records events and hands final ones to a channel, so a test can wait
// for a server-side execution to end without sleeping.
type sink struct {
	agentsafetest.Recorder
	finals chan middleware.Event
	late   chan middleware.Event // capability.abandoned_result
}

func (s *sink) HandleEvent(ctx context.Context, e middleware.Event) {
	s.Recorder.HandleEvent(ctx, e)
	switch {
	case e.Type.Final():
		s.finals <- e
	case e.Type == middleware.EventAbandonedResult:
		s.late <- e
	}
}

// final waits for the next execution to end and returns its final event.
func (s *sink) final(t *testing.T) middleware.Event {
	t.Helper()
	select {
	case e := <-s.finals:
		return e
	case <-time.After(waitBound):
		t.Fatal("no execution ended")
		return middleware.Event{}
	}
}

// lateEvent waits for the next capability.abandoned_result.
func (s *sink) lateEvent(t *testing.T) middleware.Event {
	t.Helper()
	select {
	case e := <-s.late:
		return e
	case <-time.After(waitBound):
		t.Fatal("no abandoned_result event")
		return middleware.Event{}
	}
}

func (s *sink) types(executionID string) []middleware.EventType {
	var out []middleware.EventType
	for _, e := range s.Execution(executionID) {
		out = append(out, e.Type)
	}
	return out
}

func (s *sink) wantTypes(t *testing.T, executionID string, want ...middleware.EventType) {
	t.Helper()
	if got := s.types(executionID); !slices.Equal(got, want) {
		t.Errorf("events of %s:\n got %v\nwant %v", executionID, got, want)
	}
}

// handlerFunc is what a test server runs for each attempt of each call.
type handlerFunc func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error)

// service implements the test service by handing every unary call to one
// function; Stream sends req.Count responses.
type service struct {
	testv1connect.UnimplementedTestServiceHandler
	handle handlerFunc
	runs   atomic.Int32
	mu     sync.Mutex
	seen   []middleware.Execution
	protos []int // request ProtoMajor seen by the HTTP server
	// keys are the Idempotency-Key headers of the requests the HTTP server
	// saw, by path.
	keys []received
	// streamStep, when set, is received from after the first message of a
	// stream is sent and before the rest.
	streamStep chan struct{}
}

func (s *service) note(ctx context.Context) middleware.Execution {
	s.runs.Add(1)
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, x)
	s.mu.Unlock()
	return x
}

func (s *service) executions() []middleware.Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

func (s *service) unary(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	s.note(ctx)
	h := s.handle
	if h == nil {
		h = behave
	}
	return h(ctx, req)
}

func (s *service) Read(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) Write(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) IdempotentWrite(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) Slow(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) Gated(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) Ungoverned(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, req)
}

func (s *service) Stream(ctx context.Context, req *connect.Request[testv1.Request], stream *connect.ServerStream[testv1.Response]) error {
	x := s.note(ctx)
	if req.Msg.GetMode() == "block" {
		<-ctx.Done()
		return ctx.Err()
	}
	for n := range req.Msg.GetCount() {
		if err := stream.Send(&testv1.Response{Id: req.Msg.GetId(), Attempt: int32(x.Attempt), ExecutionId: x.ID}); err != nil {
			return err
		}
		if n == 0 && s.streamStep != nil {
			select {
			case <-s.streamStep:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return failure(req.Msg.GetFailCode())
}

// behave is the default handler: it fails the first FailTimes attempts with
// FailCode, blocks until its context ends in mode "block", and otherwise
// answers with what it saw.
func behave(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	if req.Msg.GetMode() == "block" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	attempt := int32(max(x.Attempt, 1)) // an ungoverned call runs once, as attempt 0
	if attempt <= req.Msg.GetFailTimes() || req.Msg.GetFailTimes() < 0 {
		return nil, failure(req.Msg.GetFailCode())
	}
	return answer(ctx, req), nil
}

func answer(ctx context.Context, req *connect.Request[testv1.Request]) *connect.Response[testv1.Response] {
	x, _ := middleware.ExecutionFromContext(ctx)
	return connect.NewResponse(&testv1.Response{Id: req.Msg.GetId(), Attempt: int32(x.Attempt), ExecutionId: x.ID, IdempotencyKey: x.IdempotencyKey})
}

const secret = "db password=hunter2"

// failure is the error a handler fails with, by name.
func failure(code string) error {
	switch code {
	case "":
		return nil
	case "unavailable":
		return connect.NewError(connect.CodeUnavailable, errors.New("backend unavailable"))
	case "invalid_argument":
		return connect.NewError(connect.CodeInvalidArgument, errors.New("id must not be empty"))
	case "declared":
		// A business error on purpose: code, message, a detail, metadata.
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("order 42 was already refunded"))
		d, _ := connect.NewErrorDetail(wrapperspb.String("ALREADY_REFUNDED"))
		ce.AddDetail(d)
		ce.Meta().Set("X-Order", "42")
		return ce
	case "plain":
		return errors.New("query failed: " + secret)
	}
	return errors.New("unknown fail code " + code)
}

// server is a test server: the test service behind the interceptor, on a
// real HTTP server that speaks HTTP/1.1 and HTTP/2 over cleartext.
type server struct {
	url   string
	svc   *service
	sink  *sink
	guard *connectadapter.Interceptor
}

type serverConfig struct {
	reg    *middleware.Registry
	opts   []middleware.Option
	handle handlerFunc
	// interceptors are installed around the guard: before[i] run before it,
	// after[i] after it.
	before, after []connect.Interceptor
	bare          bool // no guard at all
	handlerOpts   []connect.HandlerOption
}

func newServer(t testing.TB, cfg serverConfig) *server {
	t.Helper()
	s := &server{svc: &service{handle: cfg.handle}, sink: &sink{finals: make(chan middleware.Event, 1024), late: make(chan middleware.Event, 64)}}
	var interceptors []connect.Interceptor
	interceptors = append(interceptors, cfg.before...)
	if !cfg.bare {
		opts := append([]middleware.Option{middleware.WithEventSink(s.sink), middleware.WithApprovalStore(approvalstore.NewMemory())}, cfg.opts...)
		eng, err := middleware.New(cfg.reg, opts...)
		if err != nil {
			t.Fatalf("middleware.New: %v", err)
		}
		s.guard = connectadapter.NewInterceptor(eng)
		interceptors = append(interceptors, s.guard)
	}
	interceptors = append(interceptors, cfg.after...)
	mux := http.NewServeMux()
	path, h := testv1connect.NewTestServiceHandler(s.svc, append(cfg.handlerOpts, connect.WithInterceptors(interceptors...))...)
	if s.guard != nil { // mounted as the adoption snippets mount it
		path, h = s.guard.Guard(path, h)
	}
	mux.Handle(path, h)
	s.url = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.svc.mu.Lock()
		s.svc.protos = append(s.svc.protos, r.ProtoMajor)
		s.svc.keys = append(s.svc.keys, received{r.URL.Path, r.Header.Get(adapter.HeaderIdempotencyKey)})
		s.svc.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	return s
}

// serve starts h on a loopback server that accepts HTTP/1.1 and HTTP/2
// with prior knowledge (h2c), and returns its URL.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// httpClient returns a client that speaks HTTP/1.1 only, or HTTP/2 over
// cleartext only.
func httpClient(t testing.TB, h2c bool) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if h2c {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (s *server) client(t testing.TB, p protocol, opts ...connect.ClientOption) testv1connect.TestServiceClient {
	return testv1connect.NewTestServiceClient(httpClient(t, p.h2c), s.url, append(slices.Clone(p.opts), opts...)...)
}

type received struct{ path, key string }

func (s *server) received() []received {
	s.svc.mu.Lock()
	defer s.svc.mu.Unlock()
	return slices.Clone(s.svc.keys)
}

// httpMajor reports the HTTP major versions the server saw requests with.
func (s *server) httpMajor() []int {
	s.svc.mu.Lock()
	defer s.svc.mu.Unlock()
	return slices.Compact(slices.Sorted(slices.Values(s.svc.protos)))
}

func wantConnectCode(t *testing.T, err error, want connect.Code) *connect.Error {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		t.Fatalf("error %v (%T) is not a *connect.Error; want code %s", err, err, want)
	}
	if ce.Code() != want {
		t.Fatalf("connect code %s (%v), want %s", ce.Code(), err, want)
	}
	return ce
}

func request(r *testv1.Request) *connect.Request[testv1.Request] { return connect.NewRequest(r) }
