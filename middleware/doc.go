// Package middleware is the agentsafe engine: capability metadata and its
// validation, the execution pipeline, the result envelope and audit events.
// It knows no framework; the adapters (connectadapter, twirpadapter,
// nethttpadapter, grpcadapter) translate their framework to an [Engine] and
// back, so every guarantee lives here once.
//
// # Using the engine
//
//	reg := middleware.NewRegistry().
//		Register("/orders.v1.OrderService/GetOrder", middleware.Capability{
//			SideEffect: middleware.SideEffectRead,
//			Retry:      middleware.Retry{MaxRetries: 2}, // at most 3 runs
//		})
//	eng, err := middleware.New(reg, middleware.WithEventSink(middleware.NewSlogSink(nil)))
//	// ...
//	v, env, err := eng.Execute(ctx, middleware.Call{Procedure: proc, Input: in}, attempt)
//
// # The order things happen in
//
// [Engine.Execute] runs stages 2 to 7 of the pipeline; an adapter does
// stage 1 (resolve the procedure, build the [Call]) and stage 8 (write the
// [Envelope] to the wire):
//
//  2. Open: execution id, idempotency key, actor ([WithActor]), input digest;
//     emit capability.requested. A caller that has already left ends the
//     execution CANCELLED and nothing runs.
//  3. Approval gate, for capabilities that require one.
//  4. Start: emit capability.started.
//  5. Attempts: each attempt runs the AttemptFunc on its own goroutine under
//     the caller's context plus its own timeout. The engine returns when the
//     handler returns OR the attempt's context ends, whichever is first
//     ("bounded reporting"); a late result is discarded and reported as
//     capability.abandoned_result. A failed attempt is retried only when
//     every condition holds: retries remain (Retry.MaxRetries counts
//     re-attempts AFTER the first run), the error is retryable, the
//     capability is none/read or declared Idempotent, Retry.RetryOn does not
//     veto, and the caller's deadline outlasts the backoff. A write-like
//     capability never has two attempts running at once. The caller's
//     cancellation is terminal, backoff included.
//  6. Finalize, exactly once: one envelope, one final event
//     (capability.completed, .failed or .cancelled).
//  7. Sinks see the final event.
//
// Handlers learn their execution id, idempotency key, attempt number, actor
// and approval through [ExecutionFromContext]. The idempotency key is stable
// across runtime retries and unique across executions: pass it to the
// system where the effect lives. Exactly-once effects are not promised.
//
// # Errors
//
// Every outcome has a [Code]. A plain Go error from a handler is concealed
// behind "the operation failed" (its text goes to events, through
// [WithRedactor]); an *[Error] the handler returns on purpose keeps its
// message. [Retryable] marks an error as transient for the default
// classifier ([WithClassifier]). On the wire, an envelope's Retryable means "safe for the
// caller to re-invoke", which a runtime-retryable TIMEOUT of a
// non-idempotent write is not.
//
// # Tracing
//
// A [Tracer] ([WithTracer]) gets a context of its own around the execution
// and around each attempt: the attempt's context is the tracer's plus the
// attempt's timeout, so a span started there is the parent of the
// handler's own spans. Package agentsafeotel implements it with
// OpenTelemetry. Without a tracer nothing is called or allocated for it.
//
// # Time
//
// Attempt timeouts and backoff run on the runtime's timers, which
// testing/synctest fakes; [WithClock] stamps events and measures durations.
package middleware
