// Package middleware is the agentsafe engine, as applications see it:
// capability metadata and its validation, the engine that runs governed
// calls, the result envelope, audit events, and the approvals of the
// engine's audience. It knows no framework: the adapters (connectadapter,
// grpcadapter, twirpadapter, nethttpadapter, and the MCP bridge
// mcpadapter) translate their framework to an [Engine] through the adapter
// SPI in middleware/adapter, so every guarantee lives here once. The
// README (https://github.com/agentsafe/agentsafe#readme) tells the whole
// story.
//
// # Using the engine
//
// Declare what each procedure does, build one engine at start-up (every
// problem is reported at once), and hand it to the adapter of your
// framework:
//
//	reg := middleware.NewRegistry().
//		Register("/orders.v1.OrderService/GetOrder", middleware.Capability{
//			SideEffect: middleware.SideEffectRead,
//			Retry:      middleware.Retry{MaxRetries: 2}, // at most 3 runs
//		})
//	eng, err := middleware.New(reg, middleware.WithEventSink(middleware.NewSlogSink(nil)))
//	if err != nil {
//		log.Fatal(err) // names every invalid procedure and field
//	}
//	interceptor := connectadapter.NewInterceptor(eng)
//	mux.Handle(interceptor.Guard(ordersv1connect.NewOrderServiceHandler(svc,
//		connect.WithInterceptors(interceptor))))
//
// Capabilities may also come from protobuf method options (see package
// agentsafe.v1 in proto/), which the engine reads from the linked
// descriptors; a registry entry replaces an option as a whole.
//
// # The order things happen in
//
// For each governed call, the adapter resolves the procedure (stage 1) and
// writes the [Envelope] to the wire (stage 8); the engine runs the rest:
//
//  2. Open: execution id, idempotency key, the actor ([WithActor]). First,
//     hiding, before anything that could tell the procedure exists: a call
//     on a surface its capability is not exposed on, or one a policy hides
//     when asked as at a listing (no input; the zero actor when the actor
//     function fails), is answered as if the procedure had no handler,
//     whatever else is wrong with it, and its capability.requested reaches
//     a strict audit sink through its queue. Where a framework decodes a
//     request before any interceptor, the adapter's guard decides this
//     before the body is read (connectadapter's Interceptor.Guard,
//     grpcadapter.Guard; twirpadapter and nethttpadapter do it
//     themselves). Then a caller that has already left ends the execution
//     CANCELLED; the cheap checks (the approval header, the caller's key,
//     the actor, the cap on abandoned attempts); binding the input (its
//     I-JSON check and digest, only when something needs them);
//     capability.requested; the policies ([WithPolicy]), with the input:
//     hide, deny, require approval; the result store (a replay ends here,
//     spending nothing); and the budgets ([Budget], [WithBudgetStore]):
//     reserve the call's amount on each, or refuse (BUDGET_EXCEEDED), or
//     require an approval.
//  3. Approval gate, for capabilities (or policies, or budgets) that
//     require one: a call without an approval id requests one; a call with
//     one consumes it, atomically. A capability with a Preview has it
//     computed at both: the record keeps its text and the digest of its
//     state, and the consumption checks that the state is still the
//     approved one (APPROVAL_STALE otherwise). The approved resume of a
//     budget that required approval reserves past the limit, an
//     overdraft.
//  4. Start: emit capability.started (with the budget nearest its limit).
//  5. Attempts: each attempt runs on its own goroutine under the caller's
//     context plus its own timeout. The engine returns when the handler
//     returns OR the attempt's context ends, whichever is first ("bounded
//     reporting"); a late result is discarded and reported as
//     capability.abandoned_result. A failed attempt is retried only when
//     every condition holds: retries remain (Retry.MaxRetries counts
//     re-attempts AFTER the first run), the error is retryable, the
//     capability is none/read or declared Idempotent, Retry.RetryOn does not
//     veto, and the caller's deadline outlasts the backoff. A write-like
//     capability never has two attempts running at once. The caller's
//     cancellation is terminal, backoff included. An Inline capability
//     runs its attempts on the caller's goroutine instead (see below).
//  6. Finalize, exactly once: one envelope, one final event
//     (capability.completed, .failed or .cancelled). Budget reservations
//     are given back when nothing ran, or every attempt returned
//     [NoEffect]; otherwise they are spent.
//  7. Sinks receive the events through queues of their own ([WithEventSink]),
//     or on the execution's goroutine ([SinkInline]).
//
// Handlers learn their execution id, idempotency key, attempt number, actor
// and approval through [ExecutionFromContext]. The idempotency key is stable
// across runtime retries and unique across executions: pass it to the
// system where the effect lives. Exactly-once effects are not promised.
//
// # What the approver sees is what runs
//
// A capability's Preview ([Capability].Preview, or [WithPreview] for one
// declared by method options) computes from the server's state the
// effect a call would have: its Text is what approvers see first, and the
// approval is bound to the digest of its State. A resume whose preview
// computes another State is refused APPROVAL_STALE: nothing runs, nothing
// is consumed, and the record stays approved. The preview, the
// consumption and the handler's write are not one atomic step, so the
// handler makes its write conditional on [Execution].ApprovedState in its
// own transaction, and returns [NoEffect] when it finds the state changed:
// the approval goes back to approved.
//
//	x, _ := middleware.ExecutionFromContext(ctx)
//	// UPDATE orders SET … WHERE id = $1 AND version = $approved
//	if rows == 0 {
//		return nil, middleware.NoEffect(errOrderChanged)
//	}
//
// # Inline: no hand-off, for handlers that honour their context
//
// Running each attempt on a goroutine of its own is what lets the engine
// answer at the deadline even when the handler ignores its context; it
// costs a hand-off per call (about 1.7µs of CPU on a small machine). A
// handler that honours its context does not need it. Declare such a
// capability [Capability].Inline (or inline: true in the method option)
// and its unary attempts run on the caller's goroutine.
//
// Choose Inline for handlers you have read and that pass their context to
// everything that waits: database/sql's QueryContext and ExecContext, pgx
// (every call takes the context), net/http clients with
// http.NewRequestWithContext, gRPC and Connect clients, time.After
// replaced by a select on ctx.Done(). Leave it off for handlers that call
// libraries that take no context, sleep, or hold locks across slow work.
//
// What is lost: bounded reporting rests on the handler. The engine waits
// for an Inline handler however late it returns, so one that ignores its
// context holds its caller (and its abandoned-attempt cap no longer
// applies: nothing is abandoned). Everything else holds: a result
// returned after the attempt's context ended is discarded and the call is
// TIMEOUT or CANCELLED as before; because that late result is known when
// the execution finalizes, a consumed approval and a caller's key record
// it at once (late, never in_doubt) and no capability.abandoned_result
// follows; panics are recovered; retries, backoff, the write-like rule
// and cancellation are unchanged; streams are unaffected.
//
// How a broken promise is found: an Inline attempt that returns more than
// [Defaults].OverrunGrace (100ms) after its context ended emits
// capability.deadline_overrun {Attempt, Duration: the overrun} before the
// final event, and the engine's logger warns, at most once a minute per
// procedure. Alert on either, and take Inline off the procedure until its
// handler is fixed. Turning Inline on is widening for the drift gate
// (cmd/agentsafe check), so a review sees it.
//
// [SinkInline] makes the same trade for an event sink that never blocks:
// no worker and no queue, and its time counts in the call's.
//
// # Errors
//
// Every outcome has a [Code]. A plain Go error from a handler is concealed
// behind "the operation failed" (its text goes to events, through
// [WithRedactor]); an *[Error] the handler returns on purpose keeps its
// message, and a framework's own error (a *connect.Error, a gRPC status, a
// twirp.Error, a net/http 5xx) reaches the caller unchanged. [Retryable]
// marks an error as transient for the default classifier
// ([WithClassifier]). On the wire, an envelope's Retryable means "safe for
// the caller to re-invoke", which a runtime-retryable TIMEOUT of a
// non-idempotent write is not.
//
// # Strict audit
//
// With [WithAuditSink], capability.requested and capability.started are
// stored before a call goes on: no record, no effect (AUDIT_UNAVAILABLE).
// The sink's writes are made by one worker, in order; a [BatchAuditSink]
// gets every record waiting for it in one RecordBatch, all or none, so
// concurrent calls share a write (package agentsafepg's sink is one
// INSERT a batch). One record's content never fails another's call: the
// sink says which record it cannot store (a [*BatchError], or a database
// error in SQLSTATE class 22), and the engine splits the batch until that
// record is alone; only that record's call fails, or, for a record
// nobody waits for, it is counted as dropped ([Engine.Stats]). A
// transient failure keeps the queued records for the next write, once the
// sink is back. A record whose call gave up waiting is never written, and
// a queue that falls behind refuses new calls at once.
//
// # Testing
//
// Package agentsafetest records the audit trail (Recorder, WaitFinal) and
// runs engines inside testing/synctest bubbles (Test).
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
