package middleware

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func workerEngine(t *testing.T, timeout time.Duration) *Engine {
	t.Helper()
	e, err := New(NewRegistry().Register("/r", Capability{SideEffect: SideEffectRead, Timeout: timeout}), WithProtoFiles(nil), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func run(t *testing.T, e *Engine, fn func(context.Context) (any, error)) Envelope {
	t.Helper()
	_, env, _ := e.route("/r").Execute(context.Background(), attemptCall(fn))
	return env
}

func (p *attemptWorkers) parked() []*attemptWorker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*attemptWorker(nil), p.idle...)
}

// An engine's attempt workers are reused from one attempt to the next,
// and retire once parked for about a second: an engine needs no Close.
func TestAttemptWorkersAreReusedAndRetireWhenIdle(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := workerEngine(t, time.Second)
	e.workers.period = time.Hour // the test ticks the reaper itself
	run(t, e, func(context.Context) (any, error) { return nil, nil })
	first := e.workers.parked()
	if len(first) != 1 {
		t.Fatalf("%d parked workers after one attempt, want 1", len(first))
	}
	run(t, e, func(context.Context) (any, error) { return nil, nil })
	if again := e.workers.parked(); len(again) != 1 || again[0] != first[0] {
		t.Fatal("the second attempt did not reuse the parked worker")
	}
	// The reaper's ticks, without waiting for them: parked for a tick is
	// not idle enough, for two ticks is.
	e.workers.reap()
	if len(e.workers.parked()) != 1 {
		t.Fatal("a worker parked for less than a second was retired")
	}
	e.workers.reap()
	if n := len(e.workers.parked()); n != 0 {
		t.Fatalf("%d workers still parked after a second idle", n)
	}
	goleak.VerifyNone(t, before) // the retired worker's goroutine has exited
}

// An attempt abandoned at its deadline keeps its worker until the handler
// returns; then the worker serves the next attempt.
func TestAnAbandonedAttemptGivesItsWorkerBackWhenItReturns(t *testing.T) {
	e := workerEngine(t, 10*time.Millisecond)
	release, returned := make(chan struct{}), make(chan struct{})
	env := run(t, e, func(context.Context) (any, error) {
		defer close(returned)
		<-release // ignores its context
		return nil, nil
	})
	if env.Error == nil || env.Error.Code != CodeTimeout {
		t.Fatalf("envelope %+v, want TIMEOUT", env)
	}
	if n := len(e.workers.parked()); n != 0 {
		t.Fatalf("%d parked workers while the abandoned handler still runs, want 0", n)
	}
	close(release)
	<-returned
	deadline := time.Now().Add(10 * time.Second)
	for len(e.workers.parked()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned attempt's worker never came back once the handler returned")
		}
		runtime.Gosched() // the worker parks right after the handler returns
	}
	if env := run(t, e, func(context.Context) (any, error) { return nil, nil }); env.Error != nil {
		t.Fatalf("the next attempt on the returned worker failed: %+v", env.Error)
	}
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
// takes its worker with it: the pool never hands an attempt to a worker
// that is gone.
func TestAHandlerThatEndsItsGoroutineLeavesNoDeadWorker(t *testing.T) {
	e := workerEngine(t, time.Second)
	run(t, e, func(context.Context) (any, error) { runtime.Goexit(); return nil, nil })
	if n := len(e.workers.parked()); n != 0 {
		t.Fatalf("%d parked workers after a handler ended its goroutine, want 0", n)
	}
	if env := run(t, e, func(context.Context) (any, error) { return nil, nil }); env.Error != nil {
		t.Fatalf("the next attempt failed: %+v (given to a worker that is gone?)", env.Error)
	}
}

// In a testing/synctest bubble each attempt gets a goroutine of its own:
// a worker of the pool must never run a bubbled handler, nor a bubbled
// worker another's.
func TestBubbledAttemptsGetAGoroutineEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := workerEngine(t, time.Second)
		run(t, e, func(context.Context) (any, error) { return nil, nil })
		if n := len(e.workers.parked()); n != 0 {
			t.Fatalf("%d parked workers after a bubbled attempt, want none", n)
		}
	})
}
