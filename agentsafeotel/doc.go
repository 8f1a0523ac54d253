// Package agentsafeotel reports agentsafe executions to OpenTelemetry: a
// span per execution with a child span per attempt, span events for the
// approval steps, and metrics. It is a [middleware.Tracer], so each
// attempt's span is started IN the attempt's context and the handler's own
// spans (a database call, an outgoing RPC) nest under the attempt that made
// them, and as a tracer that is also a [middleware.EventSink] it receives
// every event on the execution's goroutine; one engine option installs it:
//
//	inst, err := agentsafeotel.New(
//		agentsafeotel.WithTracerProvider(tp), // default: the global provider
//		agentsafeotel.WithMeterProvider(mp),  // default: the global provider
//		agentsafeotel.WithRPCSystem("connectrpc"),
//	)
//	// ...
//	eng, err := middleware.New(reg, inst.EngineOption())
//	err = inst.ObserveEngine(eng) // agentsafe.events.dropped
//
// [WithFilter] leaves executions out (no spans, no metric points); the
// instrumentation scope is [ScopeName] at [Version].
//
// # Spans
//
// Both spans are internal: the framework's own instrumentation (otelconnect,
// otelgrpc, otelhttp) owns the server span, and these nest under it.
//
//	agentsafe <procedure>      one per execution, from open to finalize
//	└── agentsafe.attempt      one per attempt; the handler runs in its context
//	    └── (the handler's own spans)
//
// The execution span carries, at its start: rpc.method (the procedure
// without its leading slash, as the RPC semantic conventions spell it) —
// or, for a net/http route, http.route and, when the route's name is a
// ServeMux pattern with a method, http.request.method —
// rpc.system.name (with [WithRPCSystem]), agentsafe.execution_id,
// agentsafe.side_effect, agentsafe.risk, agentsafe.input_digest (keyed when
// the engine has a digest key), agentsafe.actor.id and agentsafe.actor.tenant,
// agentsafe.streaming for streams; at its end: agentsafe.code ("OK" on
// success), agentsafe.status (the envelope's), agentsafe.attempts,
// agentsafe.approval_id when an approval was requested or consumed,
// agentsafe.retryable when the envelope carries an error (safe for the
// CALLER to re-invoke), and error.type (the code) for failed and cancelled
// executions, whose status is Error; an approval request is not an error.
//
// An attempt span carries agentsafe.attempt (from 1), agentsafe.execution_id,
// agentsafe.code and, on failure, agentsafe.retryable (the engine's RUNTIME
// classification), error.type and status Error; agentsafe.abandoned when
// the engine stopped waiting at the deadline, in which case the span ends
// then, with TIMEOUT, while the handler may still be running.
//
// # Span events
//
// capability.approval_requested (agentsafe.approval_id, agentsafe.reason),
// capability.approval_consumed (agentsafe.approver.id),
// capability.approval_denied and capability.approval_stale (agentsafe.code,
// agentsafe.reason) go on the execution's span. capability.approved and .rejected happen where the
// approver decides (an approval console, maybe on another instance): they
// go on the span of the context given to [middleware.Engine.Decide], if one
// is recording, naming the requesting execution. For a capability with
// budgets, capability.started and capability.budget_exceeded go on the
// execution's span too, with agentsafe.budget (its name),
// agentsafe.budget.amount, agentsafe.budget.spent and
// agentsafe.budget.limit, and agentsafe.retry_after (seconds) on a deny
// budget's refusal.
//
// # Metrics
//
// Points carry rpc.method, or http.route and http.request.method for
// net/http routes (and rpc.system.name when set), never an id or digest:
//
//	agentsafe.executions           counter    {execution}  by agentsafe.code
//	agentsafe.execution.duration   histogram  s            by agentsafe.code; buckets 1ms … 60s
//	agentsafe.execution.attempts   histogram  {attempt}    executions that ran at least one attempt
//	agentsafe.retries              counter    {retry}      by agentsafe.previous_code
//	agentsafe.approval.wait        histogram  s            request to decision, by agentsafe.decision
//	agentsafe.abandoned_results    counter    {result}     late results, by agentsafe.succeeded
//	agentsafe.events.dropped       counter    {event}      by agentsafe.sink ([Instrumentation.ObserveEngine])
//	agentsafe.budget.spent         gauge      {amount}     what the window held at the last call, by agentsafe.budget
//	agentsafe.budget.limit         gauge      {amount}     the budget's limit, by agentsafe.budget
//	agentsafe.budget.exceeded      counter    {call}       calls over a budget, refused or escalated, by agentsafe.budget
//
// # What is never recorded
//
// Payloads: no input, no output, no error text, no stack, no approver's
// comment; only ids, the input digest, codes and counts. The README's
// "Observability" section shows the package in place.
package agentsafeotel
