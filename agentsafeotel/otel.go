package agentsafeotel

import (
	"context"
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
	system []attribute.KeyValue // rpc.system.name, or nothing

	executions   metric.Int64Counter
	duration     metric.Float64Histogram
	attempts     metric.Int64Histogram
	retries      metric.Int64Counter
	approvalWait metric.Float64Histogram
	abandoned    metric.Int64Counter
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
	i := &Instrumentation{tracer: cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
	if cfg.system != "" {
		i.system = []attribute.KeyValue{semconv.RPCSystemNameKey.String(cfg.system)}
	}
	if err := i.instruments(cfg.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))); err != nil {
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
)

func (i *Instrumentation) instruments(m metric.Meter) error {
	var err error
	if i.executions, err = m.Int64Counter(metricExecutions, metric.WithUnit("{execution}"),
		metric.WithDescription("Finalized agentsafe executions, by final code.")); err != nil {
		return err
	}
	if i.duration, err = m.Float64Histogram(metricExecutionDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of agentsafe executions, from open to finalize.")); err != nil {
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
	i.abandoned, err = m.Int64Counter(metricAbandonedResults, metric.WithUnit("{result}"),
		metric.WithDescription("Attempts abandoned at their deadline that returned later."))
	return err
}

// EngineOption installs the instrumentation in an engine: as its tracer and
// as an event sink.
func (i *Instrumentation) EngineOption() middleware.Option {
	return middleware.WithTracer(i) // it is the tracer, and as a sink it receives every event
}

// rpcMethod is the semantic conventions' rpc.method for a procedure:
// "package.Service/Method".
func rpcMethod(procedure string) string { return strings.TrimPrefix(procedure, "/") }

type executionKey struct{}

// StartExecution implements [middleware.Tracer]: it starts the execution's
// span, an internal span (the framework's own instrumentation owns the
// server span, and this one nests under it).
func (i *Instrumentation) StartExecution(ctx context.Context, x middleware.ExecutionInfo) (context.Context, func(middleware.Envelope)) {
	method := rpcMethod(x.Procedure)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, i.system...)
	attrs = append(attrs,
		semconv.RPCMethod(method),
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
	ctx, span := i.tracer.Start(ctx, executionSpanPrefix+method, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
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
