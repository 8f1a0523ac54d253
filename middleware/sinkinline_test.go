package middleware_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// SinkInline (SPEC §8): a sink the application declares never blocking is
// called on the execution's goroutine, in order, panics recovered, with
// no worker and no queue.

// callerSink records what it is called with, and on which goroutine.
type callerSink struct {
	mu     sync.Mutex
	types  []middleware.EventType
	goids  []string
	sleep  time.Duration
	panics middleware.EventType // panics on this type
}

func (s *callerSink) HandleEvent(_ context.Context, e middleware.Event) {
	s.mu.Lock()
	s.types = append(s.types, e.Type)
	s.goids = append(s.goids, goid())
	s.mu.Unlock()
	time.Sleep(s.sleep)
	if e.Type == s.panics {
		panic("sink bug")
	}
}

func (s *callerSink) seen() ([]middleware.EventType, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.types), slices.Clone(s.goids)
}

func TestSinkInlineIsCalledOnTheExecutionsGoroutineInOrder(t *testing.T) {
	sink := &callerSink{}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(1, time.Second)),
		middleware.WithEventSink(sink, middleware.SinkInline()), middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	caller := goid()
	first := true
	_, env, err := execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) {
		if first {
			first = false
			return nil, errTransient
		}
		return "ok", nil
	})
	wantCode(t, env, err, middleware.CodeOK)
	// No waiting: every event was delivered before Execute returned.
	types, goids := sink.seen()
	want := []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventRetried, middleware.EventCompleted}
	if !slices.Equal(types, want) {
		t.Fatalf("the inline sink saw %v by the time Execute returned, want %v", types, want)
	}
	for i, g := range goids {
		if g != caller {
			t.Errorf("event %s was delivered on goroutine %s, the execution's is %s", types[i], g, caller)
		}
	}
	if st := eng.Stats().Sinks; len(st) != 1 || st[0].Delivered != 4 || st[0].Dropped != 0 {
		t.Errorf("Stats = %+v, want 4 delivered, none dropped", st)
	}
}

// A panicking inline sink loses that event, nothing more: the execution
// and the sink's later events go on.
func TestSinkInlinePanicIsRecovered(t *testing.T) {
	sink := &callerSink{panics: middleware.EventStarted}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(0, time.Second)),
		middleware.WithEventSink(sink, middleware.SinkInline()), middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	_, env, err := execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) { return "ok", nil })
	wantCode(t, env, err, middleware.CodeOK)
	if types, _ := sink.seen(); !slices.Equal(types, []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}) {
		t.Errorf("the sink saw %v after panicking on started", types)
	}
}

// The trade SinkInline makes: its time counts in the call's. The default
// sink, behind its queue, costs the call nothing however slow it is.
func TestSinkInlineTimeCountsInTheCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []middleware.SinkOption
		took time.Duration
	}{
		{"inline", []middleware.SinkOption{middleware.SinkInline()}, 3 * 100 * time.Millisecond},
		{"queued", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				sink := &callerSink{sleep: 100 * time.Millisecond}
				eng, err := middleware.New(middleware.NewRegistry().Register(procRead, read(0, time.Second)),
					middleware.WithEventSink(sink, tc.opts...), middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				execute(eng, t.Context(), call{Procedure: procRead}, func(context.Context) (any, error) { return "ok", nil })
				if took := time.Since(start); took != tc.took {
					t.Errorf("the call took %s with a sink that takes 100ms an event, want %s", took, tc.took)
				}
			})
		})
	}
}

func TestSinkInlineHasNoQueueOrBoundToSet(t *testing.T) {
	_, err := middleware.New(nil, middleware.WithEventSink(&callerSink{}, middleware.SinkInline(), middleware.SinkQueue(8)),
		middleware.WithEventSink(&callerSink{}, middleware.SinkTimeout(time.Second), middleware.SinkInline()))
	if err == nil || strings.Count(err.Error(), "SinkInline") != 2 {
		t.Errorf("New = %v, want both sinks refused: an inline sink has no queue and no bound", err)
	}
}
