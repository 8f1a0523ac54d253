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
// name it is given, so a typo cannot leave a route unprotected; WrapMux
// serves the patterns the engine does not govern untouched. The
// repository's README shows this adoption next to the other adapters'.
//
// # What happens to a governed request
//
//  0. Before anything of the request is read, the engine decides whether
//     the route is hidden from its caller (a policy hides it, or its
//     capability is not exposed on http): then the answer is the mux's
//     for a path it routes nowhere, http.NotFound's 404, and nothing of
//     agentsafe. [WrapMux] answers any request whose path a hidden
//     pattern matches as the mux would with the hidden patterns removed:
//     a 405 lists in Allow the methods of the patterns its caller may see,
//     and is a 404 when there are none. One difference remains: a pattern
//     without a method (a catch-all) that would serve a hidden pattern's
//     request once that pattern is gone does not; the request gets the
//     mux's 404. A route mounted with [Wrap] on a mux of yours cannot change
//     that mux's 405 for its path's other methods, which names the hidden
//     route's method: use WrapMux where that matters.
//  1. The body is read once, at most [WithMaxBodyBytes] (1 MiB by default).
//     A larger body is refused with 413 and a JSON envelope (code
//     INVALID_ARGUMENT, the message names the limit); nothing runs, and the
//     refusal is recorded as an execution that never ran, so it has an
//     execution id. The body is not parsed: malformed JSON reaches the
//     handler as sent, and the handler validates it.
//  2. The engine opens the execution with the request's input (method,
//     cleaned path, sorted query, [WithBoundHeaders], and the body —
//     canonical JSON for JSON media types) and the Agentsafe-Approval-Id
//     request header, and runs the approval gate.
//  3. Each attempt runs the handler on its own copy of the request
//     (r.Clone with the attempt's context, a fresh reader over the same
//     body) and writes into its own buffer, bounded by
//     [WithMaxResponseBytes] (8 MiB by default), with no way to the real
//     writer (no http.Flusher, no http.Hijacker): an attempt that was
//     abandoned at its deadline, or that failed, never writes to the
//     client; once the execution is final, its Write returns
//     http.ErrHandlerTimeout.
//  4. A handler signals failure by its status, net/http's own error
//     ([StatusError]): 500 or more, or 499. 502 and 503 are transient
//     (retried where the capability allows). A handler that returns after
//     its context ended without writing, or answering 504 or 499, gave up:
//     the attempt timed out (TIMEOUT) or its caller left (CANCELLED).
//     Anything below 500 is the handler's answer, 4xx included. A handler
//     that answers after it was abandoned is reported as a late result
//     (capability.abandoned_result), though its answer is discarded.
//  5. Only the finalized attempt's status, headers, body and trailers reach
//     the client — the handler's own failing response too, as written —
//     with the envelope's headers added: Agentsafe-Execution-Id,
//     Agentsafe-Attempts and Agentsafe-Approval-Id, and on failure
//     Agentsafe-Code and Agentsafe-Retryable. The handler cannot override
//     them, nor send them as trailers.
//  6. Outcomes the engine decides (timeout, approval, policy, panic,
//     concealment, refusals) are answered with the JSON envelope
//     {"status","executionId","procedure","attempts","error":{"code",
//     "message","retryable"},"approvalId"} and the status of
//     [adapter.HTTPStatus]: 504, 428, 409, 403, 503, 401, 429, 404, 400,
//     422, and 500 for a panic, concealed. CANCELLED is answered without a
//     body, the caller having left: 499, or 504 when its own deadline
//     passed. A panic with http.ErrAbortHandler is re-raised on the serving
//     goroutine once the execution is final, so the server aborts the
//     response as usual.
//
// Informational (1xx) responses of a buffered attempt are dropped: they
// cannot be held back until the execution is final.
//
// # Stream mode
//
// A capability with Streaming set runs in stream mode, for Server-Sent
// Events, MCP streamable HTTP, or anything that flushes: the handler runs
// once, synchronously, writing straight to the client (Flush and
// http.ResponseController work) with the envelope's ids in the headers;
// never retried, and timed out only if the capability sets a timeout. The
// body is not read ahead, still bounded by WithMaxBodyBytes. A failing
// response (500 or more, or 499) is held until the execution is final and
// sent as written, with the envelope's code. A handler that fails without
// writing gets the JSON envelope; once its response has started, a panic
// aborts it.
//
// # Clients
//
// [EnvelopeFromResponse] reads the envelope back from an *http.Response.
// [IdempotencyKeyTransport] puts the execution's idempotency key on the
// calls a handler makes to the hosts it lists.
package nethttpadapter
