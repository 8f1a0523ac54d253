package agentsafeotel

import (
	"context"
	"regexp"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/agentsafe/agentsafe/agentsafeotel"

// Version is the instrumentation scope's version.
const Version = "0.2.0"

// The agentsafe attribute keys (the package doc lists where each goes).
// Where OpenTelemetry's RPC semantic conventions have a fitting attribute it
// is used instead: rpc.method (the procedure without its leading slash),
// rpc.system.name (see [WithRPCSystem]) and error.type (the agentsafe code
// of a failure).
const (
	keyExecutionID  = attribute.Key("agentsafe.execution_id")
	keyAttempt      = attribute.Key("agentsafe.attempt")
	keyAttempts     = attribute.Key("agentsafe.attempts")
	keyCode         = attribute.Key("agentsafe.code")
	keyStatus       = attribute.Key("agentsafe.status")
	keyRetryable    = attribute.Key("agentsafe.retryable")
	keyAbandoned    = attribute.Key("agentsafe.abandoned")
	keySideEffect   = attribute.Key("agentsafe.side_effect")
	keyRisk         = attribute.Key("agentsafe.risk")
	keyInputDigest  = attribute.Key("agentsafe.input_digest")
	keyApprovalID   = attribute.Key("agentsafe.approval_id")
	keyActorID      = attribute.Key("agentsafe.actor.id")
	keyActorTenant  = attribute.Key("agentsafe.actor.tenant")
	keyApproverID   = attribute.Key("agentsafe.approver.id")
	keyReason       = attribute.Key("agentsafe.reason")
	keyDecision     = attribute.Key("agentsafe.decision")
	keyPreviousCode = attribute.Key("agentsafe.previous_code")
	keySucceeded    = attribute.Key("agentsafe.succeeded")
	keyStreaming    = attribute.Key("agentsafe.streaming")
	keySink         = attribute.Key("agentsafe.sink")
	keyBudget       = attribute.Key("agentsafe.budget")
	keyAmount       = attribute.Key("agentsafe.budget.amount")
	keySpent        = attribute.Key("agentsafe.budget.spent")
	keyLimit        = attribute.Key("agentsafe.budget.limit")
	keyRetryAfter   = attribute.Key("agentsafe.retry_after")
)

// Span names: the execution's is followed by its rpc.method.
const (
	executionSpanPrefix = "agentsafe "
	attemptSpanName     = "agentsafe.attempt"
)

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	system string
	filter func(middleware.ExecutionInfo) bool
}

// WithFilter reports only the executions for which keep returns true:
// the others get no spans, span events or metric points (the engine
// still governs them). Decisions on approvals are filtered by the
// execution that requested them, as far as an event tells it. By default
// every execution is reported; nil keeps that.
func WithFilter(keep func(middleware.ExecutionInfo) bool) Option {
	return optionFunc(func(c *config) { c.filter = keep })
}

// WithTracerProvider sets where spans go. The default is the global
// provider (otel.GetTracerProvider) at the time New is called; nil keeps it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithMeterProvider sets where metrics go. The default is the global
// provider (otel.GetMeterProvider) at the time New is called; nil keeps it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// WithRPCSystem sets rpc.system.name on spans and metrics, for example
// "connectrpc" or "grpc". The engine does not know which framework an
// adapter serves, so by default the attribute is left out.
func WithRPCSystem(name string) Option {
	return optionFunc(func(c *config) { c.system = name })
}

// Instrumentation reports executions to OpenTelemetry. It is a
// [middleware.Tracer] (spans) and a [middleware.EventSink] (span events for
// approval steps, and metrics); install both with [Instrumentation.EngineOption].
// It is safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	meter  metric.Meter
	system []attribute.KeyValue // rpc.system.name, or nothing
	filter func(middleware.ExecutionInfo) bool

	// names caches what a procedure's name gives spans and metrics (see
	// names.get): computing it costs a regular expression.
	names nameCache

	executions   metric.Int64Counter
	duration     metric.Float64Histogram
	attempts     metric.Int64Histogram
	retries      metric.Int64Counter
	approvalWait metric.Float64Histogram
	abandoned    metric.Int64Counter
	spent        metric.Int64Gauge
	limit        metric.Int64Gauge
	exceeded     metric.Int64Counter
}

var (
	_ middleware.Tracer    = (*Instrumentation)(nil)
	_ middleware.EventSink = (*Instrumentation)(nil)
)

