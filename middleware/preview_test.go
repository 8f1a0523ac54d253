package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// order is the state a refund's preview reads: its version changes when
// the order is refunded elsewhere. Its write is the handler's conditional
// write (UPDATE … WHERE version = $approved).
type order struct {
	mu      sync.Mutex
	version int
	writes  []string // the states the writes landed against
	// flip, when set, runs in the handler between the check-in and the
	// write: a writer elsewhere that was faster.
	flip func()
	// previews counts the preview's calls; inputs keeps what it was given.
	previews atomic.Int32
	inputs   []middleware.PreviewInput
}

var errStateChanged = errors.New("the order changed since the refund was approved")

func (o *order) state() string { return fmt.Sprintf("order 42 v%d", o.version) }

func (o *order) set(version int) {
	o.mu.Lock()
	o.version = version
	o.mu.Unlock()
}

func (o *order) preview(_ context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
	o.previews.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inputs = append(o.inputs, in)
	return middleware.Preview{Text: fmt.Sprintf("refund 120.00 EUR of order 42 to card ****1234 (%s)", o.state()), State: []byte(o.state())}, nil
}

// write refunds the order only if it is still as approved.
func (o *order) write(ctx context.Context) (any, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	if o.flip != nil {
		o.flip()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if x.Approval == nil || string(x.ApprovedState) != o.state() {
		return nil, middleware.NoEffect(errStateChanged)
	}
	o.writes = append(o.writes, string(x.ApprovedState))
	return "refunded", nil
}

func (o *order) landed() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.writes)
}

// previewed is a gated refund whose capability previews o.
func previewed(t *testing.T, c middleware.Capability, opts ...middleware.Option) (*gated, *order) {
	o := &order{version: 1}
	c.Preview = o.preview
	return newGated(t, c, opts...), o
}

// resume presents id for in, with o's conditional write as the handler.
func (g *gated) resume(o *order, in adapter.Input, id string) (middleware.Envelope, error) {
	_, env, err := execute(g.eng, as(g.t.Context(), agent), call{Procedure: procRefund, Input: in, ApprovalID: id}, o.write)
	return env, err
}

func (g *gated) record(id string) store.ApprovalRecord {
	g.t.Helper()
	rec, err := g.eng.Get(g.t.Context(), id)
	if err != nil {
		g.t.Fatalf("Get(%s): %v", id, err)
	}
	return rec
}

// TestAStaleResumeRunsNothingAndConsumesNothing: the approver approved
// the effect as the state was; once it changed, the resume is refused
// APPROVAL_STALE (not retryable, approval_stale emitted), nothing runs
// and the record stays approved, so the same approval runs once when the
// state is back to what was approved, and then never again.
func TestAStaleResumeRunsNothingAndConsumesNothing(t *testing.T) {
	g, o := previewed(t, gatedCap)
	id := g.requested(refund)
	rec := g.record(id)
	if rec.PreviewText != "refund 120.00 EUR of order 42 to card ****1234 (order 42 v1)" || !strings.HasPrefix(rec.PreviewDigest, "sha256:") || len(rec.PreviewDigest) != 71 {
		t.Fatalf("the record must keep the preview's text and the digest of its state: %q %q", rec.PreviewText, rec.PreviewDigest)
	}
	g.approve(id)

	o.set(2) // the order is partly refunded elsewhere
	env, err := g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	if env.Error.Retryable || env.Attempts != 0 || len(o.landed()) != 0 {
		t.Errorf("a stale resume is not retryable and runs nothing: %+v, %d writes", env, len(o.landed()))
	}
	if rec := g.record(id); rec.Status != store.ApprovalApproved || rec.ConsumedBy != "" {
		t.Errorf("a stale resume must consume nothing: the record is %s, consumed by %q", rec.Status, rec.ConsumedBy)
	}
	g.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventApprovalStale, middleware.EventFailed)
	if e := g.waitEvent(env.ExecutionID, middleware.EventApprovalStale); e.ApprovalID != id || e.Code != middleware.CodeApprovalStale {
		t.Errorf("approval_stale must name the approval and the code: %+v", e)
	}

	o.set(1) // as it was approved
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
	if got := o.landed(); !slices.Equal(got, []string{"order 42 v1"}) {
		t.Errorf("the approval must run once the state is as approved, against that state: writes %q", got)
	}
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalConsumed)
	if len(o.landed()) != 1 {
		t.Errorf("an approval runs once: %d writes", len(o.landed()))
	}
}

