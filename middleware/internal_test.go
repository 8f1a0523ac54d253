package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetrySafetyIsRecheckedAtRunTime bypasses validation, the way a bug or
// a future code path could, and checks that the engine still refuses to
// retry a write that is not declared idempotent.
func TestRetrySafetyIsRecheckedAtRunTime(t *testing.T) {
	e, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	const proc = "/bypass.V1/Write"
	for _, se := range []SideEffect{SideEffectWrite, SideEffectDestructive, SideEffectExternal} {
		e.caps[proc] = e.resolve(proc, Capability{SideEffect: se, Retry: Retry{MaxAttempts: 5, Backoff: time.Millisecond}})
		var runs atomic.Int32
		_, env, _ := e.Execute(context.Background(), Call{Procedure: proc}, func(context.Context) (any, error) {
			runs.Add(1)
			return nil, Retryable(errors.New("transient"))
		})
		if runs.Load() != 1 || env.Attempts != 1 {
			t.Errorf("%s without Idempotent was retried at run time: %d runs", se, runs.Load())
		}
	}
}
