package mcpadapter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// agentsOnly requires an approval for agents' writes and lets everyone
// else write: an actor-based policy, under which a person of another
// tenant needs no approval at all.
type agentsOnly struct{}

func (agentsOnly) Name() string { return "agents-only" }

func (agentsOnly) Decide(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	if in.Actor.Kind == "agent" && in.Capability.SideEffect == middleware.SideEffectWrite && !in.Listing {
		return middleware.RequireApproval("agents' writes need a person"), nil
	}
	return middleware.Allow(), nil
}

// TestApprovalsResumeOnlyForItsRequester: approvals_resume opens the
// arguments kept with an approval for its requester only (the whole
// actor). A person of another tenant holding the id — whose own calls
// need no approval, so the engine would have run the call as theirs —
// gets APPROVAL_NOT_FOUND, as does a caller who differs from the
// requester in tenant, kind or OnBehalfOf alone; nothing runs, and the
// record is untouched. The requester gets the record's own state
// (pending, rejected), and a consumed record still opens for the
// requester so that a repeat with the same _idempotency_key replays.
func TestApprovalsResumeOnlyForItsRequester(t *testing.T) {
	f := newFlowOn(t, approvalstore.NewMemory(), []middleware.Option{
		middleware.WithPolicy(agentsOnly{}),
		middleware.WithResultStore(resultstore.NewMemory()),
	})
	requester := f.client(t, agent.ID, "", nil)
	args := map[string]any{"id": "iban DE89 3704 0044 0532 0130 00", "amount": 12000}
	ask := func(args map[string]any) string {
		t.Helper()
		r := callTool(t, requester, "write", args)
		env, _ := mcpadapter.ReadEnvelope(r)
		if codeOfResult(r) != middleware.CodeApprovalRequired || env.ApprovalID == "" {
			t.Fatalf("the agent's write must need an approval: %+v", r)
		}
		return env.ApprovalID
	}
	id := ask(args)

	for _, c := range []struct{ name, user string }{
		{"a person of another tenant, who needs no approval", "mallory@other/user"},
		{"the requester's id in another tenant", agent.ID + "@other/agent"},
		{"the requester's id as another kind", agent.ID + "@acme/user"},
		{"the requester's id acting for someone", agent.ID + "@acme/agent/for:alice"},
	} {
		cs := f.client(t, c.user, "", nil)
		r := callTool(t, cs, "approvals_resume", map[string]any{"approval_id": id})
		if got := codeOfResult(r); got != middleware.CodeApprovalNotFound {
			t.Errorf("%s: %s (%v), want APPROVAL_NOT_FOUND", c.name, got, text(r))
		}
		if _, ok := mcpadapter.ReadEnvelope(r); ok {
			t.Errorf("%s: the refusal carries an execution's envelope; it must learn nothing", c.name)
		}
	}
	if runs := f.svc.executions(); len(runs) != 0 {
		t.Fatalf("resumes by others ran the handler %d times (%+v)", len(runs), runs)
	}
	if rec, err := f.eng.Get(t.Context(), id); err != nil || rec.Status != store.ApprovalPending {
		t.Fatalf("after the refused resumes the approval is %v (%v), want pending", rec.Status, err)
	}

	// The requester learns the record's state.
	pending := callTool(t, requester, "approvals_resume", map[string]any{"approval_id": id})
	if got := codeOfResult(pending); got != middleware.CodeApprovalPending {
		t.Errorf("the requester's resume of a pending approval: %s, want APPROVAL_PENDING", got)
	}
	// Asking who calls opened no execution: the trail holds the request
	// and the requester's resume, nothing of the refused ones.
	pendingEnv, _ := mcpadapter.ReadEnvelope(pending)
	f.final(t, pendingEnv.ExecutionID)
	executions := map[string]bool{}
	for _, e := range f.rec.Events() {
		executions[e.ExecutionID] = true
	}
	if len(executions) != 2 {
		t.Errorf("the audit trail holds %d executions, want 2 (the request and the requester's resume)", len(executions))
	}
	rejected := ask(map[string]any{"id": "refund-2", "amount": 1})
	if _, err := f.eng.Decide(t.Context(), rejected, store.Decision{Approve: false, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	if got := codeOfResult(callTool(t, requester, "approvals_resume", map[string]any{"approval_id": rejected})); got != middleware.CodeApprovalRejected {
		t.Errorf("the requester's resume of a rejected approval: %s, want APPROVAL_REJECTED", got)
	}

	// Approved: the requester's keyed resume runs once; a repeat with the
	// same key replays it, after the record was consumed.
	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	keyedResume := map[string]any{"approval_id": id, "_idempotency_key": "resume-1"}
	first := callTool(t, requester, "approvals_resume", keyedResume)
	firstEnv, _ := mcpadapter.ReadEnvelope(first)
	if codeOfResult(first) != middleware.CodeOK || firstEnv.ApprovalID != id {
		t.Fatalf("the requester's resume once approved: %+v", first)
	}
	again := callTool(t, requester, "approvals_resume", keyedResume)
	againEnv, _ := mcpadapter.ReadEnvelope(again)
	if codeOfResult(again) != middleware.CodeOK || !againEnv.Replayed || againEnv.ExecutionID != firstEnv.ExecutionID {
		t.Errorf("a repeat with the same key after the consumption: %s, envelope %+v; want the first result replayed", codeOfResult(again), againEnv)
	}
	if got := codeOfResult(callTool(t, requester, "approvals_resume", map[string]any{"approval_id": id})); got != middleware.CodeApprovalConsumed {
		t.Errorf("an unkeyed repeat: %s, want APPROVAL_CONSUMED", got)
	}
	// And another tenant's user still learns nothing of the consumed record.
	other := f.client(t, "mallory@other/user", "", nil)
	if got := codeOfResult(callTool(t, other, "approvals_resume", keyedResume)); got != middleware.CodeApprovalNotFound {
		t.Errorf("another tenant's keyed resume of the consumed approval: %s, want APPROVAL_NOT_FOUND", got)
	}
	if runs := f.svc.executions(); len(runs) != 1 || runs[0].Actor.ID != agent.ID {
		t.Fatalf("the handler ran %d times (%+v), want once, as the requester", len(runs), runs)
	}
}

// unavailableGets is an approval store whose Get fails while down is set.
type unavailableGets struct {
	store.ApprovalStore
	down atomic.Bool
}

func (s *unavailableGets) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	if s.down.Load() {
		return store.ApprovalRecord{}, errors.New("connection refused")
	}
	return s.ApprovalStore.Get(ctx, id)
}

// TestApprovalsResumeWithTheStoreDownRunsNothing: an approval store that
// fails is no decision (SPEC §4: APPROVAL_UNAVAILABLE, fail closed): the
// requester's resume of an approved call is APPROVAL_UNAVAILABLE, not the
// APPROVAL_NOT_FOUND of an unknown id, and nothing runs; once the store is
// back the same resume runs the call.
func TestApprovalsResumeWithTheStoreDownRunsNothing(t *testing.T) {
	approvals := &unavailableGets{ApprovalStore: approvalstore.NewMemory()}
	f := newFlowOn(t, approvals, []middleware.Option{middleware.WithPolicy(agentsOnly{})})
	requester := f.client(t, agent.ID, "", nil)
	r := callTool(t, requester, "write", map[string]any{"id": "w-1", "amount": 12000})
	env, _ := mcpadapter.ReadEnvelope(r)
	if codeOfResult(r) != middleware.CodeApprovalRequired || env.ApprovalID == "" {
		t.Fatalf("the agent's write must need an approval: %+v", r)
	}
	if _, err := f.eng.Decide(t.Context(), env.ApprovalID, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatalf("approve: %v", err)
	}

	approvals.down.Store(true)
	r = callTool(t, requester, "approvals_resume", map[string]any{"approval_id": env.ApprovalID})
	if got := codeOfResult(r); got != middleware.CodeApprovalUnavailable {
		t.Errorf("a resume with the approval store down: %s (%v), want APPROVAL_UNAVAILABLE", got, text(r))
	}
	if runs := f.svc.executions(); len(runs) != 0 {
		t.Fatalf("a resume with the approval store down ran the handler %d times", len(runs))
	}

	approvals.down.Store(false)
	r = callTool(t, requester, "approvals_resume", map[string]any{"approval_id": env.ApprovalID})
	if got := codeOfResult(r); got != middleware.CodeOK {
		t.Errorf("the same resume with the store back: %s (%v), want OK", got, text(r))
	}
}
