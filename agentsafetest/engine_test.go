package agentsafetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

const refund = "/shop.v1.Orders/Refund"

var (
	agent   = middleware.Actor{ID: "agent-7", Tenant: "shop", Kind: "agent"}
	manager = middleware.Actor{ID: "manager-bob", Tenant: "shop", Kind: "user"}
)

func newEngine(t *testing.T) *agentsafetest.Engine {
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{
		SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true, Type: "manager"}})
	return agentsafetest.NewEngine(t, reg, middleware.WithProtoFiles(nil),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
}

// call makes one refund call through the adapter SPI, as an adapter
// would, and counts the handler's runs.
func call(eng *agentsafetest.Engine, ctx context.Context, approvalID string, runs *int) (middleware.Envelope, error) {
	_, env, err := adapter.Execute(ctx, adapter.Resolve(eng.Engine, refund), adapter.Call[any]{
		Input: adapter.JSONInput([]byte(`{"order":"42","amount":150000}`)), ApprovalID: approvalID, Surface: adapter.SurfaceRPC,
	}, func(context.Context) (any, error) { *runs++; return "refunded", nil })
	return env, err
}

func TestTheApprovalProbeApprovesAsTheChosenApprover(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t)
		runs := 0
		env, err := call(eng, t.Context(), "", &runs)
		if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
			t.Fatalf("first call: %v", err)
		}
		approval, err := eng.PendingApproval(t.Context(), env.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if approval.Record.ID != env.ApprovalID || approval.Record.Procedure != refund || approval.Record.Requester.ID != agent.ID {
			t.Fatalf("the probe found %+v for envelope %+v", approval.Record, env)
		}
		if _, err := approval.Approve(t.Context(), agent); !errors.Is(err, store.ErrSelfApproval) {
			t.Fatalf("the requester approving its own call: %v, want the engine's refusal", err)
		}
		rec, err := approval.Approve(t.Context(), manager)
		if err != nil || rec.Status != store.ApprovalApproved {
			t.Fatalf("approve: %v, %s", err, rec.Status)
		}
		if _, err := call(eng, t.Context(), env.ApprovalID, &runs); err != nil || runs != 1 {
			t.Fatalf("resume: %v, %d runs", err, runs)
		}
		if _, err := eng.PendingApproval(t.Context(), env.ExecutionID); err == nil {
			t.Fatal("a consumed approval is no longer pending")
		}
	})
}

func TestTheApprovalProbeRejects(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t)
		runs := 0
		env, _ := call(eng, t.Context(), "", &runs)
		approval, err := eng.PendingApproval(t.Context(), env.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := approval.Reject(t.Context(), manager); err != nil {
			t.Fatal(err)
		}
		if _, err := call(eng, t.Context(), env.ApprovalID, &runs); middleware.CodeOf(err) != middleware.CodeApprovalRejected || runs != 0 {
			t.Fatalf("resume after a rejection: %v, %d runs", err, runs)
		}
	})
}

func TestTheEngineRunsOnTheBubblesClock(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t)
		runs := 0
		env, _ := call(eng, t.Context(), "", &runs)
		start := time.Now()
		time.Sleep(16 * time.Minute) // past the default 15m expiry, in no real time
		if _, err := eng.PendingApproval(t.Context(), env.ExecutionID); err == nil {
			t.Fatalf("an approval %s after its request is still pending", time.Since(start))
		}
	})
}

func TestPendingApprovalOfACallThatAskedForNone(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := agentsafetest.NewEngine(t, middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectRead}),
			middleware.WithProtoFiles(nil))
		_, env, err := adapter.Execute(t.Context(), adapter.Resolve(eng.Engine, refund), adapter.Call[any]{Surface: adapter.SurfaceRPC},
			func(context.Context) (any, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.PendingApproval(t.Context(), env.ExecutionID); err == nil {
			t.Fatal("a call that asked for no approval has no pending approval")
		}
	})
}

// TestTheApprovalProbeFindsAPendingApprovalByTheResumingCall: under a
// quorum each Approve is one vote, and a resume that found the approval
// still pending names it too.
func TestTheApprovalProbeFindsAPendingApprovalByTheResumingCall(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		reg := middleware.NewRegistry().Register(refund, middleware.Capability{
			SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true, Quorum: 2}})
		eng := agentsafetest.NewEngine(t, reg, middleware.WithProtoFiles(nil),
			middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
		runs := 0
		first, _ := call(eng, t.Context(), "", &runs)
		approval, err := eng.PendingApproval(t.Context(), first.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := approval.Approve(t.Context(), manager); err != nil || rec.Status != store.ApprovalPending {
			t.Fatalf("one vote of two: %v, %s", err, rec.Status)
		}
		resumed, err := call(eng, t.Context(), first.ApprovalID, &runs)
		if middleware.CodeOf(err) != middleware.CodeApprovalPending || runs != 0 {
			t.Fatalf("resume after one vote of two: %v, %d runs", err, runs)
		}
		again, err := eng.PendingApproval(t.Context(), resumed.ExecutionID)
		if err != nil || again.Record.ID != first.ApprovalID {
			t.Fatalf("the resuming call's pending approval: %+v, %v", again, err)
		}
		second := middleware.Actor{ID: "manager-carol", Tenant: "shop", Kind: "user"}
		if rec, err := again.Approve(t.Context(), second); err != nil || rec.Status != store.ApprovalApproved {
			t.Fatalf("the second vote: %v, %s", err, rec.Status)
		}
		if _, err := call(eng, t.Context(), first.ApprovalID, &runs); err != nil || runs != 1 {
			t.Fatalf("resume after the quorum: %v, %d runs", err, runs)
		}
	})
}
