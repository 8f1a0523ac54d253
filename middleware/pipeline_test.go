package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestSuccessReturnsValueAndCompletedEnvelope(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second))
	v, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { return "ok", nil })
	wantCode(t, env, err, middleware.CodeOK)
	if v != "ok" || env.Attempts != 1 || env.Procedure != procRead || env.ExecutionID == "" {
		t.Fatalf("got value %v envelope %+v", v, env)
	}
	f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted)
	if ev := f.final(env.ExecutionID); ev.Attempts != 1 {
		t.Errorf("completed event attempts = %d, want 1", ev.Attempts)
	}
}

func TestAttemptTimeoutIsTimeoutAndCallerCancelIsCancelled(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 100*time.Millisecond))
		honour := func(ctx context.Context) (any, error) { <-ctx.Done(); return nil, ctx.Err() }

		_, env, err := f.run(t.Context(), procRead, honour)
		wantCode(t, env, err, middleware.CodeTimeout)
		if env.Status != middleware.StatusCancelled || !env.Error.Retryable {
			t.Errorf("timeout envelope = %+v, want status cancelled and retryable for a read", env)
		}

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Millisecond, cancel)
		_, env, err = f.run(ctx, procRead, honour)
		wantCode(t, env, err, middleware.CodeCancelled)
		if env.Error.Retryable {
			t.Error("CANCELLED must never be retryable")
		}

		// The caller's own deadline, shorter than the attempt's, is the caller leaving.
		ctx, cancel2 := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel2()
		_, env, err = f.run(ctx, procRead, honour)
		wantCode(t, env, err, middleware.CodeCancelled)
		if ev := f.final(env.ExecutionID); ev.Type != middleware.EventCancelled || ev.Code != middleware.CodeCancelled {
			t.Errorf("final event %+v, want capability.cancelled with CANCELLED", ev)
		}
	})
}

func TestAlreadyCancelledCallerRunsNothing(t *testing.T) {
	f := newFixture(t, procRead, read(3, time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var ran atomic.Bool
	_, env, err := f.run(ctx, procRead, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
	wantCode(t, env, err, middleware.CodeCancelled)
	if ran.Load() || env.Attempts != 0 {
		t.Fatalf("handler ran (ran=%v, attempts=%d) for a caller that had already left", ran.Load(), env.Attempts)
	}
	f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventCancelled)
}

func TestIgnoredContextReportsTimeoutAtDeadlineAndDiscardsLateResult(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 100*time.Millisecond))
		start := time.Now()
		v, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			time.Sleep(time.Hour) // ignores its context
			return "late", nil
		})
		if elapsed := time.Since(start); elapsed != 100*time.Millisecond {
			t.Errorf("Execute returned after %s, want exactly the 100ms deadline", elapsed)
		}
		wantCode(t, env, err, middleware.CodeTimeout)
		if v != nil {
			t.Fatalf("late result %v was consumed", v)
		}
		time.Sleep(2 * time.Hour) // let the abandoned handler return
		synctest.Wait()
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCancelled, middleware.EventAbandonedResult)
		evs := f.events(env.ExecutionID)
		if last := evs[len(evs)-1]; !last.Succeeded || last.Attempt != 1 {
			t.Errorf("abandoned_result = %+v, want attempt 1 succeeded", last)
		}
	})
}

func TestTimedOutReadRetriesUnderAFreshTimer(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(1, 100*time.Millisecond))
		var deadlines []time.Duration
		var calls atomic.Int32
		v, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			d, _ := ctx.Deadline()
			deadlines = append(deadlines, time.Until(d))
			if calls.Add(1) == 1 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return "second", nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		if v != "second" || env.Attempts != 2 {
			t.Fatalf("value %v attempts %d, want second after 2 attempts", v, env.Attempts)
		}
		for i, d := range deadlines {
			if d != 100*time.Millisecond {
				t.Errorf("attempt %d started with %s left, want a fresh 100ms", i+1, d)
			}
		}
		evs := f.events(env.ExecutionID)
		if evs[2].Type != middleware.EventRetried || evs[2].PreviousErrorCode != middleware.CodeTimeout || evs[2].Attempt != 2 {
			t.Errorf("retried event = %+v, want attempt 2 after TIMEOUT", evs[2])
		}
	})
}

func TestTimedOutWriteIsNotRetried(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 100 * time.Millisecond})
		var runs atomic.Int32
		_, env, err := f.run(t.Context(), procWrite, func(ctx context.Context) (any, error) {
			runs.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		if runs.Load() != 1 || env.Attempts != 1 {
			t.Fatalf("a write without retry config ran %d times", runs.Load())
		}
		if env.Error.Retryable {
			t.Error("a timed-out non-idempotent write must report retryable=false: re-invoking would run it again under a new key")
		}
	})
}

