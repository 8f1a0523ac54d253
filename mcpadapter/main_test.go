package mcpadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// waitBound bounds every wait; reaching it fails the test instead of
// hanging it.
const waitBound = 5 * time.Second

// secret is what failing handlers put in their errors; it must never
// reach a tool result.
const secret = "db password=hunter2"

// The people of the tests: the agent calls tools, the manager approves.
var (
	agent   = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent"}
	manager = middleware.Actor{ID: "manager-1", Tenant: "acme", Kind: "user"}
)

// service implements the test service; every unary method behaves as its
// request's mode says.
type service struct {
	testv1connect.UnimplementedTestServiceHandler
	mu      sync.Mutex
	runs    []middleware.Execution
	started chan string   // request ids, as handlers start
	ended   chan error    // what blocking handlers returned
	release chan struct{} // closed: handlers in mode "hold" go on
}

func newService() *service {
	return &service{started: make(chan string, 64), ended: make(chan error, 64), release: make(chan struct{})}
}

func (s *service) executions() []middleware.Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs)
}

func (s *service) unary(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	s.runs = append(s.runs, x)
	s.mu.Unlock()
	s.started <- req.Msg.GetId()
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		ci.ResponseHeader().Set("X-Served-By", "test-service")
	}
	switch req.Msg.GetMode() {
	case "block":
		<-ctx.Done()
		s.ended <- ctx.Err()
		return nil, ctx.Err()
	case "hold": // until the test releases it
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "fail":
		return nil, errors.New("query failed: " + secret)
	case "flaky":
		if int32(x.Attempt) <= req.Msg.GetFailTimes() {
			return nil, middleware.Retryable(errors.New("connection reset: " + secret))
		}
	case "declared":
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("ALREADY_DONE: the record was written before"))
	}
	return connect.NewResponse(&testv1.Response{Id: req.Msg.GetId(), Attempt: int32(x.Attempt), ExecutionId: x.ID, IdempotencyKey: x.IdempotencyKey, Note: x.Actor.ID}), nil
}

func (s *service) Read(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}
func (s *service) Write(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}
func (s *service) IdempotentWrite(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}
func (s *service) Slow(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}
func (s *service) Gated(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}
func (s *service) Ungoverned(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.unary(ctx, r)
}

// The service's own authentication: a bearer token that is the user's id.
// It runs before the agentsafe interceptor, as the adapter asks, and the
// engine's actor function reads what it found.
type userKey struct{}

func authenticate(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		user, ok := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a bearer token is required"))
		}
		// "refuse:<code>" is refused with that Connect code, before the
		// engine runs.
		if user == "refuse:context" { // as an interceptor that returns ctx.Err() would
			return nil, connect.NewError(connect.CodeCanceled, context.Canceled)
		}
		if name, refuse := strings.CutPrefix(user, "refuse:"); refuse {
			var code connect.Code
			_ = code.UnmarshalText([]byte(name))
			return nil, connect.NewError(code, errors.New("refused by the service: "+name))
		}
		return next(context.WithValue(ctx, userKey{}, user), req)
	}
}

// actorOf is the engine's actor function: a plain token is an agent of
// tenant acme; "id@tenant/kind[/for:a,b]" says every part of the actor.
func actorOf(ctx context.Context) (middleware.Actor, error) {
	user, ok := ctx.Value(userKey{}).(string)
	if !ok {
		return middleware.Actor{}, errors.New("no user")
	}
	id, rest, full := strings.Cut(user, "@")
	if !full {
		return middleware.Actor{ID: user, Tenant: "acme", Kind: "agent"}, nil
	}
	a := middleware.Actor{ID: id}
	parts := strings.Split(rest, "/")
	a.Tenant = parts[0]
	if len(parts) > 1 {
		a.Kind = parts[1]
	}
	if len(parts) > 2 {
		a.OnBehalfOf = strings.Split(strings.TrimPrefix(parts[2], "for:"), ",")
	}
	return a, nil
}

