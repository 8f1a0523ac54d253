package approvalconsole_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
)

// TestAnEscalatedApprovalShowsTheBudget: a refund that would pass a
// require_approval budget waits for a manager, and the console shows why:
// the budget, what the call spends, what is spent and the limit.
func TestAnEscalatedApprovalShowsTheBudget(t *testing.T) {
	e := newEnvWith(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskHigh, Description: "refund an order",
		Budgets: []middleware.Budget{{Name: "refunds", Limit: 200, Window: 24 * time.Hour, Per: "person", Amount: "/amount", Over: "require_approval"}},
	}, "", nil, []middleware.Option{middleware.WithBudgetStore(budgetstore.NewMemory())})
	if _, err := e.call(agent, "41", ""); err != nil {
		t.Fatalf("a refund within the budget: %v", err)
	}
	id := e.requested(agent, "42") // 120 more would pass 200

	r := e.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-bob"})
	if r.status != http.StatusOK {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	var a approvalconsole.Approval
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	reason := strings.Join(a.Reasons, "; ")
	for _, want := range []string{`budget "refunds"`, "spends 120", "120 of its limit of 200"} {
		if !strings.Contains(reason, want) {
			t.Errorf("the console's reasons %q lack %q", reason, want)
		}
	}
	if r := e.decide("s-bob", id, true, "a loyal customer"); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if _, err := e.call(agent, "42", id); err != nil {
		t.Fatalf("the approved refund past the budget: %v", err)
	}
	if left, err := e.eng.Budget(t.Context(), "refunds", agent); err != nil || left != -40 {
		t.Errorf("left after the approved overdraft: %d (%v), want -40", left, err)
	}
}