func TestWriteLikeRetriedOnlyWhenIdempotentAndConfigured(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cap      middleware.Capability
		wantRuns int32
	}{
		{"read with retry", middleware.Capability{SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}, 3},
		{"none with retry", middleware.Capability{SideEffect: middleware.SideEffectNone, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}, 2},
		{"idempotent write with retry", middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}, 2},
		{"idempotent destructive with retry", middleware.Capability{SideEffect: middleware.SideEffectDestructive, Idempotent: true, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}, 3},
		{"idempotent external with retry", middleware.Capability{SideEffect: middleware.SideEffectExternal, Idempotent: true, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}, 2},
		{"idempotent write without retry", middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true}, 1},
		{"plain write", middleware.Capability{SideEffect: middleware.SideEffectWrite}, 1},
		{"read without retry", middleware.Capability{SideEffect: middleware.SideEffectRead}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := newFixture(t, procWrite, tc.cap)
				var runs atomic.Int32
				_, env, err := f.run(t.Context(), procWrite, func(context.Context) (any, error) {
					runs.Add(1)
					return nil, errTransient
				})
				wantCode(t, env, err, middleware.CodeExecutionFailed)
				if runs.Load() != tc.wantRuns || env.Attempts != int(tc.wantRuns) {
					t.Fatalf("ran %d times (envelope says %d), want %d", runs.Load(), env.Attempts, tc.wantRuns)
				}
			})
		})
	}
}

func TestMaxRetriesCountsReattemptsAfterTheFirst(t *testing.T) {
	for retries := range 4 {
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := newFixture(t, procRead, read(retries, time.Second))
				var runs atomic.Int32
				_, env, _ := f.run(t.Context(), procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errTransient })
				if int(runs.Load()) != retries+1 || env.Attempts != retries+1 {
					t.Fatalf("MaxRetries %d ran %d times, want %d", retries, runs.Load(), retries+1)
				}
				if ev := f.final(env.ExecutionID); ev.Attempts != retries+1 || ev.Code != middleware.CodeExecutionFailed || !ev.Retryable {
					t.Errorf("failed event %+v, want attempts %d, EXECUTION_FAILED, retryable", ev, retries+1)
				}
			})
		})
	}
}

func TestNonRetryableErrorIsNotRetried(t *testing.T) {
	f := newFixture(t, procRead, read(3, time.Second))
	var runs atomic.Int32
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errors.New("permanent") })
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if runs.Load() != 1 {
		t.Fatalf("a permanent error was retried: %d runs", runs.Load())
	}
}

func TestRetryOnVetoAndPanicStopRetries(t *testing.T) {
	for name, retryOn := range map[string]func(*middleware.Error) bool{
		"veto":  func(*middleware.Error) bool { return false },
		"panic": func(*middleware.Error) bool { panic("retryOn blew up") },
	} {
		t.Run(name, func(t *testing.T) {
			c := read(3, time.Second)
			c.Retry.RetryOn = retryOn
			f := newFixture(t, procRead, c)
			var runs atomic.Int32
			_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errTransient })
			wantCode(t, env, err, middleware.CodeExecutionFailed)
			if runs.Load() != 1 {
				t.Fatalf("RetryOn %s did not stop retries: %d runs", name, runs.Load())
			}
		})
	}
	t.Run("allow sees the error", func(t *testing.T) {
		c := read(1, time.Second)
		var saw middleware.Code
		c.Retry.RetryOn = func(e *middleware.Error) bool { saw = e.Code; return true }
		f := newFixture(t, procRead, c)
		_, env, _ := f.run(t.Context(), procRead, func(context.Context) (any, error) { return nil, errTransient })
		if env.Attempts != 2 || saw != middleware.CodeExecutionFailed {
			t.Fatalf("attempts %d, RetryOn saw %s; want 2 and EXECUTION_FAILED", env.Attempts, saw)
		}
	})
}