// bearer is a header function for transports without HTTP headers: every
// call is the agent's.
func bearer(user string) mcpadapter.Option {
	return mcpadapter.WithHeaders(func(context.Context, *mcp.CallToolRequest) (http.Header, error) {
		return http.Header{"Authorization": {"Bearer " + user}}, nil
	})
}

// fixture is the test service, governed by an engine with an approval
// store, behind the service's authentication, bridged to MCP.
type fixture struct {
	svc    *service
	eng    *middleware.Engine
	rec    *agentsafetest.Recorder
	bridge *mcpadapter.Bridge
	mux    *http.ServeMux
}

type fixtureConfig struct {
	reg        *middleware.Registry
	engineOpts []middleware.Option
	bridgeOpts []mcpadapter.Option
}

func newFixture(t *testing.T, cfg fixtureConfig) *fixture {
	t.Helper()
	f := &fixture{svc: newService(), rec: &agentsafetest.Recorder{}}
	opts := append([]middleware.Option{
		// A machine loaded by other builds may hold the recorder past the
		// default bound, which would drop the rest of that execution's trail.
		middleware.WithEventSink(f.rec, middleware.SinkTimeout(waitBound)),
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithActor(actorOf),
	}, cfg.engineOpts...)
	eng, err := middleware.New(cfg.reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.eng = eng
	f.mux = http.NewServeMux()
	interceptor := connectadapter.NewInterceptor(eng)
	f.mux.Handle(interceptor.Guard(testv1connect.NewTestServiceHandler(f.svc, connect.WithInterceptors(connect.UnaryInterceptorFunc(authenticate), interceptor))))
	f.bridge, err = mcpadapter.New(eng, f.mux, []string{testv1connect.TestServiceName}, cfg.bridgeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// connectInMemory serves the bridge's tools on the SDK's in-memory
// transport and returns a client session to it.
func connectInMemory(t *testing.T, b *mcpadapter.Bridge, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := b.NewServer(nil, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// connectHTTP serves the bridge's tools over streamable HTTP on a
// loopback server and returns a client session that presents token as a
// bearer token ("" for none).
func connectHTTP(t *testing.T, b *mcpadapter.Bridge, token string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(b.Handler(nil))
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if token != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return tr.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, copts).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

// text returns the text contents of a result.
func text(r *mcp.CallToolResult) []string {
	var out []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

// envelopeText decodes the first text content, the envelope's JSON form.
func envelopeText(t *testing.T, r *mcp.CallToolResult) middleware.Envelope {
	t.Helper()
	texts := text(r)
	if len(texts) == 0 {
		t.Fatalf("result has no text content: %+v", r)
	}
	var env middleware.Envelope
	if err := json.Unmarshal([]byte(texts[0]), &env); err != nil {
		t.Fatalf("text content %q is not an envelope: %v", texts[0], err)
	}
	return env
}

// structured decodes a result's structured content.
func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := r.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("structured content %T %v, want an object (result %+v)", r.StructuredContent, r.StructuredContent, text(r))
	}
	return m
}

func (f *fixture) waitStarted(t *testing.T, id string) {
	t.Helper()
	for {
		select {
		case got := <-f.svc.started:
			if got == id {
				return
			}
		case <-time.After(waitBound):
			t.Fatalf("the handler of %s did not start", id)
		}
	}
}

// final waits for the final event of an execution.
func (f *fixture) final(t *testing.T, executionID string) middleware.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	evs, err := f.rec.WaitFinal(ctx, executionID)
	if err != nil {
		t.Fatalf("execution %s did not end: %v", executionID, err)
	}
	return evs[len(evs)-1]
}

// endsOnce waits for the final event of an execution, checks that it is
// of type want and the execution's only one, and returns it.
func (f *fixture) endsOnce(t *testing.T, executionID string, want middleware.EventType) middleware.Event {
	t.Helper()
	last := f.final(t, executionID)
	finals := 0
	for _, e := range f.rec.Execution(executionID) {
		if e.Type.Final() {
			finals++
		}
	}
	if last.Type != want || finals != 1 {
		t.Errorf("execution %s ended %s in %d final events, want one %s", executionID, last.Type, finals, want)
	}
	return last
}