// TestAStaleApprovalStillExpires: a record refused stale stays approved
// until its expiry, and no longer.
func TestAStaleApprovalStillExpires(t *testing.T) {
	g, o := previewed(t, gatedCap)
	id := g.requested(refund)
	g.approve(id)
	o.set(2)
	env, err := g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	o.set(1)
	g.advance(16 * time.Minute)
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalExpired)
	if len(o.landed()) != 0 {
		t.Error("an expired approval ran")
	}
}

// TestAChangedPreviewIsANewRequest: while a request is pending, the same
// call gets the same id, unless the effect it would have changed: then
// it is another request, with the new text, which approvers see.
func TestAChangedPreviewIsANewRequest(t *testing.T) {
	g, o := previewed(t, gatedCap)
	first := g.requested(refund)
	if again := g.requested(refund); again != first {
		t.Errorf("the same call with the same preview must get the same approval: %s, %s", first, again)
	}
	o.set(2)
	second := g.requested(refund)
	if second == first {
		t.Fatal("a changed preview must be a new request")
	}
	if got := g.record(second).PreviewText; !strings.Contains(got, "v2") {
		t.Errorf("the new request must show the new preview: %q", got)
	}
	list, err := g.eng.List(t.Context(), store.ApprovalFilter{Tenant: agent.Tenant, Status: store.ApprovalPending})
	if err != nil || len(list) != 2 || list[0].PreviewText == list[1].PreviewText {
		t.Errorf("List must show each pending request's own preview: %+v, %v", list, err)
	}
	g.approve(second)
	env, err := g.resume(o, refund, second)
	wantCode(t, env, err, middleware.CodeOK)
	if got := o.landed(); !slices.Equal(got, []string{"order 42 v2"}) {
		t.Errorf("the fresh approval runs against the new state: %q", got)
	}
}

// TestPreviewInputIsTheBoundInput: the preview sees the caller, the
// procedure and the input the digest binds, at the request and at the
// resume.
func TestPreviewInputIsTheBoundInput(t *testing.T) {
	g, o := previewed(t, gatedCap)
	id := g.requested(refund)
	g.approve(id)
	env, err := g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.inputs) != 2 {
		t.Fatalf("the preview must run at the request and at the resume: %d calls", len(o.inputs))
	}
	for _, in := range o.inputs {
		if !store.SameActor(in.Actor, agent) || in.Procedure != procRefund || string(in.Input) != `{"order":"42","amount":120}` {
			t.Errorf("preview input %+v", in)
		}
	}
}

// TestARecordWithoutAPreviewIsStaleOnACapabilityWithOne: an approval
// given before the capability had a preview binds no state: resumed on a
// capability that now has one, it fails closed.
func TestARecordWithoutAPreviewIsStaleOnACapabilityWithOne(t *testing.T) {
	before := newGated(t, gatedCap)
	id := before.requested(refund)
	before.approve(id)
	o := &order{version: 1}
	c := gatedCap
	c.Preview = o.preview
	after := newFixture(t, procRefund, c, middleware.WithApprovalStore(before.store), middleware.WithActor(actorOf))
	_, env, err := execute(after.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, o.write)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	if rec, _ := before.store.Get(t.Context(), id); rec.Status != store.ApprovalApproved {
		t.Errorf("nothing is consumed: %s", rec.Status)
	}
}

// TestNoEffectReleasesTheApproval: a conditional write that finds the
// state changed between the resume's check and the write returns
// NoEffect: the approval goes back to approved, the next resume is
// refused stale, and once the state is back the approval runs once.
func TestNoEffectReleasesTheApproval(t *testing.T) {
	g, o := previewed(t, gatedCap)
	id := g.requested(refund)
	g.approve(id)
	o.flip = func() { o.set(2); o.flip = nil } // faster than the write, once
	env, err := g.resume(o, refund, id)
	if !errors.Is(err, errStateChanged) || env.Attempts != 1 || len(o.landed()) != 0 {
		t.Fatalf("the write found the state changed: %v, %+v, %d writes", err, env, len(o.landed()))
	}
	if rec := g.record(id); rec.Status != store.ApprovalApproved || rec.ConsumedBy != "" {
		t.Errorf("NoEffect must give the approval back at once: %s, consumed by %q", rec.Status, rec.ConsumedBy)
	}
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	o.set(1)
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
	if got := o.landed(); !slices.Equal(got, []string{"order 42 v1"}) || g.record(id).Status != store.ApprovalCompleted {
		t.Errorf("writes %q, record %s", got, g.record(id).Status)
	}
}

