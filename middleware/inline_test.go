package middleware_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Inline (SPEC §3): a capability whose handler honours its context runs
// its unary attempts on the caller's goroutine. What changes, and only
// this: the attempt is never abandoned; a result returned after its
// context ended is still discarded and classified by the context's cause;
// that late result is recorded at once; an overrun past the grace is
// reported.

func inline(c middleware.Capability) middleware.Capability { c.Inline = true; return c }

// goid is the calling goroutine's id, from its stack header.
func goid() string {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:n]), "goroutine "), " ")
	return id
}

func TestInlineAttemptsRunOnTheCallersGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"default", false}, {"inline", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := read(1, time.Second)
			c.Inline = tc.inline
			f := newFixture(t, procRead, c)
			caller := goid()
			var ran []string
			_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
				ran = append(ran, goid())
				if len(ran) == 1 {
					return nil, errTransient
				}
				return "ok", nil
			})
			wantCode(t, env, err, middleware.CodeOK)
			if len(ran) != 2 || env.Attempts != 2 {
				t.Fatalf("ran %d attempts (envelope %d), want 2: retries are unchanged", len(ran), env.Attempts)
			}
			for i, g := range ran {
				if (g == caller) != tc.inline {
					t.Errorf("attempt %d ran on goroutine %s, the caller's is %s: want on the caller's = %t", i+1, g, caller, tc.inline)
				}
			}
		})
	}
}

func TestInlineWaitsForAHandlerThatIgnoresItsContextAndDiscardsItsResult(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(0, 100*time.Millisecond)))
		start := time.Now()
		v, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			time.Sleep(time.Hour) // ignores its context
			return "late", nil
		})
		if took := time.Since(start); took != time.Hour {
			t.Errorf("Execute returned after %s, want when the handler returned (1h): an Inline attempt is never abandoned", took)
		}
		wantCode(t, env, err, middleware.CodeTimeout)
		if v != nil {
			t.Errorf("the late result %v was used; it must be discarded", v)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventDeadlineOverrun, middleware.EventCancelled)
		ev := f.events(env.ExecutionID)[2]
		if ev.Attempt != 1 || ev.Duration != time.Hour-100*time.Millisecond {
			t.Errorf("deadline_overrun attempt %d overrun %s, want attempt 1, overrun 59m59.9s (returned 1h after the start, 100ms deadline)", ev.Attempt, ev.Duration)
		}
	})
}

func TestInlineResultReturnedInTimeWins(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(0, 100*time.Millisecond)))
		v, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			time.Sleep(99 * time.Millisecond)
			return "in time", nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		if v != "in time" {
			t.Errorf("value %v, want the handler's", v)
		}
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted)
	})
}

// A handler that stops when its context ends keeps Inline's promise: the
// context's cause classifies, and nothing is reported as an overrun.
func TestInlineHandlerThatHonoursItsContext(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(1, 100*time.Millisecond)))
		start := time.Now()
		_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		if took := time.Since(start); took != 210*time.Millisecond || env.Attempts != 2 {
			t.Errorf("took %s with %d attempts, want two 100ms attempts and a 10ms backoff: a timed-out read is retried as without Inline", took, env.Attempts)
		}
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventRetried, middleware.EventCancelled)
	})
}

func TestInlineOverrunGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		grace    time.Duration // 0: the default, 100ms
		late     time.Duration // past the 100ms deadline
		reported bool
	}{
		{"within the default grace", 0, 100 * time.Millisecond, false},
		{"past the default grace", 0, 101 * time.Millisecond, true},
		{"within a configured grace", time.Second, 900 * time.Millisecond, false},
		{"past a configured grace", 10 * time.Millisecond, 11 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := newFixture(t, procRead, inline(read(0, 100*time.Millisecond)), middleware.WithDefaults(middleware.Defaults{OverrunGrace: tc.grace}))
				_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
					time.Sleep(100*time.Millisecond + tc.late)
					return "late", nil
				})
				wantCode(t, env, err, middleware.CodeTimeout)
				types := f.types(env.ExecutionID)
				if got := slices.Contains(types, middleware.EventDeadlineOverrun); got != tc.reported {
					t.Errorf("events %v: deadline_overrun emitted = %t, want %t", types, got, tc.reported)
				}
			})
		})
	}
}

func TestOverrunGraceMustNotBeNegative(t *testing.T) {
	_, err := middleware.New(nil, middleware.WithDefaults(middleware.Defaults{OverrunGrace: -time.Second}))
	if err == nil || !strings.Contains(err.Error(), "Defaults.OverrunGrace must not be negative") {
		t.Errorf("New = %v, want the negative OverrunGrace named", err)
	}
}

