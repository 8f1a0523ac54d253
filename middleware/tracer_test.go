package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

type traceKey struct{}

// traceCtx is a tracer's context: the caller's plus one value naming the
// scope ("exe_…" or "exe_…/2"), the way an OpenTelemetry span is carried.
func traceCtx(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, traceKey{}, scope)
}

func scopeOf(ctx context.Context) string { s, _ := ctx.Value(traceKey{}).(string); return s }

// recordingTracer writes down every call the engine makes to it.
type recordingTracer struct {
	mu    sync.Mutex
	log   []string
	infos []middleware.ExecutionInfo
	envs  []middleware.Envelope
	outs  []middleware.AttemptOutcome
}

func (r *recordingTracer) add(s string) { r.mu.Lock(); r.log = append(r.log, s); r.mu.Unlock() }

func (r *recordingTracer) StartExecution(ctx context.Context, x middleware.ExecutionInfo) (context.Context, func(middleware.Envelope)) {
	r.mu.Lock()
	r.infos = append(r.infos, x)
	r.mu.Unlock()
	r.add("start execution")
	return traceCtx(ctx, x.ID), func(env middleware.Envelope) {
		r.mu.Lock()
		r.envs = append(r.envs, env)
		r.mu.Unlock()
		r.add("end execution " + statusOf(env))
	}
}

func (r *recordingTracer) StartAttempt(ctx context.Context, n int) (context.Context, func(middleware.AttemptOutcome)) {
	parent := scopeOf(ctx)
	r.add(fmt.Sprintf("start attempt %d under %t", n, parent != ""))
	return traceCtx(ctx, fmt.Sprintf("%s/%d", parent, n)), func(o middleware.AttemptOutcome) {
		r.mu.Lock()
		r.outs = append(r.outs, o)
		r.mu.Unlock()
		r.add(fmt.Sprintf("end attempt %d %s", n, o.Code))
	}
}

func (r *recordingTracer) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func statusOf(env middleware.Envelope) string {
	if env.Error != nil {
		return env.Error.Code.String()
	}
	return env.Status.String()
}

func (r *recordingTracer) want(t *testing.T, want ...string) {
	t.Helper()
	if got := r.calls(); !slices.Equal(got, want) {
		t.Errorf("tracer calls:\n got %q\nwant %q", got, want)
	}
}

// ctxSink records the tracing scope each event was delivered with.
type ctxSink struct {
	mu     sync.Mutex
	scopes map[middleware.EventType]string
}

func (s *ctxSink) HandleEvent(ctx context.Context, e middleware.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scopes == nil {
		s.scopes = map[middleware.EventType]string{}
	}
	s.scopes[e.Type] = scopeOf(ctx)
}

func TestTracerNestsAttemptsUnderTheExecution(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		tr := &recordingTracer{}
		sink := &ctxSink{}
		f := newFixture(t, procRead, read(1, time.Second), middleware.WithTracer(tr), middleware.WithEventSink(sink))
		var handlerScope string
		var seen middleware.Execution
		_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			handlerScope = scopeOf(ctx)
			seen, _ = middleware.ExecutionFromContext(ctx)
			return "ok", nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		if want := env.ExecutionID + "/1"; handlerScope != want {
			t.Errorf("the handler's context carries scope %q, want the attempt's %q: its spans would not nest under its attempt", handlerScope, want)
		}
		if seen.ID != env.ExecutionID || seen.Attempt != 1 {
			t.Errorf("ExecutionFromContext under a tracer: %+v", seen)
		}
		tr.want(t, "start execution", "start attempt 1 under true", "end attempt 1 OK", "end execution completed")
		if info := tr.infos[0]; info.ID != env.ExecutionID || info.Procedure != procRead || info.SideEffect != middleware.SideEffectRead || info.Streaming {
			t.Errorf("ExecutionInfo %+v", info)
		}
		if tr.envs[0] != env {
			t.Errorf("the execution ends with envelope %+v, Execute returned %+v", tr.envs[0], env)
		}
		synctest.Wait() // the sinks have what was queued
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, typ := range []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted} {
			if got := sink.scopes[typ]; got != env.ExecutionID {
				t.Errorf("event %s delivered with scope %q, want the execution's", typ, got)
			}
		}
	})
}

