package bench

import (
	"context"
	"errors"
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

// engine is an agentsafe engine with one read capability: one retry, a
// one-second timeout per attempt, and a backoff too short to measure
// (go-retry's exponential backoff needs a positive base).
func engine(b *testing.B) *middleware.Engine {
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, middleware.Capability{
		SideEffect: middleware.SideEffectRead, Timeout: time.Second, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Nanosecond}}),
		middleware.WithProtoFiles(nil))
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

// BenchmarkOverhead: one governed no-op call.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	noop := func(context.Context) (any, error) { return nil, nil }
	b.Run("impl=direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = noop(ctx)
		}
	})
	b.Run("impl=agentsafe", func(b *testing.B) {
		eng := engine(b)
		b.ReportAllocs()
		for b.Loop() { // as an adapter does: resolve, then execute
			sink, _, _ = adapter.Execute(ctx, adapter.Resolve(eng, procRead), adapter.Call[any]{}, noop)
		}
	})
	b.Run("impl=failsafe-go", func(b *testing.B) {
		ex := failsafeExecutor().WithContext(ctx)
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = ex.GetWithExecution(func(exec failsafe.Execution[any]) (any, error) { return noop(exec.Context()) })
		}
	})
}

// BenchmarkOneRetry: the first attempt fails retryably, the second succeeds.
func BenchmarkOneRetry(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=agentsafe", func(b *testing.B) {
		eng := engine(b)
		b.ReportAllocs()
		for b.Loop() {
			first := true
			sink, _, _ = adapter.Execute(ctx, adapter.Resolve(eng, procRead), adapter.Call[any]{}, func(context.Context) (any, error) {
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
		b.ReportAllocs()
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
