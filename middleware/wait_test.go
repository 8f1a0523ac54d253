package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// waiting is an engine with a gated refund on a memory store, built
// inside a synctest bubble: every clock is the bubble's.
type waiting struct {
	*fixture
	store *approvalstore.Memory
	runs  atomic.Int32
}

func newWaiting(t *testing.T, c middleware.Capability, opts ...middleware.Option) *waiting {
	w := &waiting{store: approvalstore.NewMemory()}
	opts = append([]middleware.Option{middleware.WithApprovalStore(w.store), middleware.WithActor(actorOf), middleware.WithApprovalURL(consoleLink)}, opts...)
	w.fixture = newFixture(t, procRefund, c, opts...)
	return w
}

// resume presents approval id for in as actor, waiting up to wait for the
// decision as an MCP bridge's answering round does.
func (w *waiting) resume(ctx context.Context, actor middleware.Actor, in adapter.Input, id string, wait time.Duration) (middleware.Envelope, error) {
	ctx = adapter.WithApprovalMark(as(ctx, actor), procRefund, adapter.ApprovalMark{Wait: wait})
	_, env, err := execute(w.eng, ctx, call{Procedure: procRefund, Input: in, ApprovalID: id}, func(context.Context) (any, error) {
		w.runs.Add(1)
		return "refunded", nil
	})
	return env, err
}

func (w *waiting) requested() string {
	w.t.Helper()
	_, env, err := execute(w.eng, as(w.t.Context(), agent), call{Procedure: procRefund, Input: refund}, func(context.Context) (any, error) {
		w.t.Error("a gated call ran without an approval")
		return nil, nil
	})
	wantCode(w.t, env, err, middleware.CodeApprovalRequired)
	return env.ApprovalID
}

type outcome struct {
	env middleware.Envelope
	err error
	at  time.Duration
}

// resumeAsync resumes in the background and reports when it returned.
func (w *waiting) resumeAsync(ctx context.Context, actor middleware.Actor, in adapter.Input, id string, wait time.Duration) <-chan outcome {
	out := make(chan outcome, 1)
	start := time.Now()
	go func() {
		env, err := w.resume(ctx, actor, in, id, wait)
		out <- outcome{env, err, time.Since(start)}
	}()
	return out
}

func TestWaitConsumesAsSoonAsApproved(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		done := w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if w.runs.Load() != 0 {
			t.Fatal("the waiting call ran before the decision")
		}
		if _, err := w.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
			t.Fatal(err)
		}
		o := <-done
		wantCode(t, o.env, o.err, middleware.CodeOK)
		if o.at != 10*time.Second || w.runs.Load() != 1 || o.env.ApprovalID != id {
			t.Errorf("the waiting call must resume at the decision (after 10s) and run once: after %v, %d runs, %+v", o.at, w.runs.Load(), o.env)
		}
		w.wantTypes(o.env.ExecutionID, middleware.EventRequested, middleware.EventApprovalConsumed, middleware.EventStarted, middleware.EventCompleted)
		if env, err := w.resume(t.Context(), agent, refund, id, time.Minute); middleware.CodeOf(err) != middleware.CodeApprovalConsumed || w.runs.Load() != 1 {
			t.Errorf("a second resume: %v %+v, want APPROVAL_CONSUMED and no run", err, env)
		}
	})
}

func TestWaitSeesADecisionOfAnotherInstance(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		other := newFixture(t, procRefund, gatedCap, middleware.WithApprovalStore(w.store), middleware.WithActor(actorOf))
		id := w.requested()
		done := w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		time.Sleep(5 * time.Second)
		if _, err := other.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
			t.Fatal(err)
		}
		o := <-done
		wantCode(t, o.env, o.err, middleware.CodeOK)
		if o.at > 6*time.Second {
			t.Errorf("a decision made by another engine sharing the store must be seen within a second: resumed after %v", o.at)
		}
	})
}

func TestWaitEndsUndecidedAsPendingWithHints(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		o := <-w.resumeAsync(t.Context(), agent, refund, id, 5*time.Second)
		wantCode(t, o.env, o.err, middleware.CodeApprovalPending)
		rec, _ := w.store.Get(t.Context(), id)
		if o.at != 5*time.Second || w.runs.Load() != 0 || o.env.ApprovalURL != consoleLink(id) || !o.env.ExpiresAt.Equal(rec.ExpiresAt) {
			t.Errorf("an undecided wait ends after exactly its bound, pending, with the hints: after %v, %d runs, %+v", o.at, w.runs.Load(), o.env)
		}
		if rec.Status != store.ApprovalPending {
			t.Errorf("waiting changed the record: %s", rec.Status)
		}
	})
}

