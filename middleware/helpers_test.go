package middleware_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A sink's worker waits about a second for events before it exits:
	// idle, it is not a leak.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/agentsafe/agentsafe/middleware.(*sinkQueue).work"))
}

const (
	procRead      = "/test.v1.Svc/Read"
	procWrite     = "/test.v1.Svc/Write"
	procIdemWrite = "/test.v1.Svc/IdempotentWrite"
)

// fixture is an engine with a recorder, built from one capability per test.
type fixture struct {
	t   *testing.T
	eng *middleware.Engine
	rec *agentsafetest.Recorder
}

func newFixture(t *testing.T, procedure string, c middleware.Capability, opts ...middleware.Option) *fixture {
	t.Helper()
	rec := &agentsafetest.Recorder{}
	// The tests' procedures name no linked descriptor: no existence check.
	opts = append([]middleware.Option{middleware.WithEventSink(rec), middleware.WithProtoFiles(nil), middleware.WithLogger(discard)}, opts...)
	eng, err := middleware.New(middleware.NewRegistry().Register(procedure, c), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{t: t, eng: eng, rec: rec}
}

func (f *fixture) run(ctx context.Context, procedure string, fn func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	return execute(f.eng, ctx, call{Procedure: procedure}, fn)
}

// events waits for the execution's final event (sinks are delivered
// asynchronously) and returns its events so far, in order.
func (f *fixture) events(executionID string) []middleware.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := f.rec.WaitFinal(ctx, executionID)
	if err != nil {
		f.t.Fatalf("execution %s has no final event: %v (events %v)", executionID, err, evs)
	}
	return evs
}

// types returns the event types of one execution, in order, once it has
// its final event.
func (f *fixture) types(executionID string) []middleware.EventType {
	var out []middleware.EventType
	for _, e := range f.events(executionID) {
		out = append(out, e.Type)
	}
	return out
}

func (f *fixture) wantTypes(executionID string, want ...middleware.EventType) {
	f.t.Helper()
	if got := f.types(executionID); !slices.Equal(got, want) {
		f.t.Errorf("events of %s:\n got %v\nwant %v", executionID, got, want)
	}
}

func (f *fixture) final(executionID string) middleware.Event {
	f.t.Helper()
	for _, e := range f.events(executionID) {
		if e.Type.Final() {
			return e
		}
	}
	panic("unreachable")
}

// counter is a handler that records what each attempt saw.
type counter struct {
	runs atomic.Int32
	seen chan middleware.Execution
}

func newCounter() *counter { return &counter{seen: make(chan middleware.Execution, 64)} }

func (c *counter) note(ctx context.Context) middleware.Execution {
	c.runs.Add(1)
	x, _ := middleware.ExecutionFromContext(ctx)
	c.seen <- x
	return x
}

func (c *counter) executions() []middleware.Execution {
	var out []middleware.Execution
	for {
		select {
		case x := <-c.seen:
			out = append(out, x)
		default:
			return out
		}
	}
}

var errTransient = middleware.Retryable(errors.New("transient: backend unavailable"))

func wantCode(t *testing.T, env middleware.Envelope, err error, code middleware.Code) {
	t.Helper()
	if got := middleware.CodeOf(err); got != code {
		t.Fatalf("CodeOf(err) = %s, want %s (err: %v)", got, code, err)
	}
	if code == middleware.CodeOK {
		if env.Error != nil || env.Status != middleware.StatusCompleted {
			t.Fatalf("envelope %+v, want completed", env)
		}
		return
	}
	if env.Error == nil || env.Error.Code != code {
		t.Fatalf("envelope error %+v, want code %s", env.Error, code)
	}
}

func read(retries int, timeout time.Duration) middleware.Capability {
	return middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: timeout, Retry: middleware.Retry{MaxRetries: retries, Backoff: 10 * time.Millisecond}}
}

// call is what the tests hand the engine: the procedure and the parts of
// an adapter.Call they use.
type call struct {
	Procedure  string
	Input      adapter.Input
	ApprovalID string
}

// execute runs one call through the adapter SPI, as an adapter would.
func execute(eng *middleware.Engine, ctx context.Context, c call, fn func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	return adapter.Execute(ctx, adapter.Resolve(eng, c.Procedure), adapter.Call[any]{Input: c.Input, ApprovalID: c.ApprovalID, Surface: adapter.SurfaceRPC}, fn)
}

func executeStream(eng *middleware.Engine, ctx context.Context, c call, fn func(context.Context) error) (middleware.Envelope, error) {
	return adapter.ExecuteStream(ctx, adapter.Resolve(eng, c.Procedure), adapter.Call[struct{}]{Surface: adapter.SurfaceRPC}, fn)
}

func refuse(eng *middleware.Engine, ctx context.Context, c call, err *middleware.Error) (middleware.Envelope, error) {
	return adapter.Refuse(ctx, adapter.Resolve(eng, c.Procedure), adapter.Call[struct{}]{ApprovalID: c.ApprovalID, Surface: adapter.SurfaceRPC}, err)
}

// inBubble runs f in a testing/synctest bubble and, before the bubble
// ends, lets its fake clock run past the time an idle sink worker waits
// before it exits: time stops when the bubble's root goroutine returns, so
// the workers must be gone by then.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(2 * time.Second) })
		f(t)
	})
}

// waitEvent waits for an event of type typ of the execution and returns it.
func (f *fixture) waitEvent(executionID string, typ middleware.EventType) middleware.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := f.rec.Wait(ctx, executionID, func(evs []middleware.Event) bool {
		return slices.ContainsFunc(evs, func(e middleware.Event) bool { return e.Type == typ })
	})
	if err != nil {
		f.t.Fatalf("execution %s emitted no %s: %v (events %v)", executionID, typ, err, evs)
	}
	for _, e := range evs {
		if e.Type == typ {
			return e
		}
	}
	panic("unreachable")
}
