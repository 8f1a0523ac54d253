package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	_ "github.com/agentsafe/agentsafe/internal/testproto/testv1" // links agentsafe.test.v1 into GlobalFiles
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The rules of this file keep the engine closed when the caller is careless
// or hostile: each failed on an engine that trusted the friendly path.

var (
	alice          = middleware.Actor{ID: "user-alice", Tenant: "acme", Kind: "user"}
	agentForCarol  = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-carol"}}
	agentForAlice  = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	agentForBob    = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-bob"}}
	plainWriteGate = middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second,
		Approval: middleware.Approval{Required: true, Type: "manager"}}
)

func TestTheWholeActorIsBoundToAnApproval(t *testing.T) {
	t.Run("a resume acting for someone else finds nothing", func(t *testing.T) {
		g := newGated(t, plainWriteGate)
		env, err, _ := g.call(agentForCarol, refund, "")
		wantCode(t, env, err, middleware.CodeApprovalRequired)
		// alice is not in the requester's chain, so she may approve...
		if _, err := g.eng.Decide(t.Context(), env.ApprovalID, store.Decision{Approve: true, Approver: alice}); err != nil {
			t.Fatalf("Decide by alice: %v", err)
		}
		// ...but the agent must not then run it on behalf of alice, on an
		// approval alice granted herself.
		env2, err, _ := g.call(agentForAlice, refund, env.ApprovalID)
		wantCode(t, env2, err, middleware.CodeApprovalNotFound)
		if g.runs.Load() != 0 {
			t.Fatal("the call ran for another principal than the one it was approved for")
		}
	})
	t.Run("a session for bob is not handed alice's pending approval", func(t *testing.T) {
		g := newGated(t, plainWriteGate)
		forAlice, err, _ := g.call(agentForAlice, refund, "")
		wantCode(t, forAlice, err, middleware.CodeApprovalRequired)
		forBob, err, _ := g.call(agentForBob, refund, "")
		wantCode(t, forBob, err, middleware.CodeApprovalRequired)
		if forBob.ApprovalID == forAlice.ApprovalID {
			t.Fatal("the pending dedup handed alice's approval id to the session acting for bob")
		}
		g.approve(forAlice.ApprovalID)
		env, err, _ := g.call(agentForBob, refund, forAlice.ApprovalID)
		wantCode(t, env, err, middleware.CodeApprovalNotFound)
		if g.runs.Load() != 0 {
			t.Fatal("the session acting for bob consumed alice's approval")
		}
	})
}

// TestAnIdentityThatIsNotUTF8CannotBeBoundToAnApproval: stores keep
// identities in encodings that replace invalid bytes, where two actors
// could become one; such a caller is not authenticated for an approval,
// and nothing is requested or consumed for it.
func TestAnIdentityThatIsNotUTF8CannotBeBoundToAnApproval(t *testing.T) {
	for name, a := range map[string]middleware.Actor{
		"id":    {ID: "agent-\xff", Tenant: "acme", Kind: "agent"},
		"chain": {ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-\xfe"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := newGated(t, plainWriteGate)
			env, err, _ := g.call(a, refund, "")
			wantCode(t, env, err, middleware.CodeUnauthenticated)
			if recs, _ := g.eng.List(t.Context(), store.ApprovalFilter{AnyTenant: true}); len(recs) != 0 || g.runs.Load() != 0 {
				t.Fatalf("%d records, %d runs: nothing may be requested or run", len(recs), g.runs.Load())
			}
		})
	}
}

func TestTheInputIsCheckedBeforeTheConditionReadsIt(t *testing.T) {
	var asked atomic.Int32
	condition := func(_ context.Context, q middleware.ApprovalQuery) (bool, string, error) {
		asked.Add(1)
		doc, err := q.Input()
		if err != nil {
			return false, "", err
		}
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			return false, "", err
		}
		amount, _ := m["amountCents"].(float64)
		return amount > 100_000, "a large refund", nil
	}
	g := newGated(t, middleware.Capability{SideEffect: middleware.SideEffectWrite}, middleware.WithApprovalCondition(condition))
	// The condition's map sees 1; a handler's struct, matching names
	// case-insensitively, would see 1,500,000.
	env, err, _ := g.call(agent, adapter.JSONInput([]byte(`{"amountCents":1,"AmountCents":1500000}`)), "")
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if g.runs.Load() != 0 || asked.Load() != 0 {
		t.Fatalf("handler ran %d times, condition asked %d times: a condition must never judge a document the digest refuses", g.runs.Load(), asked.Load())
	}
	g.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventFailed)
}

func TestNumbersBeyondDoublePrecisionCannotBeApproved(t *testing.T) {
	g := newGated(t, plainWriteGate)
	for _, doc := range []string{`{"amount":12345678901234567.1}`, `{"amount":1e-400}`} {
		env, err, _ := g.call(agent, adapter.JSONInput([]byte(doc)), "")
		wantCode(t, env, err, middleware.CodeInvalidArgument)
	}
	for _, doc := range []string{`{"amount":0.1}`, `{"amount":0.10}`} {
		env, err, _ := g.call(agent, adapter.JSONInput([]byte(doc)), "")
		wantCode(t, env, err, middleware.CodeApprovalRequired)
	}
}