func TestTracerSeesEveryAttemptAndItsOutcome(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		tr := &recordingTracer{}
		f := newFixture(t, procRead, read(2, 100*time.Millisecond), middleware.WithTracer(tr))
		n := 0
		_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
			n++
			if n == 1 {
				return nil, errTransient
			}
			return nil, nil
		})
		wantCode(t, env, err, middleware.CodeOK)
		tr.want(t, "start execution",
			"start attempt 1 under true", "end attempt 1 EXECUTION_FAILED",
			"start attempt 2 under true", "end attempt 2 OK",
			"end execution completed")
		if got := tr.outs[0]; !got.Retryable || got.Abandoned {
			t.Errorf("a retried transient failure ends its attempt with %+v, want retryable and not abandoned", got)
		}
	})
}

func TestTracerKeepsTimeoutAndCancellationSemantics(t *testing.T) {
	t.Run("timeout of a handler that ignores its context", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			tr := &recordingTracer{}
			f := newFixture(t, procRead, read(0, 100*time.Millisecond), middleware.WithTracer(tr))
			release := make(chan struct{})
			deadlines := make(chan time.Time, 1)
			start := time.Now()
			_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
				d, _ := ctx.Deadline()
				deadlines <- d
				<-release
				return nil, nil
			})
			wantCode(t, env, err, middleware.CodeTimeout)
			if deadline, want := <-deadlines, start.Add(100*time.Millisecond); !deadline.Equal(want) {
				t.Errorf("the attempt's deadline under a tracer is %v, want %v", deadline, want)
			}
			tr.want(t, "start execution", "start attempt 1 under true", "end attempt 1 TIMEOUT", "end execution TIMEOUT")
			if got := tr.outs[0]; !got.Abandoned || !got.Retryable {
				t.Errorf("an attempt abandoned at its deadline ends with %+v, want abandoned and retryable", got)
			}
			close(release)
			synctest.Wait()
		})
	})
	t.Run("the caller leaving", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			tr := &recordingTracer{}
			f := newFixture(t, procRead, read(2, time.Second), middleware.WithTracer(tr))
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(10*time.Millisecond, cancel)
			_, env, err := f.run(ctx, procRead, func(ctx context.Context) (any, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
			wantCode(t, env, err, middleware.CodeCancelled)
			tr.want(t, "start execution", "start attempt 1 under true", "end attempt 1 CANCELLED", "end execution CANCELLED")
		})
	})
}

func TestTracerSeesExecutionsThatNeverRan(t *testing.T) {
	tr := &recordingTracer{}
	g := newGated(t, gatedCap, middleware.WithTracer(tr))
	id := g.requested(refund)
	tr.want(t, "start execution", "end execution APPROVAL_REQUIRED")
	if tr.infos[0].InputDigest == "" || tr.infos[0].Actor.ID != agent.ID {
		t.Errorf("a gated execution's info lacks the digest or actor: %+v", tr.infos[0])
	}
	if tr.envs[0].ApprovalID != id {
		t.Errorf("the envelope the tracer sees lacks the approval id: %+v", tr.envs[0])
	}
}

func TestTracerDigestWithoutSinks(t *testing.T) {
	tr := &recordingTracer{}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, middleware.Capability{SideEffect: middleware.SideEffectWrite}), middleware.WithProtoFiles(nil),
		middleware.WithTracer(tr), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = execute(eng, t.Context(), call{Procedure: procRefund, Input: refund}, noop)
	want, _ := refund.Digest(procRefund)
	if got := tr.infos[0].InputDigest; got != want {
		t.Errorf("the tracer sees digest %q without any sink, want %q", got, want)
	}
}