// TestAnErrorWithoutNoEffectSpendsTheApproval: any other failure may have
// had an effect: the approval stays consumed.
func TestAnErrorWithoutNoEffectSpendsTheApproval(t *testing.T) {
	g, o := previewed(t, gatedCap)
	id := g.requested(refund)
	g.approve(id)
	_, env, err := execute(g.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) {
		return nil, errStateChanged
	})
	if err == nil || g.record(id).Status != store.ApprovalFailed {
		t.Errorf("a plain failure is recorded failed, never released: %v, %+v, %s", err, env, g.record(id).Status)
	}
	if env, err := g.resume(o, refund, id); middleware.CodeOf(err) != middleware.CodeApprovalConsumed {
		t.Errorf("a spent approval: %v %+v", err, env)
	}
}

func TestNoEffect(t *testing.T) {
	if middleware.NoEffect(nil) != nil {
		t.Error("NoEffect(nil) must be nil")
	}
	err := middleware.NoEffect(fmt.Errorf("declined: %w", errStateChanged))
	if !errors.Is(err, errStateChanged) || err.Error() != "declined: "+errStateChanged.Error() {
		t.Errorf("NoEffect keeps the error as it is: %v", err)
	}
}

// TestAPreviewThatFailsFailsClosed: a preview that errors, panics, hangs
// past the capability's timeout or returns a text approvers cannot be
// shown fails the call PREVIEW_UNAVAILABLE, at the request (nothing is
// requested) and at the resume (nothing is consumed); nothing runs.
func TestAPreviewThatFailsFailsClosed(t *testing.T) {
	var hang chan struct{} // made in each bubble: a goroutine blocked on it must be durably blocked
	for _, tc := range []struct {
		name      string
		preview   func(ctx context.Context, in middleware.PreviewInput) (middleware.Preview, error)
		retryable bool
		warns     bool
	}{
		{"errors", func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
			return middleware.Preview{}, errors.New("orders database: connection reset")
		}, true, false},
		{"panics", func(context.Context, middleware.PreviewInput) (middleware.Preview, error) { panic("nil order") }, true, false},
		{"hangs past its timeout", func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
			<-hang // it ignores its context
			return middleware.Preview{Text: "late"}, nil
		}, true, false},
		{"returns 5 KiB", func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
			return middleware.Preview{Text: strings.Repeat("x", 5<<10), State: []byte("v1")}, nil
		}, false, true},
		{"returns invalid UTF-8", func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
			return middleware.Preview{Text: "refund \xff", State: []byte("v1")}, nil
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				hang = make(chan struct{})
				defer func() { // let the hanging preview go before the bubble ends
					select {
					case hang <- struct{}{}:
					default:
					}
				}()
				var failing atomic.Bool
				good := (&order{version: 1}).preview
				c := gatedCap
				c.Timeout = time.Second
				c.Preview = func(ctx context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
					if failing.Load() {
						return tc.preview(ctx, in)
					}
					return good(ctx, in)
				}
				var logs bytes.Buffer
				g := newGated(t, c, middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				check := func(when string, env middleware.Envelope, err error) {
					t.Helper()
					wantCode(t, env, err, middleware.CodePreviewUnavailable)
					if env.Error.Retryable != tc.retryable || env.Attempts != 0 || g.runs.Load() != 0 {
						t.Errorf("%s: a preview that %s: retryable %t (want %t), %d attempts, %d runs", when, tc.name, env.Error.Retryable, tc.retryable, env.Attempts, g.runs.Load())
					}
					if tc.warns != strings.Contains(logs.String(), "Preview") {
						t.Errorf("%s: a preview that %s warns: %t; log: %s", when, tc.name, tc.warns, logs.String())
					}
				}

				// At the request: nothing is requested.
				failing.Store(true)
				env, err, _ := g.call(agent, refund, "")
				check("at the request", env, err)
				if list, _ := g.eng.List(t.Context(), store.ApprovalFilter{Tenant: agent.Tenant}); len(list) != 0 || env.ApprovalID != "" {
					t.Errorf("a failed preview must leave no request behind: %d records, id %q", len(list), env.ApprovalID)
				}
				if tc.name == "hangs past its timeout" {
					if env.Duration != time.Second {
						t.Errorf("the preview is bounded by the capability's timeout: %v", env.Duration)
					}
					hang <- struct{}{}
				}

				// At the resume: nothing is consumed.
				failing.Store(false)
				id := g.requested(refund)
				g.approve(id)
				failing.Store(true)
				env, err, _ = g.call(agent, refund, id)
				check("at the resume", env, err)
				if tc.name == "hangs past its timeout" {
					hang <- struct{}{}
				}
				if rec, _ := g.store.Get(t.Context(), id); rec.Status != store.ApprovalApproved || rec.ConsumedBy != "" {
					t.Errorf("a failed preview at the resume must consume nothing: %s", rec.Status)
				}
				failing.Store(false)
				env, err, _ = g.call(agent, refund, id)
				wantCode(t, env, err, middleware.CodeOK)
			})
		})
	}
}