func TestWaitNeverPastExpiry(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := gatedCap
		c.Approval.ExpiresIn = 30 * time.Second
		w := newWaiting(t, c)
		id := w.requested()
		o := <-w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		wantCode(t, o.env, o.err, middleware.CodeApprovalExpired)
		if o.at != 30*time.Second || w.runs.Load() != 0 {
			t.Errorf("the wait must end at the approval's expiry (30s), not its bound (60s): after %v, %d runs", o.at, w.runs.Load())
		}
	})
}

func TestWaitEndsAtARejection(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		done := w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		time.Sleep(3 * time.Second)
		if _, err := w.eng.Decide(t.Context(), id, store.Decision{Approve: false, Approver: boss, Comment: "no"}); err != nil {
			t.Fatal(err)
		}
		o := <-done
		wantCode(t, o.env, o.err, middleware.CodeApprovalRejected)
		if o.at != 3*time.Second || w.runs.Load() != 0 {
			t.Errorf("a rejection ends the wait at once and runs nothing: after %v, %d runs", o.at, w.runs.Load())
		}
	})
}

func TestWaitCancelledRunsNothingAndSpendsNothing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		ctx, cancel := context.WithCancel(t.Context())
		done := w.resumeAsync(ctx, agent, refund, id, time.Minute)
		time.Sleep(4 * time.Second)
		cancel()
		o := <-done
		wantCode(t, o.env, o.err, middleware.CodeCancelled)
		if o.at != 4*time.Second || w.runs.Load() != 0 {
			t.Errorf("a caller leaving ends the wait at once and runs nothing: after %v, %d runs", o.at, w.runs.Load())
		}
		// The approval was not spent: approved now, a resume runs once.
		if _, err := w.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
			t.Fatal(err)
		}
		env, err := w.resume(t.Context(), agent, refund, id, 0)
		wantCode(t, env, err, middleware.CodeOK)
		if w.runs.Load() != 1 {
			t.Errorf("%d runs after the approved resume, want 1", w.runs.Load())
		}
	})
}

func TestWaitRefusesAtOnceWhatCouldNeverConsume(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		for _, tc := range []struct {
			name  string
			actor middleware.Actor
			in    adapter.Input
			want  middleware.Code
		}{
			{"another actor's approval", middleware.Actor{ID: "agent-9", Tenant: "acme", Kind: "agent"}, refund, middleware.CodeApprovalNotFound},
			{"the same agent acting for someone else", middleware.Actor{ID: agent.ID, Tenant: agent.Tenant, Kind: agent.Kind, OnBehalfOf: []string{"user-mallory"}}, refund, middleware.CodeApprovalNotFound},
			{"a changed input", agent, refund2, middleware.CodeApprovalInputMismatch},
		} {
			o := <-w.resumeAsync(t.Context(), tc.actor, tc.in, id, time.Minute)
			wantCode(t, o.env, o.err, tc.want)
			if o.at != 0 || w.runs.Load() != 0 {
				t.Errorf("%s: refused after %v with %d runs, want at once and none", tc.name, o.at, w.runs.Load())
			}
			if tc.want == middleware.CodeApprovalNotFound && (o.env.ApprovalURL != "" || !o.env.ExpiresAt.IsZero()) {
				t.Errorf("%s: the refusal must reveal nothing of the record: %+v", tc.name, o.env)
			}
		}
		if rec, _ := w.store.Get(t.Context(), id); rec.Status != store.ApprovalPending {
			t.Errorf("the refusals changed the record: %s", rec.Status)
		}
	})
}

func TestWaitMarkOfAnotherProcedureIsIgnored(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, gatedCap)
		id := w.requested()
		ctx := adapter.WithApprovalMark(as(t.Context(), agent), "/orders.v1.Orders/Other", adapter.ApprovalMark{Wait: time.Minute})
		start := time.Now()
		_, env, err := execute(w.eng, ctx, call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) { return nil, nil })
		wantCode(t, env, err, middleware.CodeApprovalPending)
		if time.Since(start) != 0 {
			t.Errorf("a mark for another procedure must not make this call wait: waited %v", time.Since(start))
		}
	})
}
