package conformance

import (
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// approvalLink is the approval URL function of the suite's engine for the
// rules about approval hints (middleware.WithApprovalURL).
func approvalLink(id string) string { return "https://approvals.conformance.test/approvals/" + id }

// hintRules are the rules about the approval hints: where a person
// decides an approval, and until when.
var hintRules = []adapterRule{
	{name: "Approval/APPROVAL_REQUIRED and APPROVAL_PENDING carry the approval URL and expiry",
		engine: []middleware.Option{middleware.WithApprovalURL(approvalLink)}, check: func(s *suite) {
			const rule = "an envelope asking for a decision carries the approval URL and expiry, in the envelope and the Agentsafe-Approval-Url and Agentsafe-Approval-Expires headers"
			req := s.request(ModeOK)
			r := s.call(FixtureGated, req, "")
			s.expect(rule, r, middleware.CodeApprovalRequired)
			id := r.Envelope.ApprovalID
			rec, err := s.eng.Get(s.Context(), id)
			if err != nil {
				s.Fatalf("%s: the approval %q: %v", rule, id, err)
			}
			s.hinted(rule, r, approvalLink(id), rec.ExpiresAt)
			r = s.call(FixtureGated, req, id)
			s.expect(rule, r, middleware.CodeApprovalPending)
			s.hinted(rule+" (APPROVAL_PENDING)", r, approvalLink(id), rec.ExpiresAt)

			if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
				s.Fatal(err)
			}
			r = s.call(FixtureGated, req, id)
			s.expect(rule, r, middleware.CodeOK)
			s.hinted("only an envelope asking for a decision carries the hints", r, "", time.Time{})
			s.wantRuns(rule, req.ID, 1)
		}},
}

// hinted checks the approval hints of r as its client decoded them (the
// envelope) and as they travel in the headers, to the wire's precision
// (RFC 3339 seconds). An empty url and zero expires want no hints.
func (s *suite) hinted(rule string, r Result, url string, expires time.Time) {
	s.Helper()
	want := ""
	if !expires.IsZero() {
		want = expires.UTC().Format(time.RFC3339)
	}
	got := ""
	if !r.Envelope.ExpiresAt.IsZero() {
		got = r.Envelope.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if r.Envelope.ApprovalURL != url || got != want {
		s.Errorf("%s: the envelope carries URL %q expiring %q, want %q expiring %q", rule, r.Envelope.ApprovalURL, got, url, want)
	}
	if h, e := r.Header.Get(adapter.HeaderApprovalURL), r.Header.Get(adapter.HeaderApprovalExpires); h != url || e != want {
		s.Errorf("%s: the headers say %s: %q and %s: %q, want %q and %q", rule, adapter.HeaderApprovalURL, h, adapter.HeaderApprovalExpires, e, url, want)
	}
}
