package main

import (
	"context"
	"strings"
	"testing"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestEngineGovernsEveryProcedureAndRetriesUnary(t *testing.T) {
	eng, err := newEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	caps := make(map[string]middleware.Capability)
	for proc, c := range eng.Capabilities() {
		caps[proc] = c
	}
	methods := conformancev1.File_connectrpc_conformance_v1_service_proto.Services().ByName("ConformanceService").Methods()
	if len(caps) != methods.Len() {
		t.Errorf("the engine governs %d procedures, the service has %d", len(caps), methods.Len())
	}
	for i := range methods.Len() {
		md := methods.Get(i)
		c, ok := caps[adapter.Procedure(md)]
		if !ok {
			t.Errorf("%s is not governed", md.FullName())
			continue
		}
		streaming := md.IsStreamingClient() || md.IsStreamingServer()
		if c.Streaming != streaming {
			t.Errorf("%s: Streaming = %v, want %v", md.FullName(), c.Streaming, streaming)
		}
		if want := map[bool]int{false: 2, true: 0}[streaming]; c.Retry.MaxRetries != want {
			t.Errorf("%s: MaxRetries = %d, want %d", md.FullName(), c.Retry.MaxRetries, want)
		}
	}
}

func TestEventCounterWritesOneSortedLine(t *testing.T) {
	c := newEventCounter()
	for _, typ := range []middleware.EventType{middleware.EventRetried, middleware.EventCompleted, middleware.EventRetried} {
		c.HandleEvent(context.Background(), middleware.Event{Type: typ})
	}
	var b strings.Builder
	if err := c.writeTo(&b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "capability.completed=1 capability.retried=2\n"; got != want {
		t.Errorf("writeTo wrote %q, want %q", got, want)
	}
}
