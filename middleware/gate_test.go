package middleware_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

const procRefund = "/orders.v1.Orders/Refund"

type actorKey struct{}

func as(ctx context.Context, a middleware.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actorOf(ctx context.Context) (middleware.Actor, error) {
	a, _ := ctx.Value(actorKey{}).(middleware.Actor)
	return a, nil
}

var (
	agent   = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	boss    = middleware.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
	refund  = adapter.JSONInput([]byte(`{"order":"42","amount":120}`))
	refund2 = adapter.JSONInput([]byte(`{"order":"42","amount":999}`))
)

// gated is an engine with a gated refund capability on a memory store with
// a settable clock.
type gated struct {
	*fixture
	store *approvalstore.Memory
	now   time.Time
	mu    sync.Mutex
	runs  atomic.Int32
}

func newGated(t *testing.T, c middleware.Capability, opts ...middleware.Option) *gated {
	g := &gated{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	g.store = approvalstore.NewMemory(approvalstore.WithClock(g.clock))
	opts = append([]middleware.Option{middleware.WithApprovalStore(g.store), middleware.WithActor(actorOf), middleware.WithProtoFiles(nil)}, opts...)
	g.fixture = newFixture(t, procRefund, c, opts...)
	return g
}

func (g *gated) clock() time.Time { g.mu.Lock(); defer g.mu.Unlock(); return g.now }
func (g *gated) advance(d time.Duration) {
	g.mu.Lock()
	g.now = g.now.Add(d)
	g.mu.Unlock()
}

// call runs the refund as actor, with an optional approval id, and reports
// what the handler saw.
func (g *gated) call(actor middleware.Actor, in adapter.Input, approvalID string) (middleware.Envelope, error, middleware.Execution) {
	var seen middleware.Execution
	_, env, err := execute(g.eng, as(g.t.Context(), actor), call{Procedure: procRefund, Input: in, ApprovalID: approvalID}, func(ctx context.Context) (any, error) {
		g.runs.Add(1)
		seen, _ = middleware.ExecutionFromContext(ctx)
		return "refunded", nil
	})
	return env, err, seen
}

// requested asks for an approval and returns its id.
func (g *gated) requested(in adapter.Input) string {
	g.t.Helper()
	env, err, _ := g.call(agent, in, "")
	wantCode(g.t, env, err, middleware.CodeApprovalRequired)
	if env.Status != middleware.StatusApprovalRequired || !store.ValidApprovalID(env.ApprovalID) {
		g.t.Fatalf("approval request envelope %+v", env)
	}
	return env.ApprovalID
}

func (g *gated) approve(id string) {
	g.t.Helper()
	if _, err := g.eng.Decide(g.t.Context(), id, store.Decision{Approve: true, Approver: boss, Comment: "ok, customer called"}); err != nil {
		g.t.Fatalf("Decide: %v", err)
	}
}

var gatedCap = middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Risk: middleware.RiskHigh,
	Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}, Approval: middleware.Approval{Required: true, Type: "manager"}}

func TestApprovalLifecycle(t *testing.T) {
	g := newGated(t, gatedCap)
	id := g.requested(refund)
	if g.runs.Load() != 0 {
		t.Fatal("a gated call ran before approval")
	}

	env, err, _ := g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalPending)
	if !env.Error.Retryable || env.ApprovalID != id {
		t.Errorf("pending envelope %+v: want retryable and the approval id", env.Error)
	}

	g.approve(id)
	env, err, seen := g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
	if g.runs.Load() != 1 || seen.Actor.ID != agent.ID || seen.Approval == nil || seen.Approval.Approver.ID != boss.ID || seen.Approval.ID != id || env.ApprovalID != id {
		t.Fatalf("resumed execution ran as %+v with approval %+v", seen.Actor, seen.Approval)
	}
	rec, _ := g.store.Get(t.Context(), id)
	if rec.Status != store.ApprovalCompleted || rec.ConsumedBy != env.ExecutionID || rec.Approver.ID != boss.ID {
		t.Errorf("record after the run: %+v", rec)
	}

	env, err, _ = g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalConsumed)
	if g.runs.Load() != 1 {
		t.Fatal("a second resume ran the handler again")
	}
}