// The caller leaving ends the attempt's context too: an Inline handler
// that goes on regardless holds the call, and its overrun counts from
// the moment the caller left.
func TestInlineCallerCancellationIsTerminalAndItsOverrunReported(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(3, time.Hour)))
		ctx, cancel := context.WithCancel(t.Context())
		runs := 0
		_, env, err := f.run(ctx, procRead, func(context.Context) (any, error) {
			runs++
			time.Sleep(time.Second)
			cancel()
			time.Sleep(time.Second) // ignores its context
			return "late", nil
		})
		wantCode(t, env, err, middleware.CodeCancelled)
		if runs != 1 {
			t.Errorf("%d attempts, want 1: the caller's cancellation is never retried", runs)
		}
		synctest.Wait()
		f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventDeadlineOverrun, middleware.EventCancelled)
		if ev := f.events(env.ExecutionID)[2]; ev.Duration != time.Second {
			t.Errorf("overrun %s, want 1s: from the caller's cancellation to the return", ev.Duration)
		}
	})
}

// A handler that breaks the promise is found through the logger too:
// one warning per procedure, at most once a minute.
func TestInlineOverrunWarnsOncePerProcedureAndMinute(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		late := func(context.Context) (any, error) { time.Sleep(time.Second); return nil, nil }
		eng, err := middleware.New(middleware.NewRegistry().
			Register(procRead, inline(read(0, 100*time.Millisecond))).
			Register(procWrite, inline(middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 100 * time.Millisecond})),
			middleware.WithProtoFiles(nil), middleware.WithLogger(logger))
		if err != nil {
			t.Fatal(err)
		}
		warnings := func() int {
			return strings.Count(logs.String(), "an Inline handler returned long after its context ended")
		}
		for range 3 {
			execute(eng, t.Context(), call{Procedure: procRead}, late)
		}
		if n := warnings(); n != 1 {
			t.Fatalf("%d warnings after three overruns of one procedure, want 1:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "procedure="+procRead) || !strings.Contains(logs.String(), "overrun=900ms") {
			t.Errorf("the warning names the procedure and the overrun:\n%s", logs.String())
		}
		execute(eng, t.Context(), call{Procedure: procWrite}, late)
		if n := warnings(); n != 2 {
			t.Fatalf("%d warnings, want a second one for another procedure", n)
		}
		time.Sleep(time.Minute)
		execute(eng, t.Context(), call{Procedure: procRead}, late)
		if n := warnings(); n != 3 {
			t.Fatalf("%d warnings, want another for the first procedure a minute later", n)
		}
	})
}

func TestInlinePanicIsRecovered(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(2, 100*time.Millisecond)))
		runs := 0
		_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			runs++
			panic("bug " + "hunter2")
		})
		wantCode(t, env, err, middleware.CodeExecutionFailed)
		if runs != 1 || env.Error.Retryable || env.Error.Message == "" || strings.Contains(env.Error.Message, "hunter2") {
			t.Errorf("runs %d, envelope %+v: a panic is a concealed, non-retryable EXECUTION_FAILED", runs, env.Error)
		}
		if final := f.final(env.ExecutionID); !strings.Contains(final.Stack, "TestInlinePanicIsRecovered") {
			t.Errorf("the final event carries no stack of the panic: %q", final.Stack)
		}
	})
}

// A panic after the context ended is a late result like any other: the
// context's cause classifies, and the final event still carries the stack.
func TestInlineLatePanicKeepsItsStack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procRead, inline(read(0, 100*time.Millisecond)))
		_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) {
			time.Sleep(time.Second)
			panic("late bug")
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		final := f.final(env.ExecutionID)
		if !strings.Contains(final.Error, "late bug") || !strings.Contains(final.Stack, "TestInlineLatePanicKeepsItsStack") {
			t.Errorf("final event error %q, %d bytes of stack; want the late panic and its stack", final.Error, len(final.Stack))
		}
		if slices.Contains(f.types(env.ExecutionID), middleware.EventAbandonedResult) {
			t.Error("an Inline attempt is never abandoned: no abandoned_result")
		}
	})
}