func TestIDsStableAcrossAttemptsAndUniqueAcrossExecutions(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(2, time.Second))
		c := newCounter()
		fn := func(ctx context.Context) (any, error) { c.note(ctx); return nil, errTransient }
		_, env1, _ := f.run(t.Context(), procRead, fn)
		first := c.executions()
		_, env2, _ := f.run(t.Context(), procRead, fn)
		second := c.executions()
		if len(first) != 3 || len(second) != 3 {
			t.Fatalf("attempts: %d and %d, want 3 each", len(first), len(second))
		}
		for i, x := range first {
			if x.ID != env1.ExecutionID || x.IdempotencyKey != first[0].IdempotencyKey || x.Attempt != i+1 || x.Procedure != procRead {
				t.Errorf("attempt %d saw %+v; want execution %s, the first attempt's key, attempt %d", i+1, x, env1.ExecutionID, i+1)
			}
		}
		if env1.ExecutionID == env2.ExecutionID || first[0].IdempotencyKey == second[0].IdempotencyKey {
			t.Error("two executions (a re-invocation) share an execution id or idempotency key")
		}
		if sub := first[0].SubKey("payments"); sub == first[0].IdempotencyKey || sub != first[1].SubKey("payments") || sub == first[0].SubKey("email") {
			t.Error("SubKey must be stable per label across attempts and differ between labels")
		}
	})
}

func TestExecutionFromContextOutsideAnExecution(t *testing.T) {
	if _, ok := middleware.ExecutionFromContext(t.Context()); ok {
		t.Fatal("ExecutionFromContext reported an execution on a plain context")
	}
}

func TestPanicBecomesConcealedExecutionFailed(t *testing.T) {
	f := newFixture(t, procRead, read(3, time.Second))
	var runs atomic.Int32
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
		runs.Add(1)
		panic("secret database password in a panic")
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if env.Error.Message != adapter.ConcealedMessage || env.Error.Retryable || runs.Load() != 1 {
		t.Fatalf("panic envelope %+v after %d runs; want concealed, not retryable, one run", env.Error, runs.Load())
	}
	var pe *middleware.PanicError
	if !errors.As(err, &pe) || pe.Value != "secret database password in a panic" {
		t.Fatalf("the returned error does not carry the panic: %v", err)
	}
	ev := f.final(env.ExecutionID)
	if ev.Stack == "" || ev.Type != middleware.EventFailed {
		t.Errorf("failed event %+v, want the stack", ev.Type)
	}
}

func TestPlainErrorsAreConcealedAndDeclaredErrorsKept(t *testing.T) {
	f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite})
	_, env, err := f.run(t.Context(), procWrite, func(context.Context) (any, error) { return nil, errors.New("pq: connection to 10.0.0.7 refused") })
	if env.Error.Message != adapter.ConcealedMessage {
		t.Errorf("plain error reached the envelope: %q", env.Error.Message)
	}
	if ev := f.final(env.ExecutionID); ev.Error != "pq: connection to 10.0.0.7 refused" {
		t.Errorf("event error = %q, want the real error for operators", ev.Error)
	}
	if !errors.Is(err, err.(*middleware.Error).Cause) {
		t.Error("the cause must stay reachable")
	}

	declared := middleware.NewError(middleware.CodeExecutionFailed, "ALREADY_REFUNDED: order 42 was refunded before")
	_, env, _ = f.run(t.Context(), procWrite, func(context.Context) (any, error) { return nil, declared })
	if env.Error.Message != declared.Message {
		t.Errorf("declared error message = %q, want %q", env.Error.Message, declared.Message)
	}
}

func TestCancellationDuringBackoffIsTerminal(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := read(5, time.Second)
		c.Retry.Backoff = time.Minute
		f := newFixture(t, procRead, c)
		ctx, cancel := context.WithCancel(t.Context())
		var runs atomic.Int32
		time.AfterFunc(10*time.Second, cancel) // in the middle of the first backoff
		start := time.Now()
		_, env, err := f.run(ctx, procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errTransient })
		wantCode(t, env, err, middleware.CodeCancelled)
		if runs.Load() != 1 || time.Since(start) != 10*time.Second {
			t.Fatalf("after cancel in backoff: %d runs, returned after %s; want 1 run at 10s", runs.Load(), time.Since(start))
		}
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCancelled)
	})
}

func TestNoRetryWhenTheCallerDeadlineEndsBeforeTheBackoff(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := read(5, time.Second)
		c.Retry.Backoff = time.Minute
		f := newFixture(t, procRead, c)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		start := time.Now()
		_, env, err := f.run(ctx, procRead, func(context.Context) (any, error) { return nil, errTransient })
		wantCode(t, env, err, middleware.CodeExecutionFailed)
		if env.Attempts != 1 || time.Since(start) != 0 {
			t.Fatalf("attempts %d after %s; a backoff longer than the caller's deadline must end the execution at once", env.Attempts, time.Since(start))
		}
	})
}

