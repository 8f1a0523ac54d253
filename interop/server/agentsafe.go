package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// newEngine governs every procedure of the ConformanceService: a read, with
// a 30s timeout per attempt, and runtime retries on the unary procedures,
// so that the retry machinery (request clones, per-attempt header sinks)
// stands between the handler and the wire too. The suite's handler fails
// with Unavailable when a case asks it to (Errors, unary/unavailable):
// those calls run three times.
//
// The procedures are listed from the service descriptor rather than by
// hand, so a method added to the service cannot stay ungoverned. The
// generated code links that descriptor into protoregistry.GlobalFiles,
// where the engine looks by default: there it learns which procedures
// stream and checks that every registry name is a method, so the engine is
// built without WithProtoFiles.
//
// Events carry digests keyed with a key of the process's own, as a
// deployment's would (without one the engine warns at start). counter, when
// not nil, is installed as the engine's tracer, and so receives every
// event.
func newEngine(counter *eventCounter) (*middleware.Engine, error) {
	reg := middleware.NewRegistry()
	methods := conformancev1.File_connectrpc_conformance_v1_service_proto.Services().ByName("ConformanceService").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		c := middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 30 * time.Second}
		if !md.IsStreamingClient() && !md.IsStreamingServer() {
			c.Retry = middleware.Retry{MaxRetries: 2}
		}
		reg.Register(adapter.Procedure(md), c)
	}
	opts := []middleware.Option{middleware.WithDigestKey([]byte(rand.Text()))}
	if counter != nil {
		opts = append(opts, middleware.WithTracer(counter))
	}
	return middleware.New(reg, opts...)
}

// eventCounter counts the engine's events by type, so that a run can show
// what the engine did: how many executions, and how many runtime retries.
// It is a [middleware.Tracer] that is also an [middleware.EventSink]: the
// engine hands it every event synchronously, so the counts are exact once
// the server has stopped (an ordinary sink's queue might still hold some).
// Its tracing adds nothing to the contexts.
type eventCounter struct {
	mu sync.Mutex
	n  map[middleware.EventType]int
}

func newEventCounter() *eventCounter {
	return &eventCounter{n: make(map[middleware.EventType]int)}
}

func (c *eventCounter) HandleEvent(_ context.Context, e middleware.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[e.Type]++
}

func (c *eventCounter) StartExecution(context.Context, middleware.ExecutionInfo) (context.Context, func(middleware.Envelope)) {
	return nil, nil
}

func (c *eventCounter) StartAttempt(context.Context, int) (context.Context, func(middleware.AttemptOutcome)) {
	return nil, nil
}

// writeTo writes the counts as one line, "type=count" pairs sorted by type.
func (c *eventCounter) writeTo(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	types := make([]string, 0, len(c.n))
	for t, n := range c.n {
		types = append(types, fmt.Sprintf("%s=%d", t, n))
	}
	slices.Sort(types)
	_, err := fmt.Fprintln(w, strings.Join(types, " "))
	return err
}
