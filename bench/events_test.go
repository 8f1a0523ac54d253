package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafeotel"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// newID is an execution id as the engine makes one, for the records the
// failsafe-go listeners write (the same attributes as agentsafe's).
func newID() string {
	var raw [16]byte
	rand.Read(raw[:])
	return "exe_" + hex.EncodeToString(raw[:])
}

type idKey struct{}

// runQueue is a sink queue longer than any run: b.Loop decides the count
// as it goes, and a producer faster than the sink would otherwise
// overflow the default queue. The queue grows only as far as it is used.
const runQueue = 1 << 24

// BenchmarkSlogSink: a governed no-op read whose three events (requested,
// started, completed) go to NewSlogSink over slog.NewTextHandler to
// io.Discard, against failsafe-go's retry+timeout executor logging the
// same three records, with the same attributes, to the same handler.
// failsafe-go has no listener for an execution or an attempt starting,
// so those two records are written by the caller and at the start of the
// function; the final one by its OnSuccess listener.
func BenchmarkSlogSink(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=agentsafe", func(b *testing.B) {
		// A queue as long as the run: a producer faster than the handler
		// would otherwise overflow it, and the run measures both (see
		// drained).
		eng := engine(b, middleware.WithEventSink(middleware.NewSlogSink(slog.New(slog.NewTextHandler(io.Discard, nil))), middleware.SinkQueue(runQueue)))
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
		drained(b, eng)
	})
	// The sink registered with SinkInline (no worker, no queue: it runs on
	// the execution's goroutine), the capability as before, then Inline too
	// (failsafe-go's Get runs the function on the caller's goroutine).
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"impl=agentsafe-sinkinline", false}, {"impl=agentsafe-inline", true}} {
		b.Run(tc.name, func(b *testing.B) {
			eng := engineOf(b, tc.inline, middleware.WithEventSink(middleware.NewSlogSink(slog.New(slog.NewTextHandler(io.Discard, nil))), middleware.SinkInline()))
			defer cpu(b)()
			for b.Loop() {
				governed(ctx, eng, noop)
			}
		})
	}
	b.Run("impl=failsafe-go", func(b *testing.B) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		side := middleware.SideEffectRead.String()
		ex := failsafeExecutor().OnSuccess(func(e failsafe.ExecutionDoneEvent[any]) {
			log.LogAttrs(e.Context(), slog.LevelInfo, string(middleware.EventCompleted),
				slog.String("execution_id", e.Context().Value(idKey{}).(string)), slog.String("procedure", procRead),
				slog.String("side_effect", side), slog.Int("attempts", e.Attempts()), slog.Duration("duration", e.ElapsedTime()))
		})
		defer cpu(b)()
		for b.Loop() {
			id := newID()
			ctx := context.WithValue(ctx, idKey{}, id)
			log.LogAttrs(ctx, slog.LevelInfo, string(middleware.EventRequested),
				slog.String("execution_id", id), slog.String("procedure", procRead), slog.String("side_effect", side))
			sink, _ = ex.WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[any]) (any, error) {
				log.LogAttrs(exec.Context(), slog.LevelInfo, string(middleware.EventStarted),
					slog.String("execution_id", id), slog.String("procedure", procRead),
					slog.String("side_effect", side), slog.Int("attempt", exec.Attempts()))
				return noop(exec.Context())
			})
		}
	})
}

