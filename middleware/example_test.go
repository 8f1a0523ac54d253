package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// A read with retry configured is retried after a transient failure, under
// the same execution id and idempotency key.
func Example() {
	reg := middleware.NewRegistry().Register("/orders.v1.OrderService/GetOrder", middleware.Capability{
		SideEffect: middleware.SideEffectRead,
		Timeout:    time.Second,
		Retry:      middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond},
	})
	// The service's generated code is not linked into this example, so the
	// engine is told to know no descriptors.
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}

	var keys []string
	getOrder := func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		keys = append(keys, x.IdempotencyKey)
		if x.Attempt == 1 {
			return nil, middleware.Retryable(errors.New("database briefly unavailable"))
		}
		return "order 42: shipped", nil
	}

	v, env, err := execute(eng, context.Background(), call{Procedure: "/orders.v1.OrderService/GetOrder"}, getOrder)
	fmt.Println(v, err)
	fmt.Println(env.Status, "after", env.Attempts, "attempts")
	fmt.Println("same idempotency key on both attempts:", keys[0] == keys[1])
	// Output:
	// order 42: shipped <nil>
	// completed after 2 attempts
	// same idempotency key on both attempts: true
}

// A write that is not declared idempotent is never retried at run time:
// declaring retries on it fails when the engine is built.
func ExampleNew_validation() {
	reg := middleware.NewRegistry().Register("/payments.v1.Payments/Charge", middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Retry:      middleware.Retry{MaxRetries: 3},
	})
	_, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)))
	fmt.Println(err)
	// Output:
	// agentsafe: 1 invalid capability metadata problem(s):
	// 	/payments.v1.Payments/Charge (registry): Retry.MaxRetries: side effect external is write-like: it may only be retried when declared Idempotent (got MaxRetries 3 without Idempotent)
}