// TestACallerWhoLeavesDuringThePreviewIsCancelled: the caller's leaving is
// its own outcome, not the preview's failure.
func TestACallerWhoLeavesDuringThePreviewIsCancelled(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		c := gatedCap
		c.Preview = func(ctx context.Context, _ middleware.PreviewInput) (middleware.Preview, error) {
			<-ctx.Done()
			return middleware.Preview{}, ctx.Err()
		}
		g := newGated(t, c)
		ctx, cancel := context.WithTimeout(as(t.Context(), agent), 100*time.Millisecond)
		defer cancel()
		_, env, err := execute(g.eng, ctx, call{Procedure: procRefund, Input: refund}, func(context.Context) (any, error) { return nil, nil })
		wantCode(t, env, err, middleware.CodeCancelled)
	})
}

// TestAWaitingResumePreviewsAgainAfterTheWait: a resume that waited for
// the decision (an MCP bridge's answering round) checks the state as it
// is once the decision came, not as it was when the wait began.
func TestAWaitingResumePreviewsAgainAfterTheWait(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		o := &order{version: 1}
		c := gatedCap
		c.Preview = o.preview
		w := newWaiting(t, c)
		id := w.requested()
		done := w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		time.Sleep(5 * time.Second)
		o.set(2)
		if _, err := w.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
			t.Fatal(err)
		}
		got := <-done
		wantCode(t, got.env, got.err, middleware.CodeApprovalStale)
		if w.runs.Load() != 0 {
			t.Error("a stale resume ran")
		}
		// A resume that would be stale does not wait for a decision that
		// could never let it run.
		other := w.requested() // of the state as it is now: v2
		o.set(3)
		start := time.Now()
		env, err := w.resume(t.Context(), agent, refund, other, time.Minute)
		wantCode(t, env, err, middleware.CodeApprovalStale)
		if waited := time.Since(start); waited != 0 || w.runs.Load() != 0 {
			t.Errorf("a resume that could never run must not wait for the decision: waited %v", waited)
		}
	})
}

// TestQuorumWithAPreview: a quorum is counted as ever; the approval is
// bound to the state as it was requested.
func TestQuorumWithAPreview(t *testing.T) {
	c := quorumCap(2)
	g, o := previewed(t, c)
	id := g.requested(refund)
	for _, m := range []middleware.Actor{managerA, managerB} {
		if _, err := g.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: m}); err != nil {
			t.Fatal(err)
		}
	}
	o.set(3)
	env, err := g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	o.set(1)
	env, err = g.resume(o, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
}

