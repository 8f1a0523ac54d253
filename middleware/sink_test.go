package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// stallFirst is a sink that sleeps d on the first capability.requested it
// sees, then records everything.
type stallFirst struct {
	d       time.Duration
	stalled atomic.Pointer[string]
	agentsafetest.Recorder
}

func (s *stallFirst) HandleEvent(ctx context.Context, e middleware.Event) {
	if e.Type == middleware.EventRequested && s.stalled.CompareAndSwap(nil, &e.ExecutionID) {
		time.Sleep(s.d)
	}
	s.Recorder.HandleEvent(ctx, e)
}

// A sink that stalls on one execution's event costs only that execution
// its later events for that sink: another execution, run to completion
// while the sink is stalled, gets its whole trail, without waiting out the
// stall.
func TestASinkStalledByOneExecutionDelaysNoOther(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		sink := &stallFirst{d: 600 * time.Millisecond}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(0, time.Second)), middleware.WithProtoFiles(nil),
			middleware.WithEventSink(sink), middleware.WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		_, envA, _ := execute(eng, t.Context(), call{Procedure: procRead}, noop)
		time.Sleep(300 * time.Millisecond)
		_, envB, _ := execute(eng, t.Context(), call{Procedure: procRead}, noop)
		start := time.Now()
		evs, err := sink.WaitFinal(t.Context(), envB.ExecutionID)
		if err != nil || !slices.Equal(typesOf(evs), []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}) {
			t.Fatalf("execution B, run while A stalled the sink, recorded %v (%v); want its whole trail", typesOf(evs), err)
		}
		if waited := time.Since(start); waited > 0 {
			t.Errorf("B's events waited %s behind A's stall, which the 250ms bound had abandoned", waited)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := typesOf(sink.Execution(envA.ExecutionID)); !slices.Equal(got, []middleware.EventType{middleware.EventRequested}) {
			t.Errorf("the stalled execution's trail for this sink: %v; want its stalled event only, the rest dropped", got)
		}
		if st := eng.Stats().Sinks[0]; st.Dropped != 2 {
			t.Errorf("sink stats %+v: want A's 2 later events counted as dropped", st)
		}
	})
}

func typesOf(evs []middleware.Event) []middleware.EventType {
	var out []middleware.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// Under load: one sink stalls for a second on one execution while 10,000
// others run. Every other execution's events all arrive, in order, with
// exactly one final event; the stall's drops are counted exactly, and the
// warning is logged once.
func TestAStalledSinkUnderLoadCostsOnlyTheStalledExecution(t *testing.T) {
	executions := 10_000
	if raceEnabled {
		executions = 1_000 // the same rule; -race makes each execution ten times slower
	}
	inBubble(t, func(t *testing.T) {
		var stalled atomic.Pointer[string]
		rec := &agentsafetest.Recorder{}
		var logs syncBuffer
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(0, time.Second)), middleware.WithProtoFiles(nil),
			middleware.WithEventSink(middleware.EventSinkFunc(func(ctx context.Context, e middleware.Event) {
				if e.Type == middleware.EventRequested && stalled.CompareAndSwap(nil, &e.ExecutionID) {
					time.Sleep(time.Second)
				}
				rec.HandleEvent(ctx, e)
			}), middleware.SinkQueue(4*executions)),
			middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, executions)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < executions; i += 8 {
					_, env, _ := execute(eng, context.Background(), call{Procedure: procRead}, noop)
					ids[i] = env.ExecutionID
				}
			})
		}
		wg.Wait()
		time.Sleep(2 * time.Second) // the stall, and the fresh worker's drain
		synctest.Wait()
		want := []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}
		for _, id := range ids {
			got := typesOf(rec.Execution(id))
			if id == *stalled.Load() {
				if !slices.Equal(got, want[:1]) {
					t.Errorf("the stalled execution %s: %v, want its stalled event only", id, got)
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Fatalf("execution %s recorded %v, want %v", id, got, want)
			}
		}
		if st := eng.Stats().Sinks[0]; st.Dropped != 2 || st.Delivered != uint64(3*executions-2) {
			t.Errorf("sink stats %+v: want exactly the stalled execution's 2 later events dropped, %d delivered (the stalled one late)", st, 3*executions-2)
		}
		if n := strings.Count(logs.String(), "an event sink is dropping events"); n != 1 {
			t.Errorf("%d warnings about dropped events, want one (rate-limited):\n%s", n, logs.String())
		}
	})
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }

// auditSink is a strict audit sink that fails or stalls on one event type.
type auditSink struct {
	failOn  middleware.EventType
	stallOn middleware.EventType
	fail    atomic.Pointer[middleware.EventType] // set while running, over failOn
	rec     agentsafetest.Recorder
}

func (a *auditSink) Record(ctx context.Context, e middleware.Event) error {
	if f := a.fail.Load(); f != nil && *f == e.Type {
		return errors.New("audit database: connection refused")
	}
	switch e.Type {
	case a.failOn:
		return errors.New("audit database: connection refused")
	case a.stallOn:
		time.Sleep(1500 * time.Millisecond) // past the 1s bound
	}
	a.rec.HandleEvent(ctx, e)
	return nil
}

