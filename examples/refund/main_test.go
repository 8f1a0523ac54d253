package main

import (
	"io"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// TestStory runs the scripted agent against the example server and checks
// the story's outcomes (not its log text), on both approval stores.
func TestStory(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.ApprovalStore{
		"memory": func(*testing.T) store.ApprovalStore { return approvalstore.NewMemory() },
		"redis": func(t *testing.T) store.ApprovalStore {
			store, err := approvalstore.NewRedis(redistest.Start(t).Client())
			if err != nil {
				t.Fatal(err)
			}
			return store
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := newServer(open(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer s.close()
			r, err := newAgent(s, io.Discard).run(t.Context(), autoApprove(s))
			if err != nil {
				t.Fatal(err)
			}
			checkStory(t, r)
		})
	}
}

func checkStory(t *testing.T, r report) {
	t.Helper()
	// 1. The flaky read is retried inside one execution, under one key.
	if r.Read.Code != middleware.CodeOK || r.Read.Attempts != 2 || len(r.Read.Runs) != 2 ||
		r.Read.Runs[0].ExecutionID != r.Read.Runs[1].ExecutionID || r.Read.Runs[0].IdempotencyKey != r.Read.Runs[1].IdempotencyKey {
		t.Errorf("read: %+v", r.Read)
	}
	// 2. The external write is not retried, and not safe to re-invoke.
	if r.Notify.Code != middleware.CodeExecutionFailed || r.Notify.Attempts != 1 || len(r.Notify.Runs) != 1 || r.Notify.Retryable {
		t.Errorf("notify: %+v", r.Notify)
	}
	// 3. The idempotent refund is retried under the same key; the gateway pays once.
	if r.Refund.Code != middleware.CodeOK || r.Refund.Attempts != 2 || r.GatewayRefunds != 1 ||
		r.Refund.Runs[0].IdempotencyKey != r.Refund.Runs[1].IdempotencyKey {
		t.Errorf("refund: %+v, gateway refunds %d", r.Refund, r.GatewayRefunds)
	}
	// 4. Timeout and cancellation are told apart; neither is retried.
	if r.Timeout.Code != middleware.CodeTimeout || r.Timeout.Attempts != 1 {
		t.Errorf("timeout: %+v", r.Timeout)
	}
	if r.Cancelled.Code != middleware.CodeCancelled || r.Cancelled.Attempts != 1 || r.Cancelled.ExecutionID == r.Timeout.ExecutionID {
		t.Errorf("cancelled: %+v", r.Cancelled)
	}
	// 5. The approval: requested (nothing ran), approved, consumed once.
	if r.AskApproval.Code != middleware.CodeApprovalRequired || len(r.AskApproval.Runs) != 0 || !store.ValidApprovalID(r.AskApproval.ApprovalID) {
		t.Errorf("ask approval: %+v", r.AskApproval)
	}
	if r.Resume.Code != middleware.CodeOK || len(r.Resume.Runs) != 1 || r.Resume.ApprovalID != r.AskApproval.ApprovalID {
		t.Errorf("resume: %+v", r.Resume)
	}
	if r.ResumeAgain.Code != middleware.CodeApprovalConsumed || len(r.ResumeAgain.Runs) != 0 {
		t.Errorf("second resume: %+v", r.ResumeAgain)
	}
	if !hasEvent(r.Resume.Events, middleware.EventApprovalConsumed) || !hasEvent(r.AskApproval.Events, middleware.EventApprovalRequested) {
		t.Error("the approval steps are missing from the audit trail")
	}
	// 6. A re-invocation is a new execution, refused by the business rule.
	if r.Reinvocation.Code != middleware.CodeExecutionFailed || r.Reinvocation.ExecutionID == r.Refund.ExecutionID || r.GatewayRefunds != 1 {
		t.Errorf("re-invocation: %+v", r.Reinvocation)
	}
	// 7. The destructive cancel was rejected and never ran.
	if r.AskCancel.Code != middleware.CodeApprovalRequired || r.CancelRejected.Code != middleware.CodeApprovalRejected || len(r.CancelRejected.Runs) != 0 {
		t.Errorf("cancel: %+v / %+v", r.AskCancel, r.CancelRejected)
	}
	// 8. MCP: every governed procedure is a tool; a tool call is governed.
	if len(r.MCPTools) != 5 || r.MCPRead.Code != middleware.CodeOK || r.MCPRead.Attempts != 1 || len(r.MCPRead.Runs) != 1 {
		t.Errorf("mcp: tools %v, read %+v", r.MCPTools, r.MCPRead)
	}
}

func hasEvent(evs []middleware.Event, t middleware.EventType) bool {
	for _, e := range evs {
		if e.Type == t {
			return true
		}
	}
	return false
}