// TestWithPreviewGivesAnOptionCapabilityItsPreview, and New refuses what
// WithPreview cannot apply to, naming it.
func TestWithPreviewGivesAnOptionCapabilityItsPreview(t *testing.T) {
	const gatedProc = "/agentsafe.test.v1.TestService/Gated" // declared by method options
	o := &order{version: 1}
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithActor(actorOf), middleware.WithLogger(discard),
		middleware.WithPreview(gatedProc, o.preview))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := adapter.Resolve(eng, gatedProc).Capability(); c.Preview == nil {
		t.Fatal("WithPreview must give the option capability its preview")
	}
	_, env, err := execute(eng, as(t.Context(), agent), call{Procedure: gatedProc, Input: refund}, func(context.Context) (any, error) { return nil, nil })
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	if rec, _ := eng.Get(t.Context(), env.ApprovalID); o.previews.Load() != 1 || !strings.Contains(rec.PreviewText, "order 42") {
		t.Errorf("the option capability's approval must carry the preview: %d calls, %q", o.previews.Load(), rec.PreviewText)
	}

	for name, tc := range map[string]struct {
		reg  *middleware.Registry
		opts []middleware.Option
		want string
	}{
		"an unknown procedure": {opts: []middleware.Option{middleware.WithPreview("/agentsafe.test.v1.TestService/Refnud", o.preview)},
			want: `WithPreview("/agentsafe.test.v1.TestService/Refnud"): no capability`},
		"a nil function": {opts: []middleware.Option{middleware.WithPreview(gatedProc, nil)}, want: "nil"},
		"twice": {opts: []middleware.Option{middleware.WithPreview(gatedProc, o.preview), middleware.WithPreview(gatedProc, o.preview)},
			want: "given twice"},
		"a registry entry with a preview": {
			reg:  middleware.NewRegistry().Register(gatedProc, middleware.Capability{SideEffect: middleware.SideEffectWrite, Preview: o.preview}),
			opts: []middleware.Option{middleware.WithPreview(gatedProc, o.preview)}, want: "both in the registry and with WithPreview"},
		"a stream": {reg: middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Stream", middleware.Capability{SideEffect: middleware.SideEffectRead, Preview: o.preview}),
			want: "a streaming procedure cannot have a preview"},
	} {
		_, err := middleware.New(tc.reg, append(tc.opts, middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(discard))...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New must fail naming %q: %v", name, tc.want, err)
		}
	}
}

// TestTheSnapshotRecordsAPreview: the inventory says which capabilities
// have a preview, which descriptors cannot.
func TestTheSnapshotRecordsAPreview(t *testing.T) {
	g, _ := previewed(t, gatedCap)
	var b bytes.Buffer
	if err := g.eng.WriteSnapshot(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"preview": true`) {
		t.Errorf("the inventory must record the preview:\n%s", b.String())
	}
	plain := newGated(t, gatedCap)
	b.Reset()
	if err := plain.eng.WriteSnapshot(&b); err != nil || !strings.Contains(b.String(), `"preview": false`) {
		t.Errorf("a capability without a preview says so:\n%s", b.String())
	}
}

// TestAStaleOrFailedPreviewReleasesTheCallersKey: APPROVAL_STALE and
// PREVIEW_UNAVAILABLE store nothing (SPEC §11): a repeat with the same
// Idempotency-Key is judged afresh, never replayed.
func TestAStaleOrFailedPreviewReleasesTheCallersKey(t *testing.T) {
	o := &order{version: 1}
	var broken atomic.Bool
	c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true},
		Preview: func(ctx context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
			if broken.Load() {
				return middleware.Preview{Text: strings.Repeat("x", 5<<10)}, nil // not retryable, and still not stored
			}
			return o.preview(ctx, in)
		}}
	r := oneResult(t, c, middleware.WithApprovalStore(approvalstore.NewMemory()))
	broken.Store(true)
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, o.write)
	wantCode(t, env, err, middleware.CodePreviewUnavailable)
	broken.Store(false)
	_, env, err = r.call(t.Context(), keyedCall{key: "k"}, o.write)
	wantCode(t, env, err, middleware.CodeApprovalRequired) // judged afresh, not the failure replayed
	id := env.ApprovalID
	if _, err := r.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
		t.Fatal(err)
	}
	o.set(2)
	_, env, err = r.call(t.Context(), keyedCall{key: "k", approvalID: id}, o.write)
	wantCode(t, env, err, middleware.CodeApprovalStale)
	o.set(1)
	_, env, err = r.call(t.Context(), keyedCall{key: "k", approvalID: id}, o.write)
	wantCode(t, env, err, middleware.CodeOK)
	if env.Replayed || len(o.landed()) != 1 {
		t.Errorf("after the stale resume the key is free: the resume with the state as approved runs, once: %+v, %d writes", env, len(o.landed()))
	}
}
