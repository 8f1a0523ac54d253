package bench

import (
	"context"
	"errors"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
)

const procRead = "/bench.v1.Orders/GetOrder"

var sink any

// quiet keeps the engine's start-up warnings (no descriptors to check the
// registry against, no digest key) out of the benchmark output.
var quiet = middleware.WithLogger(slog.New(slog.DiscardHandler))

// engine is an agentsafe engine with one read capability: one retry, a
// one-second timeout per attempt, and a backoff too short to measure
// (go-retry's exponential backoff needs a positive base).
func engine(b testing.TB, opts ...middleware.Option) *middleware.Engine {
	return engineOf(b, false, opts...)
}

// inlineEngine is engine with the capability declared Inline: its
// attempts run on the caller's goroutine (SPEC §3).
func inlineEngine(b testing.TB, opts ...middleware.Option) *middleware.Engine {
	return engineOf(b, true, opts...)
}

func engineOf(b testing.TB, inline bool, opts ...middleware.Option) *middleware.Engine {
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, middleware.Capability{
		SideEffect: middleware.SideEffectRead, Timeout: time.Second, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Nanosecond}, Inline: inline}),
		append([]middleware.Option{middleware.WithProtoFiles(nil), quiet}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// failsafeExecutor does the same retry+timeout work with failsafe-go: one
// retry of any error without delay, a one-second timeout.
func failsafeExecutor() failsafe.Executor[any] {
	return failsafe.With[any](
		retrypolicy.NewBuilder[any]().WithMaxRetries(1).WithDelay(0).Build(),
		timeout.New[any](time.Second),
	)
}

var errTransient = middleware.Retryable(errors.New("transient"))

func noop(context.Context) (any, error) { return nil, nil }

// governed is one call as an adapter makes it: resolve, then execute.
func governed(ctx context.Context, eng *middleware.Engine, fn func(context.Context) (any, error)) {
	v, _, err := adapter.Execute(ctx, adapter.Resolve(eng, procRead), adapter.Call[any]{}, fn)
	if err != nil {
		panic(err)
	}
	sink = v
}

// BenchmarkGoverned: one governed no-op read, no event sink. The floor is
// the least bounded reporting needs (see floorCall); failsafe-go's
// executor does the same retry+timeout work synchronously (Get, on the
// caller's goroutine: a handler that ignores its context holds the caller)
// and asynchronously (GetAsync, a goroutine per execution).
// agentsafe-inline is the same capability declared Inline, which makes
// Get's trade: its peer is failsafe-go's Get.
func BenchmarkGoverned(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=floor", func(b *testing.B) {
		defer cpu(b)()
		for b.Loop() {
			floorCall(ctx)
		}
	})
	b.Run("impl=agentsafe", func(b *testing.B) {
		eng := engine(b)
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
	})
	b.Run("impl=agentsafe-inline", func(b *testing.B) {
		eng := inlineEngine(b)
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
	})
	b.Run("impl=failsafe-go", func(b *testing.B) {
		ex := failsafeExecutor().WithContext(ctx)
		defer cpu(b)()
		for b.Loop() {
			sink, _ = ex.GetWithExecution(func(exec failsafe.Execution[any]) (any, error) { return noop(exec.Context()) })
		}
	})
	b.Run("impl=failsafe-go-async", func(b *testing.B) {
		ex := failsafeExecutor().WithContext(ctx)
		defer cpu(b)()
		for b.Loop() {
			sink, _ = ex.GetAsyncWithExecution(func(exec failsafe.Execution[any]) (any, error) { return noop(exec.Context()) }).Get()
		}
	})
}

// BenchmarkOneRetry: the first attempt fails retryably, the second succeeds.
func BenchmarkOneRetry(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=agentsafe", func(b *testing.B) {
		eng := engine(b)
		defer cpu(b)()
		for b.Loop() {
			first := true
			governed(ctx, eng, func(context.Context) (any, error) {
				if first {
					first = false
					return nil, errTransient
				}
				return nil, nil
			})
		}
	})
	b.Run("impl=failsafe-go", func(b *testing.B) {
		ex := failsafeExecutor().WithContext(ctx)
		defer cpu(b)()
		for b.Loop() {
			first := true
			sink, _ = ex.GetWithExecution(func(failsafe.Execution[any]) (any, error) {
				if first {
					first = false
					return nil, errTransient
				}
				return nil, nil
			})
		}
	})
}

// cpu reports allocations, and the process's CPU time per operation
// (cpu-ns/op, user and system, every goroutine and thread): a design that
// moved work to other goroutines, or spun, would show it there rather than
// in sec/op. Call it as defer cpu(b)() just before the loop.
func cpu(b *testing.B) func() {
	b.ReportAllocs()
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
