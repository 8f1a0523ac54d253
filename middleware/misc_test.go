package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestBadInputGetsClearErrorsNotPanics(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second))
	_, env, err := execute(f.eng, t.Context(), call{Procedure: procRead}, nil)
	if middleware.CodeOf(err) != middleware.CodeInvalidArgument || !strings.Contains(err.Error(), "needs an attempt function") || env.ExecutionID != "" {
		t.Errorf("nil attempt function: %v", err)
	}
	_, err = executeStream(f.eng, t.Context(), call{Procedure: procRead}, nil)
	if middleware.CodeOf(err) != middleware.CodeInvalidArgument {
		t.Errorf("nil stream function: %v", err)
	}

	var ran atomic.Bool
	_, env, err = execute(f.eng, t.Context(), call{Procedure: procRead, ApprovalID: "apr_not-hex"}, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if !strings.Contains(env.Error.Message, "Agentsafe-Approval-Id") || ran.Load() {
		t.Errorf("malformed approval header: message %q, ran %v", env.Error.Message, ran.Load())
	}
}

func TestUngovernedProceduresPassThroughUnlessStrict(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second))
	v, env, err := execute(f.eng, t.Context(), call{Procedure: "/x.V1/Other"}, func(ctx context.Context) (any, error) {
		if _, ok := middleware.ExecutionFromContext(ctx); ok {
			t.Error("an ungoverned call ran inside an execution")
		}
		return "through", nil
	})
	if v != "through" || err != nil || env.ExecutionID != "" || adapter.Resolve(f.eng, "/x.V1/Other").Governed() {
		t.Fatalf("pass-through: %v %+v %v", v, env, err)
	}
	if len(f.rec.Events()) != 0 {
		t.Error("an ungoverned call emitted events")
	}

	strict := newFixture(t, procRead, read(0, time.Second), middleware.WithStrict())
	var ran atomic.Bool
	_, env, err = execute(strict.eng, t.Context(), call{Procedure: "/x.V1/Other"}, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
	wantCode(t, env, err, middleware.CodeCapabilityNotFound)
	if ran.Load() {
		t.Fatal("strict mode ran an ungoverned procedure")
	}
	strict.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventFailed)
	for _, p := range []string{"/grpc.health.v1.Health/Check", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"} {
		if adapter.Resolve(strict.eng, p).Governed() {
			t.Errorf("strict mode governs %s, which is always exempt", p)
		}
	}
}

func TestStreamRunsOnceSynchronouslyWithIDs(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true, Retry: middleware.Retry{MaxRetries: 3}})
		var runs atomic.Int32
		env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(ctx context.Context) error {
			runs.Add(1)
			x, ok := middleware.ExecutionFromContext(ctx)
			if !ok || x.ID == "" || x.Attempt != 1 {
				t.Errorf("stream handler saw %+v", x)
			}
			if _, has := ctx.Deadline(); has {
				t.Error("a stream got a deadline its capability never set")
			}
			return errTransient
		})
		wantCode(t, env, err, middleware.CodeExecutionFailed)
		if runs.Load() != 1 {
			t.Fatalf("a stream ran %d times; streams are never retried", runs.Load())
		}
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventFailed)
	})
}

func TestStreamTimeoutOnlyWhenSet(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true, Timeout: 50 * time.Millisecond})
		env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		wantCode(t, env, err, middleware.CodeTimeout)

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(10*time.Millisecond, cancel)
		env, err = executeStream(f.eng, ctx, call{Procedure: procRead}, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		wantCode(t, env, err, middleware.CodeCancelled)
	})
}

func TestStreamPanicIsRecovered(t *testing.T) {
	f := newFixture(t, procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true})
	env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(context.Context) error { panic("stream bug") })
	wantCode(t, env, err, middleware.CodeExecutionFailed)
}

// A handler that panics with http.ErrAbortHandler is finalized once, not
// retried, and the engine hands the panic value back for the net/http
// adapter to re-raise on its serving goroutine: the engine itself knows
// no framework.
func TestErrAbortHandlerIsHandedBackAfterFinalizing(t *testing.T) {
	f := newFixture(t, procRead, read(2, time.Second))
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { panic(http.ErrAbortHandler) })
	if p, ok := errors.AsType[*middleware.PanicError](err); !ok || p.Value != http.ErrAbortHandler {
		t.Fatalf("err %v: want a *PanicError carrying http.ErrAbortHandler", err)
	}
	if last := f.final(env.ExecutionID); last.Type != middleware.EventFailed || last.Attempts != 1 {
		t.Errorf("the aborted execution was not finalized once: %+v", last)
	}
}

