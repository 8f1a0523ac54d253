package conformance

import (
	"strconv"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// budgetRule is how every adapter writes what budgets decide: a call over
// a deny budget is BUDGET_EXCEEDED, ResourceExhausted (HTTP 429) with
// Retry-After; one over a require_approval budget asks for an approval
// exactly as an approval required by the capability does.
var budgetRule = adapterRule{
	name:    "Budget/over a deny budget is BUDGET_EXCEEDED with Retry-After, over a require_approval one APPROVAL_REQUIRED",
	budgets: true,
	capabilities: func(_ *suite, caps map[Fixture]middleware.Capability) {
		w := caps[FixtureWrite]
		w.Budgets = []middleware.Budget{{Name: "conformance-writes", Limit: 1, Window: time.Hour, Per: "actor"}}
		caps[FixtureWrite] = w
		iw := caps[FixtureIdempotentWrite]
		iw.Budgets = []middleware.Budget{{Name: "conformance-escalates", Limit: 1, Window: time.Hour, Per: "actor", Over: "require_approval"}}
		caps[FixtureIdempotentWrite] = iw
	},
	check: func(s *suite) {
		const rule = "a call over a deny budget is refused BUDGET_EXCEEDED (ResourceExhausted, 429) with Retry-After and agentsafe's detail, and nothing runs"
		s.expect(rule+" (within the budget)", s.call(FixtureWrite, s.request(ModeOK), ""), middleware.CodeOK)
		req := s.request(ModeOK)
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeBudgetExceeded)
		s.wantRuns(rule, req.ID, 0)
		if got := r.Header.Get(adapter.HeaderCode); got != middleware.CodeBudgetExceeded.String() || r.Header.Get(adapter.HeaderRetryable) != "false" || r.Envelope.Error.Retryable {
			s.Errorf("%s: %s %q, %s %q, envelope %+v", rule, adapter.HeaderCode, got, adapter.HeaderRetryable, r.Header.Get(adapter.HeaderRetryable), r.Envelope.Error)
		}
		// Just under an hour frees the window: an hour, in whole seconds.
		if got := r.Header.Get(adapter.HeaderRetryAfter); got != strconv.Itoa(3600) {
			s.Errorf("%s: %s header %q, want 3600", rule, adapter.HeaderRetryAfter, got)
		}
		if r.Envelope.RetryAfter <= 59*time.Minute || r.Envelope.RetryAfter > time.Hour {
			s.Errorf("%s: the client's envelope has RetryAfter %s, want about an hour", rule, r.Envelope.RetryAfter)
		}
		if !r.EngineDetail || r.Status == nil || r.Status.Code != StatusResourceExhausted {
			s.Errorf("%s: the client decoded status %+v (agentsafe detail %t), want ResourceExhausted with agentsafe's detail", rule, r.Status, r.EngineDetail)
		}

		const escalation = "a call over a require_approval budget asks for an approval: APPROVAL_REQUIRED with its id, and nothing runs"
		s.expect(escalation+" (within the budget)", s.call(FixtureIdempotentWrite, s.request(ModeOK), ""), middleware.CodeOK)
		req = s.request(ModeOK)
		r = s.call(FixtureIdempotentWrite, req, "")
		s.expect(escalation, r, middleware.CodeApprovalRequired)
		s.wantRuns(escalation, req.ID, 0)
		if r.Envelope.ApprovalID == "" || r.Header.Get(adapter.HeaderApprovalID) != r.Envelope.ApprovalID || r.Envelope.Status != middleware.StatusApprovalRequired || !r.EngineDetail {
			s.Errorf("%s: envelope %+v, %s header %q", escalation, r.Envelope, adapter.HeaderApprovalID, r.Header.Get(adapter.HeaderApprovalID))
		}
	},
}
