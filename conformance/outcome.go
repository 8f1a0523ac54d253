package conformance

import (
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// outcomeRules are the rules about the outcome an approved execution
// leaves in its approval record, as every adapter reaches it.
var outcomeRules = []adapterRule{
	{name: "Approval/a timed-out approved write records in_doubt at once, then its late result", variant: notInline, capabilities: slowGated,
		check: func(s *suite) {
			const rule = "an approved write that finalizes TIMEOUT while its attempt may still run records in_doubt at once, never failed; the attempt's late result replaces it"
			req := s.request(ModeIgnore)
			r, id := s.resumedLate(rule, req)
			if rec, err := s.eng.Get(s.Context(), id); err != nil || rec.Status != store.ApprovalInDoubt || rec.Outcome.Status != store.ApprovalInDoubt || rec.Outcome.Code != middleware.CodeTimeout.String() {
				s.Errorf("%s: when the caller is told TIMEOUT the record must say in_doubt (TIMEOUT): %s %+v, %v", rule, rec.Status, rec.Outcome, err)
			}
			s.wait(s.returned[req.ID], "the abandoned handler to return")
			s.waitEvent(r.Envelope.ExecutionID, middleware.EventAbandonedResult)
			s.wantLateSuccess(rule, id, "once the abandoned attempt returned, its success must be recorded, late")
			s.wantRuns(rule, req.ID, 1)
		}},
	{name: "Approval/an Inline approved write that returns late records its result at once, late", variant: inlineOnly, capabilities: slowGated,
		check: func(s *suite) {
			const rule = "an Inline execution knows its late result when it finalizes: the approval records it then (completed, late), never in_doubt"
			req := s.request(ModeIgnore)
			_, id := s.resumedLate(rule, req)
			s.wantLateSuccess(rule, id, "when the caller is told TIMEOUT the record already holds the late success")
			s.wantRuns(rule, req.ID, 1)
		}},
}

// slowGated gives FixtureGated the slow fixture's timeout, so that a
// handler that ignores its context returns late.
func slowGated(_ *suite, caps map[Fixture]middleware.Capability) {
	c := caps[FixtureGated]
	c.Timeout = slowTimeout
	caps[FixtureGated] = c
}

// resumedLate asks for an approval of req on FixtureGated, approves it and
// resumes the call, which must end TIMEOUT; it returns the resume's result
// and the approval's id.
func (s *suite) resumedLate(rule string, req Request) (Result, string) {
	s.Helper()
	r := s.call(FixtureGated, req, "")
	s.expect(rule, r, middleware.CodeApprovalRequired)
	id := r.Envelope.ApprovalID
	if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
		s.Fatal(err)
	}
	r = s.call(FixtureGated, req, id)
	s.expect(rule, r, middleware.CodeTimeout)
	return r, id
}

// wantLateSuccess checks that the approval id records a late success.
func (s *suite) wantLateSuccess(rule, id, what string) {
	s.Helper()
	if rec, err := s.eng.Get(s.Context(), id); err != nil || rec.Status != store.ApprovalCompleted || !rec.Outcome.Late || rec.Outcome.Code != middleware.CodeOK.String() {
		s.Errorf("%s: %s: %s %+v, %v", rule, what, rec.Status, rec.Outcome, err)
	}
}