func TestCodesAndClassifier(t *testing.T) {
	for c := middleware.CodeOK; !strings.HasPrefix(c.String(), "Code("); c++ {
		var parsed middleware.Code
		if err := parsed.UnmarshalText([]byte(c.String())); err != nil || parsed != c {
			t.Errorf("code %d does not round-trip: %q", c, c.String())
		}
	}
	if middleware.CodeOf(nil) != middleware.CodeOK || middleware.CodeOf(errors.New("x")) != middleware.CodeExecutionFailed ||
		middleware.CodeOf(fmt.Errorf("wrapped: %w", middleware.NewError(middleware.CodeTimeout, "t"))) != middleware.CodeTimeout {
		t.Error("CodeOf misclassifies")
	}
	if middleware.Retryable(nil) != nil {
		t.Error("Retryable(nil) must be nil")
	}
	base := errors.New("base")
	if r := middleware.Retryable(base); !errors.Is(r, base) || !middleware.DefaultClassifier(r) || middleware.DefaultClassifier(base) {
		t.Error("Retryable must mark transient and keep the chain")
	}
	if !middleware.NewError(middleware.CodeTimeout, "").Retryable || middleware.NewError(middleware.CodeCancelled, "").Retryable {
		t.Error("NewError must take retryability from the code table")
	}

	// A replaced classifier decides.
	f := newFixture(t, procRead, read(1, time.Second), middleware.WithClassifier(func(err error) bool { return strings.Contains(err.Error(), "503") }))
	var runs atomic.Int32
	f.run(t.Context(), procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errors.New("upstream said 503") })
	if runs.Load() != 2 {
		t.Errorf("custom classifier: %d runs, want 2", runs.Load())
	}
}

func TestRedactorShapesEventErrors(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithRedactor(func(error) string { return "[redacted]" }))
	_, env, _ := f.run(t.Context(), procRead, func(context.Context) (any, error) { return nil, errors.New("token=abc") })
	if ev := f.final(env.ExecutionID); ev.Error != "[redacted]" {
		t.Errorf("event error = %q, want the redactor's output", ev.Error)
	}
}

func TestClockStampsEvents(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithClock(func() time.Time { return at }))
	f.run(t.Context(), procRead, func(ctx context.Context) (any, error) { return nil, nil })
	for _, e := range f.rec.Events() {
		if !e.Time.Equal(at) {
			t.Errorf("event time %s, want the injected clock", e.Time)
		}
	}
}

func TestFailedFinalAttemptHandsBackItsValue(t *testing.T) {
	f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite})
	v, env, err := f.run(t.Context(), procWrite, func(context.Context) (any, error) { return "its own 503 response", errTransient })
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if v != "its own 503 response" {
		t.Errorf("value %v: the finalized attempt's value must come back with its error, for adapters to write", v)
	}
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, read(0, 10*time.Millisecond))
		v, _, _ := f.run(t.Context(), procRead, func(context.Context) (any, error) { time.Sleep(time.Second); return "late", errTransient })
		if v != nil {
			t.Errorf("a timed-out attempt's value %v came back", v)
		}
		time.Sleep(2 * time.Second)
	})
}

func TestPanickingClassifierAndRedactorNeverBreakAnExecution(t *testing.T) {
	f := newFixture(t, procRead, read(2, time.Second),
		middleware.WithClassifier(func(error) bool { panic("classifier bug") }),
		middleware.WithRedactor(func(error) string { panic("redactor bug") }))
	var runs atomic.Int32
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { runs.Add(1); return nil, errors.New("boom") })
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if runs.Load() != 1 {
		t.Errorf("a panicking classifier must mean not retryable: %d runs", runs.Load())
	}
	if ev := f.final(env.ExecutionID); ev.Error != "<the redactor panicked>" {
		t.Errorf("final event error %q", ev.Error)
	}
}

// TestSinkCallsOfOneExecutionNeverOverlap has an abandoned attempt return
// exactly when the next attempt's events are being delivered: the
// abandoned_result event must wait its turn.
func TestSinkCallsOfOneExecutionNeverOverlap(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var inFlight, overlaps atomic.Int32
		slow := middleware.EventSinkFunc(func(context.Context, middleware.Event) {
			if inFlight.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
			inFlight.Add(-1)
		})
		c := read(1, 100*time.Millisecond)
		c.Retry.Backoff = time.Millisecond
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, c), middleware.WithEventSink(slow), middleware.WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int32
		execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) {
			if n.Add(1) == 1 {
				time.Sleep(103 * time.Millisecond) // returns late, while attempt 2's events go out
			}
			return nil, nil
		})
		time.Sleep(time.Second)
		synctest.Wait()
		if overlaps.Load() != 0 {
			t.Errorf("%d sink calls of one execution overlapped; they must be delivered in order, one at a time", overlaps.Load())
		}
	})
}

func TestRefuseRecordsAnExecutionThatNeverRan(t *testing.T) {
	f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite})
	env, err := refuse(f.eng, t.Context(), call{Procedure: procWrite}, middleware.NewError(middleware.CodeInvalidArgument, "the body is over the 1 MiB limit"))
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if env.ExecutionID == "" || env.Attempts != 0 || env.Error.Message != "the body is over the 1 MiB limit" {
		t.Errorf("envelope %+v", env)
	}
	f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventFailed)
	if env, err := refuse(f.eng, t.Context(), call{Procedure: "/x.V1/Other"}, middleware.NewError(middleware.CodeInvalidArgument, "x")); env.ExecutionID != "" || err == nil {
		t.Errorf("an ungoverned procedure must not open an execution: %+v", env)
	}
}
