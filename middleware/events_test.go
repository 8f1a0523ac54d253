package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestEventSequences(t *testing.T) {
	const (
		req  = middleware.EventRequested
		st   = middleware.EventStarted
		re   = middleware.EventRetried
		done = middleware.EventCompleted
		fail = middleware.EventFailed
		canc = middleware.EventCancelled
	)
	type step struct {
		attempt  int
		previous middleware.Code
	}
	for _, tc := range []struct {
		name     string
		cancelAt time.Duration
		fn       func(n int32) func(context.Context) (any, error)
		want     []middleware.EventType
		retried  []step
		final    middleware.Code
		attempts int
	}{
		{name: "success", fn: func(int32) func(context.Context) (any, error) {
			return func(context.Context) (any, error) { return nil, nil }
		}, want: []middleware.EventType{req, st, done}, attempts: 1},
		{name: "retry then success", fn: func(n int32) func(context.Context) (any, error) {
			return func(ctx context.Context) (any, error) {
				if n < 3 {
					return nil, errTransient
				}
				return nil, nil
			}
		}, want: []middleware.EventType{req, st, re, re, done}, retried: []step{{2, middleware.CodeExecutionFailed}, {3, middleware.CodeExecutionFailed}}, attempts: 3},
		{name: "failure", fn: func(int32) func(context.Context) (any, error) {
			return func(context.Context) (any, error) { return nil, errors.New("permanent") }
		}, want: []middleware.EventType{req, st, fail}, final: middleware.CodeExecutionFailed, attempts: 1},
		{name: "timeout then timeout", fn: func(int32) func(context.Context) (any, error) {
			return func(ctx context.Context) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
		}, want: []middleware.EventType{req, st, re, re, re, canc}, retried: []step{{2, middleware.CodeTimeout}, {3, middleware.CodeTimeout}, {4, middleware.CodeTimeout}}, final: middleware.CodeTimeout, attempts: 4},
		{name: "cancellation", cancelAt: 50 * time.Millisecond, fn: func(int32) func(context.Context) (any, error) {
			return func(ctx context.Context) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
		}, want: []middleware.EventType{req, st, canc}, final: middleware.CodeCancelled, attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := newFixture(t, procRead, read(3, 100*time.Millisecond))
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.cancelAt > 0 {
					time.AfterFunc(tc.cancelAt, cancel)
				}
				var n atomic.Int32
				_, env, _ := f.run(ctx, procRead, func(ctx context.Context) (any, error) { return tc.fn(n.Add(1))(ctx) })
				f.wantTypes(env.ExecutionID, tc.want...)
				evs := f.events(env.ExecutionID)
				var retried []step
				for _, e := range evs {
					if e.ExecutionID != env.ExecutionID || e.Procedure != procRead || e.SideEffect != middleware.SideEffectRead {
						t.Errorf("event %s lacks the execution's identity: %+v", e.Type, e)
					}
					if e.Type == middleware.EventRetried {
						retried = append(retried, step{e.Attempt, e.PreviousErrorCode})
					}
					if e.Type == middleware.EventStarted && e.Attempt != 1 {
						t.Errorf("started event attempt = %d, want 1", e.Attempt)
					}
				}
				if len(retried) != len(tc.retried) {
					t.Fatalf("retried events %v, want %v", retried, tc.retried)
				}
				for i := range retried {
					if retried[i] != tc.retried[i] {
						t.Errorf("retried[%d] = %+v, want %+v", i, retried[i], tc.retried[i])
					}
				}
				final := evs[len(evs)-1]
				if final.Code != tc.final || final.Attempts != tc.attempts || env.Attempts != tc.attempts {
					t.Errorf("final event code %s attempts %d (envelope %d), want %s and %d", final.Code, final.Attempts, env.Attempts, tc.final, tc.attempts)
				}
				if final.Duration != env.Duration {
					t.Errorf("final event duration %s, envelope %s", final.Duration, env.Duration)
				}
			})
		})
	}
}

func TestFailingSinksNeverBreakOrStallAnExecution(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		block := make(chan struct{})
		var blockedCalls atomic.Int32
		rec := &agentsafetest.Recorder{}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(0, time.Second)), middleware.WithProtoFiles(nil),
			middleware.WithEventSink(middleware.EventSinkFunc(func(context.Context, middleware.Event) { panic("sink bug") })),
			middleware.WithEventSink(middleware.EventSinkFunc(func(context.Context, middleware.Event) { blockedCalls.Add(1); <-block }),
				middleware.SinkTimeout(10*time.Millisecond)),
			middleware.WithEventSink(rec),
			middleware.WithLogger(discard),
		)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		v, env, err := execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) { return "ok", nil })
		if err != nil || v != "ok" {
			t.Fatalf("execution broke with failing sinks: %v", err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("execution took %s with a blocking sink: delivery must cost it nothing", took)
		}
		if evs, _ := rec.WaitFinal(t.Context(), env.ExecutionID); len(evs) != 3 {
			t.Errorf("healthy sink got %d events, want 3", len(evs))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if blockedCalls.Load() != 1 {
			t.Errorf("the stuck sink was called %d times; the stalled execution's later events are dropped", blockedCalls.Load())
		}
		if st := eng.Stats().Sinks[1]; st.Dropped != 2 {
			t.Errorf("stats of the stuck sink %+v: its stalled execution's 2 later events must be counted as dropped", st)
		}
		close(block)
		// A fresh worker took the stuck sink's queue: the next execution's
		// events all reach it.
		_, env, _ = execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) { return nil, nil })
		rec.WaitFinal(t.Context(), env.ExecutionID)
		time.Sleep(time.Second)
		synctest.Wait()
		if blockedCalls.Load() != 4 {
			t.Errorf("the recovered sink was called %d times in all, want 1+3", blockedCalls.Load())
		}
	})
}

