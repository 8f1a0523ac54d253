package mcpadapter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// refundState is what the gated tool's preview reads: a version that
// changes when the refund is made elsewhere.
type refundState struct {
	mu      sync.Mutex
	version int
}

func (s *refundState) set(v int) { s.mu.Lock(); s.version = v; s.mu.Unlock() }

func (s *refundState) preview(_ context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return middleware.Preview{Text: fmt.Sprintf("refund 120.00 EUR to card ****1234 (version %d)", s.version), State: fmt.Appendf(nil, "v%d", s.version)}, nil
}

// TestAPreviewOverMCP: the elicitation's message starts with the preview,
// the effect the user is asked to have approved; once the state changed,
// every way of resuming over MCP (the answering round, _approval_id,
// approvals_resume) is refused APPROVAL_STALE, tells the model what to
// do, and runs nothing; once it is back, the approval runs once.
func TestAPreviewOverMCP(t *testing.T) {
	st := &refundState{version: 1}
	f := newFlowOn(t, approvalstore.NewMemory(), []middleware.Option{middleware.WithPreview("/agentsafe.test.v1.TestService/Gated", st.preview)})
	f.multiRoundTrip(t, "2026-07-28")
	cs := f.client(t, agent.ID, "2026-07-28", manualClient)
	args := map[string]any{"id": "refund-1", "amount": 12000}
	first := callTool(t, cs, "gated", args)
	var id string
	for k, ir := range first.InputRequests {
		p := ir.(*mcp.ElicitParams)
		if !strings.HasPrefix(p.Message, "refund 120.00 EUR to card ****1234 (version 1)\n\n") {
			t.Errorf("the elicitation's message must start with the preview: %q", p.Message)
		}
		id = k
	}
	if id == "" {
		t.Fatalf("the first call must ask for a decision: %+v", first)
	}
	if rec, err := f.eng.Get(t.Context(), id); err != nil || rec.PreviewText != "refund 120.00 EUR to card ****1234 (version 1)" {
		t.Fatalf("Get must show the preview: %+v, %v", rec, err)
	}
	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}

	st.set(2) // refunded elsewhere
	withID := map[string]any{"id": "refund-1", "amount": 12000, "_approval_id": id}
	for name, r := range map[string]*mcp.CallToolResult{
		"the answering round": answerRound(t, cs, args, first.RequestState, id),
		"_approval_id":        callTool(t, cs, "gated", withID),
		"approvals_resume":    callTool(t, cs, "approvals_resume", map[string]any{"approval_id": id}),
	} {
		if got := codeOfResult(r); got != middleware.CodeApprovalStale || !r.IsError {
			t.Errorf("%s after the state changed: %s, want APPROVAL_STALE", name, got)
		}
		if all := strings.Join(text(r), "\n"); !strings.Contains(all, "has changed since") || !strings.Contains(all, "without \"_approval_id\"") {
			t.Errorf("%s: the result must tell the model the approval is stale and how to go on:\n%s", name, all)
		}
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("a stale resume ran the handler %d times", n)
	}

	st.set(1) // as approved
	if r := callTool(t, cs, "approvals_resume", map[string]any{"approval_id": id}); codeOfResult(r) != middleware.CodeOK {
		t.Fatalf("once the state is as approved, approvals_resume runs it: %s %v", codeOfResult(r), text(r))
	}
	if r := answerRound(t, cs, args, first.RequestState, id); codeOfResult(r) != middleware.CodeApprovalConsumed {
		t.Errorf("after it ran: %s, want APPROVAL_CONSUMED", codeOfResult(r))
	}
	if runs := f.svc.executions(); len(runs) != 1 {
		t.Errorf("the approval ran %d times, want once", len(runs))
	}
}