// New builds the tracer and the metric instruments. It fails only when the
// meter provider refuses an instrument.
func New(opts ...Option) (*Instrumentation, error) {
	cfg := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	i := &Instrumentation{
		tracer: cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL), trace.WithInstrumentationVersion(Version)),
		meter:  cfg.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL), metric.WithInstrumentationVersion(Version)),
		filter: cfg.filter,
	}
	if cfg.system != "" {
		i.system = []attribute.KeyValue{semconv.RPCSystemNameKey.String(cfg.system)}
	}
	if err := i.instruments(i.meter); err != nil {
		return nil, err
	}
	return i, nil
}

// The metric names (the package doc lists their attributes).
const (
	metricExecutions        = "agentsafe.executions"
	metricExecutionDuration = "agentsafe.execution.duration"
	metricAttempts          = "agentsafe.execution.attempts"
	metricRetries           = "agentsafe.retries"
	metricApprovalWait      = "agentsafe.approval.wait"
	metricAbandonedResults  = "agentsafe.abandoned_results"
	metricEventsDropped     = "agentsafe.events.dropped"
	metricBudgetSpent       = "agentsafe.budget.spent"
	metricBudgetLimit       = "agentsafe.budget.limit"
	metricBudgetExceeded    = "agentsafe.budget.exceeded"
)

// durationBuckets are the boundaries of agentsafe.execution.duration, in
// seconds: RPC latencies, from a millisecond to a minute.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func (i *Instrumentation) instruments(m metric.Meter) error {
	var err error
	if i.executions, err = m.Int64Counter(metricExecutions, metric.WithUnit("{execution}"),
		metric.WithDescription("Finalized agentsafe executions, by final code.")); err != nil {
		return err
	}
	if i.duration, err = m.Float64Histogram(metricExecutionDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of agentsafe executions, from open to finalize."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return err
	}
	if i.attempts, err = m.Int64Histogram(metricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts per agentsafe execution that ran at least one."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 6, 8, 10)); err != nil {
		return err
	}
	if i.retries, err = m.Int64Counter(metricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Runtime retries, by the code of the attempt retried.")); err != nil {
		return err
	}
	if i.approvalWait, err = m.Float64Histogram(metricApprovalWait, metric.WithUnit("s"),
		metric.WithDescription("Time from an approval request to its decision."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 86400)); err != nil {
		return err
	}
	if i.abandoned, err = m.Int64Counter(metricAbandonedResults, metric.WithUnit("{result}"),
		metric.WithDescription("Attempts abandoned at their deadline that returned later.")); err != nil {
		return err
	}
	if i.spent, err = m.Int64Gauge(metricBudgetSpent, metric.WithUnit("{amount}"),
		metric.WithDescription("What a budget's window held at the last call that reserved on it, or was refused by it, by budget.")); err != nil {
		return err
	}
	if i.limit, err = m.Int64Gauge(metricBudgetLimit, metric.WithUnit("{amount}"),
		metric.WithDescription("A budget's limit per window, by budget.")); err != nil {
		return err
	}
	i.exceeded, err = m.Int64Counter(metricBudgetExceeded, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that would have taken a budget past its limit, refused or sent to an approval, by budget."))
	return err
}

// EngineOption installs the instrumentation in an engine: as its tracer and
// as an event sink.
func (i *Instrumentation) EngineOption() middleware.Option {
	return middleware.WithTracer(i) // it is the tracer, and as a sink it receives every event
}

// ObserveEngine reports, as the counter agentsafe.events.dropped (by
// sink), the events eng's sinks have dropped so far (see
// middleware.Engine.Stats). Call it once per engine.
func (i *Instrumentation) ObserveEngine(eng *middleware.Engine) error {
	_, err := i.meter.Int64ObservableCounter(metricEventsDropped, metric.WithUnit("{event}"),
		metric.WithDescription("Events an agentsafe event sink dropped: its queue was full, or a call of it stalled their execution."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, s := range eng.Stats().Sinks {
				o.Observe(int64(s.Dropped), metric.WithAttributes(keySink.String(s.Sink)))
			}
			return nil
		}))
	return err
}

// rpcName matches the procedure names of RPC frameworks; every other name
// is a net/http route's (as the engine tells them apart).
var rpcName = regexp.MustCompile(`^/[A-Za-z_]\w*(\.[A-Za-z_]\w*)+/[A-Za-z_]\w*$`)

