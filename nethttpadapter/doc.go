// Package nethttpadapter governs plain net/http routes with the agentsafe
// engine: one wrapped handler per route, or one wrapped ServeMux.
//
//	reg := middleware.NewRegistry().
//		Register("refund", middleware.Capability{
//			SideEffect: middleware.SideEffectWrite,
//			Idempotent: true,
//			Timeout:    5 * time.Second,
//			Retry:      middleware.Retry{MaxRetries: 1},
//		})
//	eng, err := middleware.New(reg)
//	// ...
//	mux.Handle("POST /refunds", nethttpadapter.Wrap(eng, "refund", refundHandler))
//
// or, naming each capability by the pattern it is routed by:
//
//	reg.Register("POST /refunds", ...)
//	http.ListenAndServe(addr, nethttpadapter.WrapMux(eng, mux))
//
// Wrap panics at start-up when the engine governs no capability of the
// name it is given, so a typo cannot leave a route unprotected. WrapMux
// serves a pattern the engine does not govern untouched (a mux may hold
// ungoverned routes), and refuses a path the mux would redirect to a
// governed pattern before anything runs: 400 INVALID_ARGUMENT naming the
// canonical path (see [WrapMux]).
//
// # What happens to a governed request
//
//  1. The body is read once, at most [WithMaxBodyBytes] (1 MiB by default).
//     A larger body is refused with 413 and a JSON envelope (code
//     INVALID_ARGUMENT, the message names the limit); nothing runs, and the
//     refusal is recorded as an execution that never ran
//     ([middleware.Engine.Refuse]), so it has an execution id. The
//     body is not parsed: malformed JSON reaches the handler as sent, and
//     the handler validates it.
//  2. The engine opens the execution with the request's input (method,
//     cleaned path, sorted query, [WithBoundHeaders], and the body —
//     canonical JSON for JSON media types) and the Agentsafe-Approval-Id
//     request header, and runs the approval gate.
//  3. Each attempt runs the handler on its own copy of the request
//     (r.Clone with the attempt's context, a fresh reader over the same
//     body) and writes into its own buffer, bounded by
//     [WithMaxResponseBytes] (8 MiB by default). The buffered writer does
//     not implement http.Flusher or http.Hijacker and gives no way to the
//     real writer, so an attempt that was abandoned at its deadline, or
//     that failed, can never write to the client; once the execution is
//     final, its Write returns http.ErrHandlerTimeout. Like a server
//     request, an attempt's request has no GetBody.
//  4. A handler signals failure by its status: 500 or more is
//     EXECUTION_FAILED, retryable (where the capability allows retries) for
//     502, 503 and 504. Anything below 500 is the handler's answer, 4xx
//     included. A handler that returns after its context ended without
//     writing, or with a status of 500 or more, gave up: the attempt timed
//     out (TIMEOUT) or its caller left (CANCELLED). One that answers below
//     500 after it was abandoned is reported as a late success
//     (capability.abandoned_result), though its answer is discarded.
//  5. Only the finalized attempt's status, headers, body and trailers reach
//     the client, with the envelope's ids added as Agentsafe-Execution-Id,
//     Agentsafe-Attempts and Agentsafe-Approval-Id headers (the handler
//     cannot override them, nor send them as trailers). That includes the handler's own 5xx response:
//     it passes through as written.
//  6. Outcomes the engine decides (timeout, cancellation, approval, panic,
//     refusals) are answered with the JSON envelope
//     {"status","executionId","procedure","attempts","error":{"code",
//     "message","retryable"},"approvalId"} and the status of
//     [middleware.Code.HTTPStatus]: 504, 499, 428, 409, 403, 503, 401,
//     429, 404, 400, and 500 for a panic, concealed. A panic with
//     http.ErrAbortHandler is re-raised on the serving goroutine once the
//     execution is final, so the server aborts the response as usual.
//
// Informational (1xx) responses of a buffered attempt are dropped: they
// cannot be held back until the execution is final.
//
// # Stream mode
//
// A capability with Streaming set (register it with Streaming: true) runs
// in stream mode, for Server-Sent Events, MCP streamable HTTP, or anything
// that flushes: the handler runs once, synchronously, writing straight to
// the client (Flush works, and http.ResponseController reaches the real
// writer); it is never retried, the ids are in the response headers before
// the handler runs, and a timeout applies only if the capability sets one,
// and then it only cancels the context. The body is not read ahead but is
// still bounded by WithMaxBodyBytes. When the handler fails before writing
// anything, the JSON envelope is the answer; after it has started the
// response nothing can be added, and a panic aborts the response.
//
// # Clients
//
// [EnvelopeFromResponse] reads the envelope back from an *http.Response.
// [IdempotencyKeyTransport] puts the execution's idempotency key on the
// calls a handler makes to the hosts it lists.
package nethttpadapter