// forgetfulStore loses consumptions, the way a Redis failover with
// asynchronous replication can: the same approval can be consumed twice.
type forgetfulStore struct{ *approvalstore.Memory }

func (f forgetfulStore) Consume(ctx context.Context, id string, _ store.ConsumeRequest) (store.ConsumedApproval, error) {
	rec, err := f.Get(ctx, id)
	return store.ConsumedApproval{ID: rec.ID, Type: rec.Type, Approver: rec.Approver, Comment: rec.Comment, DecidedAt: rec.DecidedAt}, err
}

func TestApprovalIdempotencyKeyDerivesFromTheApproval(t *testing.T) {
	g := newGated(t, gatedCap)
	g = newGated(t, gatedCap, middleware.WithApprovalStore(forgetfulStore{g.store}))
	id := g.requested(refund)
	g.approve(id)
	_, _, first := g.call(agent, refund, id)
	_, _, second := g.call(agent, refund, id)
	if first.ID == second.ID || first.IdempotencyKey != second.IdempotencyKey {
		t.Errorf("one approval run twice must show the downstream one key: executions %s/%s keys %s/%s", first.ID, second.ID, first.IdempotencyKey, second.IdempotencyKey)
	}
	other := g.requested(refund2)
	g.approve(other)
	if _, _, x := g.call(agent, refund2, other); x.IdempotencyKey == first.IdempotencyKey {
		t.Error("two approvals share an idempotency key")
	}
}

func TestApprovalRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(g *gated, id string)
		actor  middleware.Actor
		input  adapter.Input
		procID func(id string) string
		want   middleware.Code
	}{
		{name: "rejected", setup: func(g *gated, id string) {
			g.eng.Decide(g.t.Context(), id, store.Decision{Approve: false, Approver: boss})
		}, want: middleware.CodeApprovalRejected},
		{name: "expired", setup: func(g *gated, id string) { g.approve(id); g.advance(16 * time.Minute) }, want: middleware.CodeApprovalExpired},
		{name: "input changed", setup: func(g *gated, id string) { g.approve(id) }, input: refund2, want: middleware.CodeApprovalInputMismatch},
		{name: "another actor learns nothing", setup: func(g *gated, id string) { g.approve(id) },
			actor: middleware.Actor{ID: "agent-8", Tenant: "acme"}, want: middleware.CodeApprovalNotFound},
		{name: "unknown id", procID: func(string) string { return store.NewApprovalID() }, want: middleware.CodeApprovalNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGated(t, gatedCap)
			id := g.requested(refund)
			if tc.setup != nil {
				tc.setup(g, id)
			}
			actor, input, useID := agent, refund, id
			if tc.actor.ID != "" {
				actor = tc.actor
			}
			if tc.input != nil {
				input = tc.input
			}
			if tc.procID != nil {
				useID = tc.procID(id)
			}
			env, err, _ := g.call(actor, input, useID)
			wantCode(t, env, err, tc.want)
			if g.runs.Load() != 0 {
				t.Fatalf("the handler ran after %s", tc.want)
			}
			evs := g.events(env.ExecutionID)
			if !slices.ContainsFunc(evs, func(e middleware.Event) bool { return e.Type == middleware.EventApprovalDenied && e.Code == tc.want }) {
				t.Errorf("no approval_denied event with %s: %v", tc.want, g.types(env.ExecutionID))
			}
		})
	}
}