// procedureAttrs name a procedure in the semantic conventions: rpc.method
// ("package.Service/Method") for an RPC, http.route (and
// http.request.method, when the name is a ServeMux pattern with a method)
// for a net/http route.
func procedureAttrs(procedure string) []attribute.KeyValue {
	if rpcName.MatchString(procedure) {
		return []attribute.KeyValue{semconv.RPCMethod(strings.TrimPrefix(procedure, "/"))}
	}
	if method, route, ok := strings.Cut(procedure, " "); ok && method != "" && strings.ToUpper(method) == method && strings.HasPrefix(route, "/") {
		return []attribute.KeyValue{semconv.HTTPRoute(route), semconv.HTTPRequestMethodKey.String(method)}
	}
	return []attribute.KeyValue{semconv.HTTPRoute(procedure)}
}

// spanName is the execution span's name: the prefix and the procedure, as
// rpc.method or the route.
func spanName(procedure string) string {
	return executionSpanPrefix + strings.TrimPrefix(procedure, "/")
}

// filteredKey marks the context of an execution WithFilter left out.
type filteredKey struct{}

func (i *Instrumentation) keep(x middleware.ExecutionInfo) bool {
	return i.filter == nil || i.filter(x)
}

type executionKey struct{}

// StartExecution implements [middleware.Tracer]: it starts the execution's
// span, an internal span (the framework's own instrumentation owns the
// server span, and this one nests under it).
func (i *Instrumentation) StartExecution(ctx context.Context, x middleware.ExecutionInfo) (context.Context, func(middleware.Envelope)) {
	if !i.keep(x) {
		return context.WithValue(ctx, filteredKey{}, true), nil
	}
	attrs := make([]attribute.KeyValue, 0, 11)
	attrs = append(attrs, i.system...)
	n := i.names.get(x.Procedure)
	attrs = append(attrs, n.attrs...)
	attrs = append(attrs,
		keyExecutionID.String(x.ID),
		keySideEffect.String(x.SideEffect.String()),
		keyRisk.String(x.Risk.String()),
	)
	if x.InputDigest != "" {
		attrs = append(attrs, keyInputDigest.String(x.InputDigest))
	}
	if x.Actor.ID != "" {
		attrs = append(attrs, keyActorID.String(x.Actor.ID), keyActorTenant.String(x.Actor.Tenant))
	}
	if x.Streaming {
		attrs = append(attrs, keyStreaming.Bool(true))
	}
	ctx, span := i.tracer.Start(ctx, n.span, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	ctx = context.WithValue(ctx, executionKey{}, x.ID)
	return ctx, func(env middleware.Envelope) {
		code := middleware.CodeOK
		if env.Error != nil {
			code = env.Error.Code
		}
		span.SetAttributes(
			keyCode.String(code.String()),
			keyStatus.String(env.Status.String()),
			keyAttempts.Int(env.Attempts),
		)
		if env.ApprovalID != "" {
			span.SetAttributes(keyApprovalID.String(env.ApprovalID))
		}
		if env.Error != nil {
			// Retryable here is the caller's: safe to re-invoke.
			span.SetAttributes(keyRetryable.Bool(env.Error.Retryable))
		}
		if env.Status == middleware.StatusFailed || env.Status == middleware.StatusCancelled {
			span.SetAttributes(semconv.ErrorTypeKey.String(code.String()))
			span.SetStatus(codes.Error, code.String())
		}
		span.End()
	}
}

// StartAttempt implements [middleware.Tracer]: a child span of the
// execution's, in whose context the handler runs.
func (i *Instrumentation) StartAttempt(ctx context.Context, n int) (context.Context, func(middleware.AttemptOutcome)) {
	if ctx.Value(filteredKey{}) != nil {
		return nil, nil
	}
	attrs := []attribute.KeyValue{keyAttempt.Int(n)}
	if id, ok := ctx.Value(executionKey{}).(string); ok {
		attrs = append(attrs, keyExecutionID.String(id))
	}
	ctx, span := i.tracer.Start(ctx, attemptSpanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(o middleware.AttemptOutcome) {
		span.SetAttributes(keyCode.String(o.Code.String()))
		if o.Code != middleware.CodeOK {
			// Retryable here is the engine's runtime classification.
			span.SetAttributes(keyRetryable.Bool(o.Retryable), semconv.ErrorTypeKey.String(o.Code.String()))
			span.SetStatus(codes.Error, o.Code.String())
		}
		if o.Abandoned {
			span.SetAttributes(keyAbandoned.Bool(true))
		}
		span.End()
	}
}
