package agentsafetest

import (
	"context"
	"slices"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
)

// Recorder is a [middleware.EventSink] that keeps every event in memory,
// for tests, in the style of httptest.ResponseRecorder. It is safe for
// concurrent use; the zero value is ready to use.
//
//	rec := &agentsafetest.Recorder{}
//	eng, _ := middleware.New(reg, middleware.WithEventSink(rec))
//	// ... make a call, read its execution id from the envelope ...
//	events, err := rec.WaitFinal(ctx, env.ExecutionID)
type Recorder struct {
	mu     sync.Mutex
	events []middleware.Event
	// changed is closed, and replaced, whenever an event arrives: waiters
	// block on it (a channel, so that testing/synctest sees them durably
	// blocked).
	changed chan struct{}
}

var _ middleware.EventSink = (*Recorder)(nil)

// HandleEvent records e.
func (r *Recorder) HandleEvent(_ context.Context, e middleware.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
}

// Events returns a copy of every event recorded so far, in arrival order.
func (r *Recorder) Events() []middleware.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Execution returns the events of one execution recorded so far, in
// order. Decision events (capability.approved, .rejected, .approval_vote)
// carry the execution id of the execution that requested the approval.
func (r *Recorder) Execution(executionID string) []middleware.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execution(executionID)
}

func (r *Recorder) execution(executionID string) []middleware.Event {
	var out []middleware.Event
	for _, e := range r.events {
		if e.ExecutionID == executionID {
			out = append(out, e)
		}
	}
	return out
}

// WaitFinal waits until the execution's final event (capability.completed,
// .failed, .cancelled or .replayed) has been recorded and returns the
// execution's events so far, in order; or returns ctx's error. Sinks are
// delivered asynchronously, so a test that read an envelope waits here
// rather than polling.
func (r *Recorder) WaitFinal(ctx context.Context, executionID string) ([]middleware.Event, error) {
	return r.Wait(ctx, executionID, func(evs []middleware.Event) bool {
		return slices.ContainsFunc(evs, func(e middleware.Event) bool { return e.Type.Final() })
	})
}

// Wait waits until done holds for the execution's events recorded so far
// (in order) and returns them; or returns ctx's error with the events so
// far. done is called with the recorder's lock held: it must not call the
// recorder.
func (r *Recorder) Wait(ctx context.Context, executionID string, done func([]middleware.Event) bool) ([]middleware.Event, error) {
	for {
		r.mu.Lock()
		evs := r.execution(executionID)
		if done(evs) {
			r.mu.Unlock()
			return evs, nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return evs, context.Cause(ctx)
		}
	}
}

// Reset forgets every recorded event.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}