func TestApprovalForAnotherProcedureIsAResumeMismatch(t *testing.T) {
	g := newGated(t, gatedCap)
	eng, err := middleware.New(middleware.NewRegistry().
		Register(procRefund, gatedCap).
		Register("/orders.v1.Orders/Cancel", middleware.Capability{SideEffect: middleware.SideEffectDestructive, Approval: middleware.Approval{Required: true, Type: "manager"}}),
		middleware.WithApprovalStore(g.store), middleware.WithActor(actorOf), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	id := g.requested(refund)
	g.approve(id)
	_, env, err := execute(eng, as(t.Context(), agent), call{Procedure: "/orders.v1.Orders/Cancel", Input: refund, ApprovalID: id},
		func(context.Context) (any, error) { t.Error("ran"); return nil, nil })
	wantCode(t, env, err, middleware.CodeApprovalResumeMismatch)
	// A mismatch does not burn the approval.
	env, err, _ = g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeOK)
}

func TestSelfApprovalIsRefused(t *testing.T) {
	g := newGated(t, gatedCap)
	id := g.requested(refund)
	for _, approver := range []middleware.Actor{agent, {ID: "user-alice", Tenant: "acme"}} {
		if _, err := g.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: approver}); !errors.Is(err, store.ErrSelfApproval) {
			t.Errorf("%s approving the request of %s: %v, want ErrSelfApproval", approver.ID, agent.ID, err)
		}
	}
	env, err, _ := g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalPending)
}

func TestRepeatedRequestReturnsTheSameApproval(t *testing.T) {
	g := newGated(t, gatedCap)
	if a, b := g.requested(refund), g.requested(refund); a != b {
		t.Errorf("a repeat of a pending call made a second approval: %s, %s", a, b)
	}
	if a, b := g.requested(refund), g.requested(refund2); a == b {
		t.Error("another input shared an approval")
	}
}

func TestApprovalEventSequence(t *testing.T) {
	g := newGated(t, gatedCap)
	first, err, _ := g.call(agent, refund, "")
	wantCode(t, first, err, middleware.CodeApprovalRequired)
	id, req := first.ApprovalID, first.ExecutionID
	g.wantTypes(req, middleware.EventRequested, middleware.EventApprovalRequested, middleware.EventFailed)
	if ev := g.final(req); ev.Code != middleware.CodeApprovalRequired || ev.ApprovalID != id {
		t.Errorf("request's final event %+v", ev)
	}
	g.approve(id)
	if last := g.waitEvent(req, middleware.EventApproved); last.Approver.ID != boss.ID || last.Comment == "" || last.ApprovalID != id {
		t.Errorf("Decide must emit capability.approved on the requesting execution: %+v", last)
	}
	env, _, _ := g.call(agent, refund, id)
	g.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventApprovalConsumed, middleware.EventStarted, middleware.EventCompleted)
	for _, e := range g.rec.Execution(env.ExecutionID) {
		if e.ApprovalID != id && e.Type != middleware.EventRequested {
			t.Errorf("event %s lacks the approval id", e.Type)
		}
		if e.InputDigest == "" {
			t.Errorf("event %s lacks the input digest", e.Type)
		}
	}
}

func TestOneApprovalCoversEveryRetryOfItsExecution(t *testing.T) {
	g := newGated(t, gatedCap)
	id := g.requested(refund)
	g.approve(id)
	var runs atomic.Int32
	_, env, err := execute(g.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(ctx context.Context) (any, error) {
		if runs.Add(1) == 1 {
			return nil, errTransient
		}
		return nil, nil
	})
	wantCode(t, env, err, middleware.CodeOK)
	if runs.Load() != 2 || env.Attempts != 2 {
		t.Fatalf("runs %d; the consumed approval must cover the retry", runs.Load())
	}
}