// drained waits until the engine's sinks have delivered every event of
// the benchmark, inside the measurement: their work and allocations
// count.
func drained(b *testing.B, eng *middleware.Engine) {
	want := uint64(3 * b.N)
	for {
		st := eng.Stats().Sinks
		if len(st) == 0 || st[0].Delivered+st[0].Dropped >= want {
			if len(st) > 0 && st[0].Dropped > 0 {
				b.Fatalf("the sink dropped %d events", st[0].Dropped)
			}
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// BenchmarkOTel: the same call with agentsafeotel (a span per execution
// and per attempt, three metrics), against failsafe-go with hand-written
// code starting and ending the same spans with the same attributes and
// recording the same metrics. Spans are sampled and ended into a provider
// with no exporter; metrics go to a manual reader.
func BenchmarkOTel(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=agentsafe", func(b *testing.B) {
		tp, mp := otelProviders()
		inst, err := agentsafeotel.New(agentsafeotel.WithTracerProvider(tp), agentsafeotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		eng := engine(b, inst.EngineOption())
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
	})
	// The same with the capability declared Inline (the instrumentation
	// is the engine's tracer, called on the execution's goroutine already).
	b.Run("impl=agentsafe-inline", func(b *testing.B) {
		tp, mp := otelProviders()
		inst, err := agentsafeotel.New(agentsafeotel.WithTracerProvider(tp), agentsafeotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		eng := inlineEngine(b, inst.EngineOption())
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
	})
	b.Run("impl=failsafe-go", func(b *testing.B) {
		tp, mp := otelProviders()
		h := newHandOTel(tp, mp)
		ex := failsafeExecutor().OnDone(func(e failsafe.ExecutionDoneEvent[any]) { h.end(e.Context(), e.Attempts(), e.ElapsedTime(), e.Error) })
		defer cpu(b)()
		for b.Loop() {
			ctx := h.start(ctx, newID())
			sink, _ = ex.WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[any]) (any, error) {
				actx, end := h.attempt(exec.Context(), exec.Attempts())
				v, err := noop(actx)
				end(err)
				return v, err
			})
		}
	})
}

func otelProviders() (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

// handOTel is what a failsafe-go user writes to get agentsafeotel's spans
// and metrics: the same names, attributes and instruments.
type handOTel struct {
	tracer     trace.Tracer
	executions metric.Int64Counter
	duration   metric.Float64Histogram
	attempts   metric.Int64Histogram
}

type spanKey struct{}

func newHandOTel(tp trace.TracerProvider, mp metric.MeterProvider) *handOTel {
	m := mp.Meter("bench")
	h := &handOTel{tracer: tp.Tracer("bench")}
	h.executions, _ = m.Int64Counter("agentsafe.executions")
	h.duration, _ = m.Float64Histogram("agentsafe.execution.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	h.attempts, _ = m.Int64Histogram("agentsafe.execution.attempts", metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 6, 8, 10))
	return h
}

var rpcMethod = attribute.String("rpc.method", strings.TrimPrefix(procRead, "/"))

func (h *handOTel) start(ctx context.Context, id string) context.Context {
	ctx, _ = h.tracer.Start(ctx, "agentsafe "+strings.TrimPrefix(procRead, "/"), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		rpcMethod,
		attribute.String("agentsafe.execution_id", id),
		attribute.String("agentsafe.side_effect", middleware.SideEffectRead.String()),
		attribute.String("agentsafe.risk", middleware.RiskLow.String()),
	))
	return context.WithValue(ctx, idKey{}, id)
}

func (h *handOTel) attempt(ctx context.Context, n int) (context.Context, func(error)) {
	ctx, span := h.tracer.Start(ctx, "agentsafe.attempt", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.Int("agentsafe.attempt", n), attribute.String("agentsafe.execution_id", ctx.Value(idKey{}).(string))))
	return ctx, func(err error) {
		code := "OK"
		if err != nil {
			code = "EXECUTION_FAILED"
			span.SetStatus(codes.Error, code)
		}
		span.SetAttributes(attribute.String("agentsafe.code", code))
		span.End()
	}
}

func (h *handOTel) end(ctx context.Context, attempts int, elapsed time.Duration, err error) {
	span := trace.SpanFromContext(ctx)
	code, status := "OK", "completed"
	if err != nil {
		code, status = "EXECUTION_FAILED", "failed"
		span.SetStatus(codes.Error, code)
	}
	span.SetAttributes(attribute.String("agentsafe.code", code), attribute.String("agentsafe.status", status), attribute.Int("agentsafe.attempts", attempts))
	span.End()
	byCode := metric.WithAttributes(rpcMethod, attribute.String("agentsafe.code", code))
	h.executions.Add(ctx, 1, byCode)
	h.duration.Record(ctx, elapsed.Seconds(), byCode)
	h.attempts.Record(ctx, int64(attempts), metric.WithAttributes(rpcMethod))
}

// BenchmarkEventAllocs: the allocations an event costs the engine's
// delivery alone, with a sink that does nothing: the same governed call
// with no sink and with one, and allocs/event, the difference over the
// three events each call delivers (the goal: at most 3).
func BenchmarkEventAllocs(b *testing.B) {
	ctx := context.Background()
	var delivered atomic.Uint64
	nothing := middleware.EventSinkFunc(func(context.Context, middleware.Event) { delivered.Add(1) })
	for _, tc := range []struct {
		name string
		sink bool
	}{{"sink=none", false}, {"sink=one", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var opts []middleware.Option
			if tc.sink {
				opts = append(opts, middleware.WithEventSink(nothing, middleware.SinkQueue(runQueue)))
			}
			eng := engine(b, opts...)
			defer cpu(b)()
			for b.Loop() {
				governed(ctx, eng, noop)
			}
			drained(b, eng)
		})
	}
}