func TestALateResultOfAnApprovedWriteIsRecordedNotGuessed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		g := newGated(t, plainWriteGate)
		id := g.requested(refund)
		g.approve(id)
		_, env, err := execute(g.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(ctx context.Context) (any, error) {
			time.Sleep(3 * time.Second) // ignores its context: the refund lands after the deadline
			return "refunded", nil
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		rec, _ := g.store.Get(t.Context(), id)
		if rec.Status != store.ApprovalInDoubt || rec.Outcome.Status != store.ApprovalInDoubt {
			t.Fatalf("right after the timeout the record is %s (outcome %+v); a write left running may have run: want in_doubt, never failed", rec.Status, rec.Outcome)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		rec, _ = g.store.Get(t.Context(), id)
		if rec.Status != store.ApprovalCompleted || !rec.Outcome.Late || rec.Outcome.Code != "OK" {
			t.Fatalf("after the late success the record is %s (outcome %+v), want completed, late", rec.Status, rec.Outcome)
		}
		if ev := g.rec.Execution(env.ExecutionID); ev[len(ev)-1].Type != middleware.EventAbandonedResult || !ev[len(ev)-1].Succeeded {
			t.Errorf("events %v: want a succeeded abandoned_result last", g.types(env.ExecutionID))
		}
	})
}

// flakyStore loses the reply of the first n Consume calls after they took
// effect, as a connection reset after the write would.
type flakyStore struct {
	store.ApprovalStore
	lose   atomic.Int32
	onDone func()
}

func (f *flakyStore) Consume(ctx context.Context, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	got, err := f.ApprovalStore.Consume(ctx, id, req)
	if f.onDone != nil {
		f.onDone()
	}
	if err == nil && f.lose.Add(-1) >= 0 {
		return store.ConsumedApproval{}, errors.New("read tcp: connection reset by peer")
	}
	return got, err
}

func TestALostConsumeReplyNeverSpendsTheApproval(t *testing.T) {
	run := func(t *testing.T, lose int32) (*gated, *flakyStore, string, middleware.Envelope, error) {
		mem := approvalstore.NewMemory()
		f := &flakyStore{ApprovalStore: mem}
		g := newGated(t, plainWriteGate, middleware.WithApprovalStore(f))
		g.store = mem
		id := g.requested(refund)
		g.approve(id)
		f.lose.Store(lose)
		env, err, _ := g.call(agent, refund, id)
		return g, f, id, env, err
	}
	t.Run("the engine re-issues Consume for the same execution", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			g, _, _, env, err := run(t, 2)
			wantCode(t, env, err, middleware.CodeOK)
			if g.runs.Load() != 1 {
				t.Fatalf("ran %d times, want once", g.runs.Load())
			}
		})
	})
	t.Run("when every try fails the approval is released", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			g, _, id, env, err := run(t, 3)
			wantCode(t, env, err, middleware.CodeApprovalUnavailable)
			if !env.Error.Retryable || g.runs.Load() != 0 {
				t.Fatalf("envelope %+v after %d runs: want retryable (nothing ran)", env.Error, g.runs.Load())
			}
			synctest.Wait() // the background Release
			env, err, _ = g.call(agent, refund, id)
			wantCode(t, env, err, middleware.CodeOK)
			if g.runs.Load() != 1 {
				t.Fatalf("ran %d times, want once", g.runs.Load())
			}
		})
	})
}

func TestACallerGoneAfterTheConsumptionGivesTheApprovalBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		mem := approvalstore.NewMemory()
		ctx, cancel := context.WithCancel(as(t.Context(), agent))
		f := &flakyStore{ApprovalStore: mem}
		g := newGated(t, plainWriteGate, middleware.WithApprovalStore(f))
		g.store = mem
		id := g.requested(refund)
		g.approve(id)
		f.onDone = cancel // the caller leaves right after the store consumed
		_, env, err := execute(g.eng, ctx, call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) {
			g.runs.Add(1)
			return nil, nil
		})
		wantCode(t, env, err, middleware.CodeCancelled)
		f.onDone = nil
		synctest.Wait()
		if rec, _ := mem.Get(t.Context(), id); rec.Status != store.ApprovalApproved || g.runs.Load() != 0 {
			t.Fatalf("record %s after %d runs: nothing ran, so the approval must be approved again", rec.Status, g.runs.Load())
		}
	})
}