func TestSlogSinkLogsIdsNotPayloads(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var buf bytes.Buffer
		eng, err := middleware.New(middleware.NewRegistry().Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite}), middleware.WithProtoFiles(nil),
			middleware.WithEventSink(middleware.NewSlogSink(slog.New(slog.NewJSONHandler(&buf, nil)))))
		if err != nil {
			t.Fatal(err)
		}
		_, env, _ := execute(eng, t.Context(), call{Procedure: procWrite, Input: adapter.JSONInput([]byte(`{"card":"4111-1111"}`))},
			func(context.Context) (any, error) { return nil, errors.New("boom") })
		synctest.Wait() // the sink's worker has logged what was queued
		out := buf.String()
		for _, want := range []string{`"msg":"capability.requested"`, `"msg":"capability.failed"`, `"level":"WARN"`, env.ExecutionID, `"input_digest":"sha256:`, `"code":"EXECUTION_FAILED"`, `"error":"boom"`} {
			if !strings.Contains(out, want) {
				t.Errorf("slog output lacks %s:\n%s", want, out)
			}
		}
		if strings.Contains(out, "4111-1111") { // the whole value: a hex id may hold "4111"
			t.Errorf("a payload reached the log:\n%s", out)
		}
	})
}

func TestDigestKeyHidesTheInputDigestOnEvents(t *testing.T) {
	in := adapter.JSONInput([]byte(`{"amount":5}`))
	plain, err := in.Digest(procRead)
	if err != nil || !strings.HasPrefix(plain, "sha256:") {
		t.Fatalf("Digest = %q, %v", plain, err)
	}
	for _, tc := range []struct {
		name string
		opts []middleware.Option
		want func(string) bool
	}{
		{"plain", nil, func(d string) bool { return d == plain }},
		{"keyed", []middleware.Option{middleware.WithDigestKey([]byte("deployment secret"))}, func(d string) bool {
			return strings.HasPrefix(d, "hmac-sha256:") && !strings.Contains(d, plain[len("sha256:"):])
		}},
	} {
		f := newFixture(t, procRead, read(0, time.Second), tc.opts...)
		_, env, _ := execute(f.eng, t.Context(), call{Procedure: procRead, Input: in}, func(context.Context) (any, error) { return nil, nil })
		for _, e := range f.events(env.ExecutionID) {
			if !tc.want(e.InputDigest) {
				t.Errorf("%s: event %s digest %q", tc.name, e.Type, e.InputDigest)
			}
		}
	}
}

func TestActorFunction(t *testing.T) {
	type key struct{}
	actorOf := func(ctx context.Context) (middleware.Actor, error) {
		if id, ok := ctx.Value(key{}).(string); ok {
			return middleware.Actor{ID: id, Tenant: "acme", Kind: "agent"}, nil
		}
		return middleware.Actor{}, errors.New("no credentials")
	}
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithActor(actorOf))

	var ran atomic.Bool
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
	wantCode(t, env, err, middleware.CodeUnauthenticated)
	if ran.Load() {
		t.Fatal("the handler ran although the actor function failed")
	}

	ctx := context.WithValue(t.Context(), key{}, "agent-7")
	var seen middleware.Actor
	_, env, err = f.run(ctx, procRead, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		seen = x.Actor
		return nil, nil
	})
	wantCode(t, env, err, middleware.CodeOK)
	if seen.ID != "agent-7" || seen.Tenant != "acme" {
		t.Errorf("handler saw actor %+v", seen)
	}
	for _, e := range f.events(env.ExecutionID) {
		if e.Actor != (middleware.ActorRef{ID: "agent-7", Tenant: "acme"}) {
			t.Errorf("event %s actor = %+v", e.Type, e.Actor)
		}
	}
}

func TestSlogSinkLogsRiskAndWhatAReplayReplayed(t *testing.T) {
	var buf bytes.Buffer
	sink := middleware.NewSlogSink(slog.New(slog.NewJSONHandler(&buf, nil)))
	sink.HandleEvent(t.Context(), middleware.Event{Type: middleware.EventReplayed, ExecutionID: "exe_new", Procedure: procWrite,
		Risk: middleware.RiskHigh, ReplayOf: "exe_original"})
	out := buf.String()
	for _, want := range []string{`"risk":"high"`, `"replay_of":"exe_original"`} {
		if !strings.Contains(out, want) {
			t.Errorf("slog output lacks %s: an audit trail read from the log must show it:\n%s", want, out)
		}
	}
}

// An actor function that panics fails closed like one that errs: the call
// is UNAUTHENTICATED, nothing runs, and the serving goroutine survives
// (grpc-go does not recover a handler's panic: it would end the process).
func TestAnActorFunctionThatPanicsFailsClosed(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithActor(func(context.Context) (middleware.Actor, error) {
		panic("token parser bug")
	}))
	var ran atomic.Bool
	_, env, err := f.run(t.Context(), procRead, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
	wantCode(t, env, err, middleware.CodeUnauthenticated)
	if ran.Load() {
		t.Fatal("the handler ran although the actor function panicked")
	}
	if strings.Contains(env.Error.Message, "token parser bug") {
		t.Errorf("the panic's text reached the caller: %q", env.Error.Message)
	}
}