func TestTracerOnStreams(t *testing.T) {
	tr := &recordingTracer{}
	f := newFixture(t, procRead, read(0, 0), middleware.WithTracer(tr))
	var scope string
	env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(ctx context.Context) error {
		scope = scopeOf(ctx)
		return errors.New("stream broke")
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if scope != env.ExecutionID+"/1" || !tr.infos[0].Streaming {
		t.Errorf("a stream's handler runs in scope %q (info %+v), want its attempt's", scope, tr.infos[0])
	}
	tr.want(t, "start execution", "start attempt 1 under true", "end attempt 1 EXECUTION_FAILED", "end execution EXECUTION_FAILED")
}

// A stream the strict audit sink refuses at capability.started starts no
// attempt, so no attempt span is left open: every span started is ended.
func TestTracerOnAStreamRefusedAtStarted(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		tr := &recordingTracer{}
		f := newFixture(t, procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true}, middleware.WithTracer(tr),
			middleware.WithAuditSink(&auditSink{failOn: middleware.EventStarted}))
		env, err := executeStream(f.eng, t.Context(), call{Procedure: procRead}, func(context.Context) error { return nil })
		wantCode(t, env, err, middleware.CodeAuditUnavailable)
		tr.want(t, "start execution", "end execution AUDIT_UNAVAILABLE")
	})
}

// lazyTracer returns no context and no end functions.
type lazyTracer struct{ calls int }

func (l *lazyTracer) StartExecution(context.Context, middleware.ExecutionInfo) (context.Context, func(middleware.Envelope)) {
	l.calls++
	return nil, nil
}

func (l *lazyTracer) StartAttempt(context.Context, int) (context.Context, func(middleware.AttemptOutcome)) {
	l.calls++
	return nil, nil
}

func TestTracerMayReturnNothing(t *testing.T) {
	l := &lazyTracer{}
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithTracer(l))
	var seen bool
	_, env, err := f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
		_, seen = middleware.ExecutionFromContext(ctx)
		return nil, nil
	})
	wantCode(t, env, err, middleware.CodeOK)
	if !seen || l.calls != 2 {
		t.Errorf("a tracer returning nil contexts: handler saw its execution %t, tracer called %d times (want 2)", seen, l.calls)
	}
}

// sinkingTracer is a tracer that is also an event sink.
type sinkingTracer struct {
	recordingTracer
	events []middleware.EventType
	scopes []string
}

func (s *sinkingTracer) HandleEvent(ctx context.Context, e middleware.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e.Type)
	s.scopes = append(s.scopes, scopeOf(ctx))
}

// A tracer that is also a sink receives every event on the execution's
// goroutine, in the execution's traced context: by the time Execute
// returns, the span has its events. WithTracer(nil) removes a tracer.
func TestATracerThatIsASinkReceivesEveryEventSynchronously(t *testing.T) {
	tr := &sinkingTracer{}
	f := newFixture(t, procRead, read(0, time.Second), middleware.WithTracer(tr))
	_, env, _ := f.run(t.Context(), procRead, noop)
	tr.mu.Lock()
	events, scopes := slices.Clone(tr.events), slices.Clone(tr.scopes)
	tr.mu.Unlock()
	if !slices.Equal(events, []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}) {
		t.Errorf("the tracer's sink had %v when Execute returned, want the whole trail", events)
	}
	for i, sc := range scopes {
		if sc != env.ExecutionID {
			t.Errorf("event %s delivered in scope %q, want the execution's traced context", events[i], sc)
		}
	}

	off := &recordingTracer{}
	f = newFixture(t, procRead, read(0, time.Second), middleware.WithTracer(off), middleware.WithTracer(nil))
	_, _, _ = f.run(t.Context(), procRead, noop)
	if got := off.calls(); len(got) != 0 {
		t.Errorf("WithTracer(nil) after a tracer must remove it; it was called: %q", got)
	}
}

func TestDecisionEventsCarryTheWait(t *testing.T) {
	g := newGated(t, gatedCap)
	first, _, _ := g.call(agent, refund, "")
	g.advance(7 * time.Minute)
	g.approve(first.ApprovalID)
	last := g.waitEvent(first.ExecutionID, middleware.EventApproved)
	if last.Duration != 7*time.Minute {
		t.Errorf("capability.approved must carry how long the record waited (7m): %s %v", last.Type, last.Duration)
	}
}
