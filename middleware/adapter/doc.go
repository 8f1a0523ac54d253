// Package adapter is the SPI between the agentsafe engine and the adapters
// that translate a framework to it (connectadapter, grpcadapter,
// twirpadapter, nethttpadapter, and any adapter of your own): the typed
// execution contract, the wire format every adapter writes, and the helpers
// their client sides share. Applications do not need it; they use package
// middleware and an adapter.
//
// An adapter does stage 1 and stage 8 of the pipeline; the engine does the
// rest, once, for every adapter:
//
//	r := adapter.Resolve(eng, procedure)          // 1. resolve, once per call
//	if !r.Governed() {
//		return next(ctx, req)                     //    ungoverned: untouched
//	}
//	in := req                                     //    a snapshot only when a retry is possible
//	if r.MayRetry() { snapshot = clone(req) }
//	sink, env, err := adapter.Execute(ctx, r, adapter.Call[*sink]{
//		Input:      adapter.ProtoInput(req),
//		ApprovalID: header.Get(adapter.HeaderApprovalID),
//		Surface:    adapter.SurfaceRPC,
//		Status:     frameworkStatus,              // the framework's error → its code
//	}, func(ctx context.Context) (*sink, error) { // one attempt: its own input and sink
//		...
//	})
//	if adapter.Hidden(err) {
//		return frameworkNotFound()                //    hidden: what a missing procedure gets, nothing more
//	}
//	adapter.SetHeaders(responseHeader, env)       // 8. the envelope on the wire
//	if own, ok := adapter.HandlerError(err); ok {
//		return own                                //    the framework's own error, unchanged
//	}
//
// Where the framework reads the request before any of the adapter's code
// can run (it decodes the body before its interceptors, say), the adapter
// also offers a guard that runs first and asks [Route.Absent] before
// anything of the request is read; a hidden call then gets the
// framework's not-found and nothing else, whatever its body, headers or
// deadline:
//
//	if adapter.Resolve(eng, procedureFromPath).Absent(ctx, adapter.SurfaceRPC) {
//		return frameworkNotFound()                //    recorded; nothing of the request read
//	}
//
// Package conformance checks an adapter against every rule it could
// break; see its RunAdapter. The README's "Writing your own adapter" walks
// through one.
package adapter