// With a strict audit sink, an event that could not be recorded means
// nothing runs: no record, no effect.
func TestStrictAuditFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		sink *auditSink
	}{
		{"requested fails", &auditSink{failOn: middleware.EventRequested}},
		{"started fails", &auditSink{failOn: middleware.EventStarted}},
		{"requested outlasts the bound", &auditSink{stallOn: middleware.EventRequested}},
		{"started outlasts the bound", &auditSink{stallOn: middleware.EventStarted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite}, middleware.WithAuditSink(tc.sink, time.Second))
				var ran atomic.Bool
				_, env, err := f.run(t.Context(), procWrite, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
				wantCode(t, env, err, middleware.CodeAuditUnavailable)
				if ran.Load() {
					t.Fatal("the handler ran although the audit trail could not record the call")
				}
				if !env.Error.Retryable {
					t.Error("AUDIT_UNAVAILABLE: nothing ran, so re-invoking is safe (retryable)")
				}
				f.wantTypes(env.ExecutionID, append(typesBefore(tc.sink), middleware.EventFailed)...)
			})
		})
	}
	t.Run("a failure at started after a consumption gives the approval back", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			audit := &auditSink{}
			g := newGated(t, plainWriteGate, middleware.WithAuditSink(audit))
			id := g.requested(refund)
			g.approve(id)
			started := middleware.EventStarted
			audit.fail.Store(&started)
			env, err, _ := g.call(agent, refund, id)
			wantCode(t, env, err, middleware.CodeAuditUnavailable)
			synctest.Wait()
			if rec, _ := g.store.Get(t.Context(), id); rec.Status != store.ApprovalApproved || g.runs.Load() != 0 {
				t.Fatalf("record %s after %d runs: nothing ran, so the approval must be approved again", rec.Status, g.runs.Load())
			}
			audit.fail.Store(nil)
			env, err, _ = g.call(agent, refund, id)
			wantCode(t, env, err, middleware.CodeOK)
		})
	})
}

// typesBefore is the trail a strict audit refusal leaves before its final
// event: requested, and started when it was requested that failed later.
func typesBefore(s *auditSink) []middleware.EventType {
	if s.failOn == middleware.EventStarted || s.stallOn == middleware.EventStarted {
		return []middleware.EventType{middleware.EventRequested, middleware.EventStarted}
	}
	return []middleware.EventType{middleware.EventRequested}
}

// A strict audit sink that fails at capability.started after the result
// store claimed the caller's key gives the key back: nothing ran, so the
// repeat runs rather than finding the key in flight or in doubt.
func TestAStrictAuditFailureAtStartedReleasesTheClaim(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		audit := &auditSink{}
		started := middleware.EventStarted
		audit.fail.Store(&started)
		r := oneResult(t, writeCap, middleware.WithAuditSink(audit))
		c := keyedCall{key: "order-7-refund"}
		_, env, err := r.call(t.Context(), c, refunded)
		wantCode(t, env, err, middleware.CodeAuditUnavailable)
		r.wantRuns("nothing runs on a start the audit trail did not record", 0)
		audit.fail.Store(nil)
		_, env, err = r.call(t.Context(), c, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		r.wantRuns("the repeat runs: the failed start gave its claim back", 1)
		if env.Replayed {
			t.Errorf("the repeat replayed a start that never ran: %+v", env)
		}
	})
}

// A write stream refused because the strict audit sink could not record
// capability.started never started an attempt: its envelope counts none,
// and re-invoking it is safe.
func TestAStreamRefusedAtStartedRanNoAttempt(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := newFixture(t, procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite, Streaming: true},
			middleware.WithAuditSink(&auditSink{failOn: middleware.EventStarted}))
		var runs atomic.Int32
		env, err := executeStream(f.eng, t.Context(), call{Procedure: procWrite}, func(context.Context) error { runs.Add(1); return nil })
		wantCode(t, env, err, middleware.CodeAuditUnavailable)
		if runs.Load() != 0 || env.Attempts != 0 || !env.Error.Retryable {
			t.Errorf("%d runs, envelope %d attempts, retryable %t; want none, 0 and true: nothing ran", runs.Load(), env.Attempts, env.Error.Retryable)
		}
	})
}

// A sink whose queue (SinkQueue) is full drops the events it cannot hold,
// exactly those, counted in Engine.Stats; another sink loses none of them.
func TestAFullQueueDropsOnlyItsOwnSinksEventsAndCountsThem(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		block := make(chan struct{})
		var first atomic.Bool
		slow := middleware.EventSinkFunc(func(context.Context, middleware.Event) {
			if first.CompareAndSwap(false, true) {
				<-block // holds the worker: the queue fills behind it
			}
		})
		other := &agentsafetest.Recorder{}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead}),
			middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
			middleware.WithEventSink(slow, middleware.SinkQueue(3), middleware.SinkTimeout(time.Hour)),
			middleware.WithEventSink(other))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // 3 events each: one in the call, 3 queued, 2 dropped
			execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) { return nil, nil })
			synctest.Wait()
		}
		st := eng.Stats()
		if len(st.Sinks) != 2 || st.Sinks[0].Dropped != 2 || st.Sinks[1].Dropped != 0 {
			t.Errorf("stats %+v: want 2 drops for the full queue of 3, none for the other sink", st)
		}
		if n := len(other.Events()); n != 6 {
			t.Errorf("the other sink received %d events, want all 6", n)
		}
		close(block)
		synctest.Wait()
		if st := eng.Stats(); st.Sinks[0].Delivered != 4 {
			t.Errorf("the full sink delivered %d once unblocked, want the 1+3 it held", st.Sinks[0].Delivered)
		}
	})
}