// An approval consumed by an Inline execution records the late result at
// finalization: completed or failed, late, and never in_doubt.
func TestInlineLateResultIsRecordedInTheApprovalAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result error
		status store.ApprovalStatus
		code   string
	}{
		{"a late success", nil, store.ApprovalCompleted, "OK"},
		{"a late failure", errTransient, store.ApprovalFailed, "EXECUTION_FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				g := newGated(t, inline(middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 100 * time.Millisecond, Approval: middleware.Approval{Required: true}}))
				id := g.requested(refund)
				g.approve(id)
				_, env, err := execute(g.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) {
					time.Sleep(time.Second) // ignores its context
					return "refunded", tc.result
				})
				wantCode(t, env, err, middleware.CodeTimeout)
				// No synctest.Wait: the record is written before Execute returns.
				rec, _ := g.store.Get(t.Context(), id)
				if rec.Status != tc.status || rec.Outcome.Status != tc.status || !rec.Outcome.Late || rec.Outcome.Code != tc.code {
					t.Errorf("record %s, outcome %+v; want %s (%s), late, at finalization", rec.Status, rec.Outcome, tc.status, tc.code)
				}
				g.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventApprovalConsumed, middleware.EventStarted, middleware.EventDeadlineOverrun, middleware.EventCancelled)
			})
		})
	}
}

// The same for a caller's key: the late result is stored before the call
// is answered, so a repeat right after is replayed.
func TestInlineLateResultIsStoredForTheKeyAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		r := oneResult(t, inline(middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: 100 * time.Millisecond}))
		keys := make(chan string, 1)
		_, env, err := r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			keys <- x.IdempotencyKey
			time.Sleep(time.Second) // ignores its context: the charge lands late
			return "charged late", nil
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		rec, err := r.record(<-keys)
		if err != nil || rec.State != store.ResultDone || !rec.Result.Late || rec.Result.ExecutionID != env.ExecutionID {
			t.Fatalf("the late result is stored at finalization, never in doubt: %+v, %v", rec, err)
		}
		r.wantLateReplayed(env)
	})
}

// Never two attempts of a write at once holds trivially: the next attempt
// starts on the same goroutine after the previous one returned.
func TestInlineWriteAttemptsNeverOverlap(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procIdemWrite, inline(middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: 100 * time.Millisecond,
			Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}))
		var running, most atomic.Int32
		_, env, err := f.run(t.Context(), procIdemWrite, func(ctx context.Context) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			most.Store(max(most.Load(), n))
			time.Sleep(time.Second) // ignores its context
			return nil, nil
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		if env.Attempts != 2 || most.Load() != 1 {
			t.Errorf("%d attempts, at most %d at once; want 2, never overlapping", env.Attempts, most.Load())
		}
	})
}

// Inline changes nothing for a stream: it runs on the caller's goroutine
// anyway, its timeout only if set.
func TestInlineStreamIsUnaffected(t *testing.T) {
	f := newFixture(t, procRead, inline(middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true}))
	env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); ok {
			t.Error("a stream's context has a deadline its capability did not set")
		}
		return nil
	})
	wantCode(t, env, err, middleware.CodeOK)
}

// The slog sink logs an overrun as the warning it is, under its own name.
func TestSlogSinkLogsAnOverrunAsAWarning(t *testing.T) {
	var buf bytes.Buffer
	sink := middleware.NewSlogSink(slog.New(slog.NewJSONHandler(&buf, nil)))
	sink.HandleEvent(t.Context(), middleware.Event{Type: middleware.EventDeadlineOverrun, ExecutionID: "exe_1", Procedure: procRead, Attempt: 1, Duration: 2 * time.Second})
	out := buf.String()
	for _, want := range []string{`"level":"WARN"`, `"msg":"capability.deadline_overrun"`, `"attempt":1`, `"overrun":2000000000`} {
		if !strings.Contains(out, want) {
			t.Errorf("slog output lacks %s:\n%s", want, out)
		}
	}
}

// NoEffect on an Inline attempt (SPEC §3, §7): returned in time, the
// approval goes back to approved before the call is answered, as on a
// worker; returned after the attempt's context ended, the outcome is the
// context's and the approval stays spent — a late result is recorded, never
// taken back.
func TestInlineNoEffectCountsOnlyInTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		late   bool
		code   middleware.Code
		status store.ApprovalStatus
	}{
		{"in time", false, middleware.CodeExecutionFailed, store.ApprovalApproved},
		{"late", true, middleware.CodeTimeout, store.ApprovalFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				g := newGated(t, inline(middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 100 * time.Millisecond, Approval: middleware.Approval{Required: true}}))
				id := g.requested(refund)
				g.approve(id)
				_, env, err := execute(g.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) {
					if tc.late {
						time.Sleep(time.Second) // ignores its context
					}
					return nil, middleware.NoEffect(errStateChanged)
				})
				wantCode(t, env, err, tc.code)
				rec, _ := g.store.Get(t.Context(), id)
				if rec.Status != tc.status {
					t.Errorf("the approval is %s when the call is answered, want %s (outcome %+v)", rec.Status, tc.status, rec.Outcome)
				}
			})
		})
	}
}