func TestConditionalApproval(t *testing.T) {
	cond := func(_ context.Context, q middleware.ApprovalQuery) (bool, string, error) {
		in, err := q.Input()
		if err != nil {
			return false, "", err
		}
		if strings.Contains(string(in), `"amount":999`) {
			return true, "amount over 500", nil
		}
		return false, "", nil
	}
	c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Type: "manager"}}
	g := newGated(t, c, middleware.WithApprovalCondition(cond))
	env, err, _ := g.call(agent, refund, "")
	wantCode(t, env, err, middleware.CodeOK)

	env, err, _ = g.call(agent, refund2, "")
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	rec, _ := g.store.Get(t.Context(), env.ApprovalID)
	if len(rec.Reasons) != 1 || rec.Reasons[0] != "amount over 500" {
		t.Errorf("the condition's reason must reach the record: %v", rec.Reasons)
	}

	failing := newGated(t, c, middleware.WithApprovalCondition(func(context.Context, middleware.ApprovalQuery) (bool, string, error) {
		return false, "", errors.New("policy service down")
	}))
	env, err, _ = failing.call(agent, refund, "")
	wantCode(t, env, err, middleware.CodeApprovalUnavailable)
	if failing.runs.Load() != 0 {
		t.Fatal("a failing condition must fail closed")
	}
}

func TestApprovalViewIsRenderedByTheApplication(t *testing.T) {
	g := newGated(t, gatedCap, middleware.WithApprovalView(func(_ context.Context, proc string, in []byte) (string, error) {
		return "refund on order 42 (amount hidden) via " + proc, nil
	}))
	id := g.requested(refund)
	rec, _ := g.store.Get(t.Context(), id)
	if rec.View != "refund on order 42 (amount hidden) via "+procRefund || rec.Digest == "" || rec.Requester.ID != agent.ID || rec.Type != "manager" || rec.Risk != "high" {
		t.Errorf("record %+v", rec)
	}
}

type failingStore struct{ store.ApprovalStore }

func (failingStore) Create(context.Context, store.ApprovalRequest) (store.ApprovalRecord, error) {
	return store.ApprovalRecord{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func (failingStore) Release(context.Context, string, string) error { return errors.New("i/o timeout") }

func (failingStore) Consume(context.Context, string, store.ConsumeRequest) (store.ConsumedApproval, error) {
	return store.ConsumedApproval{}, errors.New("i/o timeout")
}

func TestGateFailsClosed(t *testing.T) {
	g := newGated(t, gatedCap, middleware.WithApprovalStore(failingStore{}))
	for _, id := range []string{"", store.NewApprovalID()} {
		env, err, _ := g.call(agent, refund, id)
		wantCode(t, env, err, middleware.CodeApprovalUnavailable)
		if !env.Error.Retryable {
			t.Error("APPROVAL_UNAVAILABLE is retryable for the caller of an idempotent capability")
		}
	}
	if _, err := middleware.New(middleware.NewRegistry().Register(procRefund, gatedCap), middleware.WithProtoFiles(nil)); err == nil {
		t.Error("New accepted an approval without a store; every call would fail at run time")
	}

	env, err, _ := g.call(middleware.Actor{}, refund, "")
	wantCode(t, env, err, middleware.CodeUnauthenticated)

	plain := newGated(t, gatedCap)
	env, err, _ = plain.call(agent, adapter.JSONInput([]byte(`{"a":1,"A":2}`)), "")
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if !strings.Contains(env.Error.Message, "cannot be bound") {
		t.Errorf("unbindable input message: %q", env.Error.Message)
	}
	env, err, _ = plain.call(agent, nil, "")
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if g.runs.Load()+plain.runs.Load() != 0 {
		t.Fatal("a handler ran although the gate refused")
	}
}

func TestOutcomeIsRecordedEvenWhenTheCallerLeft(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		g := newGated(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true}})
		id := g.requested(refund)
		g.approve(id)
		ctx, cancel := context.WithCancel(as(t.Context(), agent))
		_, env, err := execute(g.eng, ctx, call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(ctx context.Context) (any, error) {
			cancel()
			<-ctx.Done()
			return nil, ctx.Err()
		})
		wantCode(t, env, err, middleware.CodeCancelled)
		synctest.Wait() // an attempt the engine stopped waiting for records itself when it returns
		rec, _ := g.store.Get(t.Context(), id)
		if rec.Status != store.ApprovalFailed || rec.Outcome.Code != "CANCELLED" {
			t.Errorf("outcome not recorded after the caller left: %+v", rec)
		}
	})
}
