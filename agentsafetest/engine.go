package agentsafetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Engine is a [middleware.Engine] for tests, with what a test looks at:
// the audit trail and the approvals. Build one with [NewEngine], inside
// [Test] when the test runs on a fake clock.
type Engine struct {
	*middleware.Engine
	// Recorder receives every event of the engine.
	Recorder *Recorder
	// Approvals is the engine's approval store: in memory, on the
	// runtime's clock, which testing/synctest fakes.
	Approvals *approvalstore.Memory
	// Budgets is the engine's budget store, in memory on the same clock.
	Budgets *budgetstore.Memory
}

// NewEngine builds an engine for reg (which may be nil: the method options
// of the linked descriptors, as [middleware.New] reads them) with a
// [Recorder] as event sink, in-memory approval and budget stores and the test's
// output as the engine's log; opts come after those, so they add to them
// or replace them (a WithActor, policies, another store). An invalid
// configuration fails the test.
//
// It is meant to run inside a testing/synctest bubble, [Test]: the
// engine's timers, the approval store's clock and the sink workers then
// run on the bubble's fake clock, so a test of timeouts, retries and
// approval expiry takes no real time and sleeps for nothing:
//
//	agentsafetest.Test(t, func(t *testing.T) {
//		eng := agentsafetest.NewEngine(t, reg, middleware.WithActor(actorOf))
//		h := ordersv1connect.NewOrderServiceHandler(svc, connect.WithInterceptors(connectadapter.NewInterceptor(eng.Engine)))
//		// ... call h in process, read the envelope ...
//		approval, err := eng.PendingApproval(t.Context(), env.ExecutionID)
//		err = approval.Approve(t.Context(), manager)
//	})
func NewEngine(t testing.TB, reg *middleware.Registry, opts ...middleware.Option) *Engine {
	t.Helper()
	e := &Engine{Recorder: &Recorder{}, Approvals: approvalstore.NewMemory(), Budgets: budgetstore.NewMemory()}
	eng, err := middleware.New(reg, append([]middleware.Option{
		middleware.WithEventSink(e.Recorder),
		middleware.WithApprovalStore(e.Approvals),
		middleware.WithBudgetStore(e.Budgets),
		middleware.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
	}, opts...)...)
	if err != nil {
		t.Fatalf("agentsafetest: building the engine: %v", err)
	}
	e.Engine = eng
	return e
}

// PendingApproval finds the approval a call asked for: the execution
// executionID (from the call's envelope) ended APPROVAL_REQUIRED or
// APPROVAL_PENDING, naming it. It waits for the execution's final event,
// so call it once the call returned; it fails when the execution named no
// approval, or the approval is no longer pending.
func (e *Engine) PendingApproval(ctx context.Context, executionID string) (*Approval, error) {
	events, err := e.Recorder.WaitFinal(ctx, executionID)
	if err != nil {
		return nil, err
	}
	var id string
	for _, ev := range events {
		if ev.ApprovalID != "" {
			id = ev.ApprovalID
		}
	}
	if id == "" {
		return nil, fmt.Errorf("agentsafetest: execution %s asked for no approval", executionID)
	}
	rec, err := e.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.Status != store.ApprovalPending {
		return nil, fmt.Errorf("agentsafetest: approval %s of execution %s is %s, not pending", id, executionID, rec.Status)
	}
	return &Approval{e: e, Record: rec}, nil
}

// Approval is a pending approval, found by [Engine.PendingApproval], to
// decide as a chosen approver, as an approval console would.
type Approval struct {
	e *Engine
	// Record is the approval as it was found: its id, procedure, reasons,
	// requester, input digest and view.
	Record store.ApprovalRecord
}

// Approve records approver's approval, with the engine's checks (the
// approver must not be the requester or in its delegation chain, nor in
// another tenant). Under a quorum it is one vote; the call runs when it is
// resumed with the approval id. It returns the record as decided.
func (a *Approval) Approve(ctx context.Context, approver middleware.Actor) (store.ApprovalRecord, error) {
	return a.decide(ctx, true, approver)
}

// Reject records approver's rejection: the call never runs under this
// approval.
func (a *Approval) Reject(ctx context.Context, approver middleware.Actor) (store.ApprovalRecord, error) {
	return a.decide(ctx, false, approver)
}

func (a *Approval) decide(ctx context.Context, approve bool, approver middleware.Actor) (store.ApprovalRecord, error) {
	if a == nil || a.e == nil {
		return store.ApprovalRecord{}, errors.New("agentsafetest: no approval to decide")
	}
	verb := "approved"
	if !approve {
		verb = "rejected"
	}
	return a.e.Decide(ctx, a.Record.ID, store.Decision{Approve: approve, Approver: approver, Comment: verb + " by agentsafetest"})
}