func TestBackoffIsExponentialFromTheBase(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := read(3, time.Second)
		c.Retry.Backoff = 100 * time.Millisecond
		f := newFixture(t, procRead, c)
		var starts []time.Time
		f.run(t.Context(), procRead, func(context.Context) (any, error) { starts = append(starts, time.Now()); return nil, errTransient })
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
		for i := 1; i < len(starts); i++ {
			if gap := starts[i].Sub(starts[i-1]); gap != want[i-1] {
				t.Errorf("wait before re-attempt %d = %s, want %s", i+1, gap, want[i-1])
			}
		}
	})
}

func TestWriteReattemptNeverOverlapsThePreviousAttempt(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: 100 * time.Millisecond,
			Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}
		f := newFixture(t, procIdemWrite, c)
		var running, maxRunning, runs atomic.Int32
		_, env, err := f.run(t.Context(), procIdemWrite, func(ctx context.Context) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			if m := maxRunning.Load(); n > m {
				maxRunning.Store(n)
			}
			if runs.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond) // ignores its context, returns 50ms after its deadline
				return nil, nil
			}
			return "ok", nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		if maxRunning.Load() != 1 {
			t.Fatalf("%d attempts of a write ran at once", maxRunning.Load())
		}
		if env.Attempts != 2 {
			t.Fatalf("attempts = %d, want 2", env.Attempts)
		}
	})
}

func TestWriteEndsTimeoutWhenTheAbandonedAttemptNeverReturns(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: 100 * time.Millisecond,
			Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}
		f := newFixture(t, procIdemWrite, c)
		var runs atomic.Int32
		start := time.Now()
		_, env, err := f.run(t.Context(), procIdemWrite, func(ctx context.Context) (any, error) {
			runs.Add(1)
			time.Sleep(time.Hour)
			return nil, nil
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		if runs.Load() != 1 {
			t.Fatalf("a write was re-attempted while its previous attempt still ran (%d runs)", runs.Load())
		}
		if took := time.Since(start); took != 201*time.Millisecond {
			t.Errorf("took %s, want timeout + backoff + one timeout of waiting = 201ms", took)
		}
		time.Sleep(2 * time.Hour)
	})
}

func TestReadsMayOverlapAnAbandonedAttempt(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(1, 100*time.Millisecond))
		var runs atomic.Int32
		start := time.Now()
		v, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			if runs.Add(1) == 1 {
				time.Sleep(time.Hour)
			}
			return "second", nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		if v != "second" || time.Since(start) != 110*time.Millisecond {
			t.Fatalf("read re-attempt got %v after %s, want second after 110ms", v, time.Since(start))
		}
		time.Sleep(2 * time.Hour)
	})
}

func TestAbandonedAttemptsAreCapped(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 10*time.Millisecond), middleware.WithDefaults(middleware.Defaults{MaxAbandoned: 2}))
		release := make(chan struct{})
		hang := func(context.Context) (any, error) { <-release; return nil, nil }
		for range 2 {
			_, env, err := f.run(t.Context(), procRead, hang)
			wantCode(t, env, err, middleware.CodeTimeout)
		}
		var ran atomic.Bool
		_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
		wantCode(t, env, err, middleware.CodeResourceExhausted)
		if ran.Load() {
			t.Fatal("a call over the abandoned cap ran")
		}
		close(release)
		synctest.Wait()
		_, env, err = f.run(t.Context(), procRead, func(context.Context) (any, error) { return nil, nil })
		wantCode(t, env, err, middleware.CodeOK)
	})
}

func TestHandlerCtxErrorIsClassifiedByCause(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 50*time.Millisecond))
		_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			<-ctx.Done()
			return nil, fmt.Errorf("query aborted: %w", ctx.Err())
		})
		wantCode(t, env, err, middleware.CodeTimeout)
	})
}

// An abandoned attempt that panics when it finally returns is reported
// like a panic anywhere: capability.abandoned_result carries the panic's
// redacted text and its stack, for the operator who must find out what
// the late attempt did.
func TestALatePanicIsReportedWithItsStack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 100*time.Millisecond))
		_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			time.Sleep(time.Hour) // ignores its context
			panic("late bug")
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		evs := f.events(env.ExecutionID)
		last := evs[len(evs)-1]
		if last.Type != middleware.EventAbandonedResult || last.Succeeded || !strings.Contains(last.Error, "late bug") || !strings.Contains(last.Stack, "goroutine") {
			t.Errorf("last event %s succeeded=%t error=%q stack %d bytes; want abandoned_result, failed, with the panic and its stack", last.Type, last.Succeeded, last.Error, len(last.Stack))
		}
	})
}
