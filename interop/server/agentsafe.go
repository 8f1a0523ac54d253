package main

import (
	"time"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/middleware"
)

// newEngine governs every procedure of the ConformanceService: a read, with
// a 30s timeout per attempt, and runtime retries on the unary procedures,
// so that the retry machinery (request clones, per-attempt header sinks)
// stands between the handler and the wire too.
//
// The procedures are listed from the service descriptor rather than by
// hand, so a method added to the service cannot stay ungoverned. The
// generated code links that descriptor into protoregistry.GlobalFiles,
// where the engine looks by default and learns which procedures stream
// (SPEC §2 also has it check registry names there), so the engine is
// built without WithProtoFiles.
func newEngine() (*middleware.Engine, error) {
	reg := middleware.NewRegistry()
	methods := conformancev1.File_connectrpc_conformance_v1_service_proto.Services().ByName("ConformanceService").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		c := middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 30 * time.Second}
		if !md.IsStreamingClient() && !md.IsStreamingServer() {
			c.Retry = middleware.Retry{MaxAttempts: 2}
		}
		reg.Register(middleware.Procedure(md), c)
	}
	return middleware.New(reg)
}