// TestALostConsumeReplyOfACallerGoneGivesTheApprovalBack: the store
// consumed, its reply was lost, and the caller left meanwhile, so the
// engine does not re-issue Consume; it must still release, or the approval
// is spent though nothing ran.
func TestALostConsumeReplyOfACallerGoneGivesTheApprovalBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		mem := approvalstore.NewMemory()
		ctx, cancel := context.WithCancel(as(t.Context(), agent))
		f := &flakyStore{ApprovalStore: mem}
		g := newGated(t, plainWriteGate, middleware.WithApprovalStore(f))
		g.store = mem
		id := g.requested(refund)
		g.approve(id)
		f.lose.Store(1)
		f.onDone = cancel // the caller leaves while the reply is lost
		_, env, err := execute(g.eng, ctx, call{Procedure: procRefund, Input: refund, ApprovalID: id}, func(context.Context) (any, error) {
			g.runs.Add(1)
			return nil, nil
		})
		if code := middleware.CodeOf(err); code != middleware.CodeCancelled && code != middleware.CodeApprovalUnavailable {
			t.Errorf("envelope %+v: want CANCELLED or APPROVAL_UNAVAILABLE", env.Error)
		}
		f.onDone = nil
		synctest.Wait() // the background Release
		if rec, _ := mem.Get(t.Context(), id); rec.Status != store.ApprovalApproved || g.runs.Load() != 0 {
			t.Fatalf("record %s after %d runs: nothing ran, so the approval must be approved again", rec.Status, g.runs.Load())
		}
	})
}

func TestNothingRanSoAskingAgainIsSafe(t *testing.T) {
	g := newGated(t, plainWriteGate) // a write, not idempotent
	id := g.requested(refund)
	env, err, _ := g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalPending)
	if !env.Error.Retryable {
		t.Error("APPROVAL_PENDING on a write said retryable: false, though nothing ran")
	}
}

func TestARepeatedDecisionIsANoOp(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		g := newGated(t, plainWriteGate)
		id := g.requested(refund)
		g.approve(id)
		g.approve(id)
		synctest.Wait() // every queued event delivered
		n := 0
		for _, e := range g.rec.Events() {
			if e.Type == middleware.EventApproved {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d capability.approved events for one decision repeated, want 1", n)
		}
	})
}

func TestTyposFailAtStartUp(t *testing.T) {
	read := middleware.Capability{SideEffect: middleware.SideEffectRead}
	for _, tc := range []struct {
		name string
		reg  *middleware.Registry
		opts []middleware.Option
		want string
	}{
		{"an RPC name of no known method", middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Nope", read), nil, "names no method"},
		{"an RPC name without its slash", middleware.NewRegistry().Register("agentsafe.test.v1.TestService/Read", read), nil, `"/agentsafe.test.v1.TestService/Read"`},
		{"an approval without a store", middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Write", plainWriteGate), nil, "Approval.Required: needs an approval store"},
		{"a condition without a store", nil, []middleware.Option{middleware.WithApprovalCondition(func(context.Context, middleware.ApprovalQuery) (bool, string, error) {
			return false, "", nil
		})}, "WithApprovalCondition needs an approval store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := middleware.New(tc.reg, append(tc.opts, middleware.WithLogger(discard))...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("WithProtoFiles(nil) turns the existence check off, with one warning", func(t *testing.T) {
		var buf bytes.Buffer
		_, err := middleware.New(middleware.NewRegistry().Register("/shop.v1.InventoryService/GetItem", read),
			middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "WithProtoFiles(nil)"); n != 1 {
			t.Errorf("%d warnings about WithProtoFiles(nil), want 1:\n%s", n, buf.String())
		}
	})
}

func TestStartUpWarnsOnceAboutRiskyConfigurations(t *testing.T) {
	var buf bytes.Buffer
	reg := middleware.NewRegistry().
		Register("/agentsafe.test.v1.TestService/Write", plainWriteGate).
		Register("/agentsafe.test.v1.TestService/IdempotentWrite", middleware.Capability{SideEffect: middleware.SideEffectWrite})
	_, err := middleware.New(reg, middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"the memory store", "no event sink"} {
		if n := strings.Count(buf.String(), want); n != 1 {
			t.Errorf("%d warnings mentioning %q, want 1:\n%s", n, want, buf.String())
		}
	}
	buf.Reset()
	_, err = middleware.New(nil, middleware.WithEventSink(&agentsafetest.Recorder{}), middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "WithDigestKey"); n != 1 {
		t.Errorf("%d warnings about a plain digest on events, want 1:\n%s", n, buf.String())
	}
}

var discard = slog.New(slog.DiscardHandler)

// An input refused because it cannot be bound is told to its caller in
// detail (where, and which number), but events carry no payload, ever:
// the value that did not bind stays out of the trail.
func TestAnUnboundInputsValuesStayOutOfEvents(t *testing.T) {
	g := newGated(t, plainWriteGate)
	env, err, _ := g.call(agent, adapter.JSONInput([]byte(`{"card":41111111111111111111}`)), "")
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if !strings.Contains(env.Error.Message, "41111111111111111111") {
		t.Errorf("the caller's message %q should say which number does not bind", env.Error.Message)
	}
	for _, e := range g.events(env.ExecutionID) {
		if strings.Contains(fmt.Sprintf("%+v", e), "41111111111111111111") {
			t.Errorf("event %s carries the input's value: %+v", e.Type, e)
		}
	}
}
