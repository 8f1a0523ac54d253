package conformance

import (
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// outcomeRules are the rules about the outcome an approved execution
// leaves in its approval record, as every adapter reaches it.
var outcomeRules = []adapterRule{
	{name: "Approval/a timed-out approved write records in_doubt at once, then its late result", variant: notInline,
		capabilities: func(_ *suite, caps map[Fixture]middleware.Capability) {
			c := caps[FixtureGated]
			c.Timeout = slowTimeout
			caps[FixtureGated] = c
		},
		check: func(s *suite) {
			const rule = "an approved write that finalizes TIMEOUT while its attempt may still run records in_doubt at once, never failed; the attempt's late result replaces it"
			req := s.request(ModeIgnore)
			r := s.call(FixtureGated, req, "")
			s.expect(rule, r, middleware.CodeApprovalRequired)
			id := r.Envelope.ApprovalID
			if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
				s.Fatal(err)
			}
			r = s.call(FixtureGated, req, id)
			s.expect(rule, r, middleware.CodeTimeout)
			if rec, err := s.eng.Get(s.Context(), id); err != nil || rec.Status != store.ApprovalInDoubt || rec.Outcome.Status != store.ApprovalInDoubt || rec.Outcome.Code != middleware.CodeTimeout.String() {
				s.Errorf("%s: when the caller is told TIMEOUT the record must say in_doubt (TIMEOUT): %s %+v, %v", rule, rec.Status, rec.Outcome, err)
			}
			s.wait(s.returned[req.ID], "the abandoned handler to return")
			s.waitEvent(r.Envelope.ExecutionID, middleware.EventAbandonedResult)
			if rec, err := s.eng.Get(s.Context(), id); err != nil || rec.Status != store.ApprovalCompleted || !rec.Outcome.Late || rec.Outcome.Code != middleware.CodeOK.String() {
				s.Errorf("%s: once the abandoned attempt returned, its success must be recorded, late: %s %+v, %v", rule, rec.Status, rec.Outcome, err)
			}
			s.wantRuns(rule, req.ID, 1)
		}},
}
