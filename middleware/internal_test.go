package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// TestRetrySafetyIsRecheckedAtRunTime bypasses validation, the way a bug or
// a future code path could, and checks that the engine still refuses to
// retry a write that is not declared idempotent.
func TestRetrySafetyIsRecheckedAtRunTime(t *testing.T) {
	e, err := New(nil, WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	const proc = "/bypass.V1/Write"
	for _, se := range []SideEffect{SideEffectWrite, SideEffectDestructive, SideEffectExternal} {
		e.caps[proc] = e.resolve(proc, Capability{SideEffect: se, Retry: Retry{MaxRetries: 5, Backoff: time.Millisecond}})
		var runs atomic.Int32
		_, env, _ := e.route(proc).Execute(context.Background(), attemptCall(func(context.Context) (any, error) {
			runs.Add(1)
			return nil, Retryable(errors.New("transient"))
		}))
		if runs.Load() != 1 || env.Attempts != 1 {
			t.Errorf("%s without Idempotent was retried at run time: %d runs", se, runs.Load())
		}
	}
}

// attemptCall is a call whose attempts run fn, as the adapter SPI makes it.
func attemptCall(fn func(context.Context) (any, error)) seam.Call {
	return seam.Call{Attempt: attemptFunc(fn)}
}

type attemptFunc func(context.Context) (any, error)

func (f attemptFunc) RunAttempt(ctx context.Context) (any, error) { return f(ctx) }

// TestLeaseCoversTheWaitForAnAbandonedWrite: a write may wait one more
// attempt timeout before each re-attempt, so its lease must cover that, or
// a record would read in_doubt while its execution still legitimately runs.
func TestLeaseCoversTheWaitForAnAbandonedWrite(t *testing.T) {
	e, err := New(nil, WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	retry := Retry{MaxRetries: 2, Backoff: time.Millisecond}
	read := e.resolve("/r", Capability{SideEffect: SideEffectRead, Timeout: time.Second, Retry: retry})
	write := e.resolve("/w", Capability{SideEffect: SideEffectWrite, Idempotent: true, Timeout: time.Second, Retry: retry})
	if read.lease < 3*time.Second+3*time.Millisecond {
		t.Errorf("read lease %s shorter than three attempts and their backoffs", read.lease)
	}
	if write.lease < read.lease+2*time.Second {
		t.Errorf("write lease %s does not cover two waits for an abandoned attempt (read lease %s)", write.lease, read.lease)
	}
}

// TestResultBeatsADeadlineThatFiredAtTheSameMoment puts an attempt in the
// state the race leaves: its result delivered and its context ended. The
// result must win, every time, whichever ready case select picks.
func TestResultBeatsADeadlineThatFiredAtTheSameMoment(t *testing.T) {
	e, err := New(NewRegistry().Register("/r", Capability{SideEffect: SideEffectRead}), WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		x := e.open(context.Background(), "/r", seam.Call{}, e.caps["/r"], false)
		a := &attempt{x: x, n: 1, w: &attemptWorker{r: attemptResult{v: "done"}}}
		var cancel context.CancelCauseFunc
		a.Context, cancel = context.WithCancelCause(context.Background())
		a.cancel = func() { cancel(context.Canceled) }
		a.state.Store(attemptReturned)
		cancel(errAttemptTimeout)
		v, err := x.await(a)
		if err != nil || v != "done" {
			t.Fatalf("await = %v, %v: a result returned as the deadline fired must win", v, err)
		}
	}
}
