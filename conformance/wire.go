package conformance

import (
	"slices"
	"strconv"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// wireRules are the rules about how an engine-decided failure reaches the
// wire: the framework's status code, the Agentsafe-Code and
// Agentsafe-Retryable headers, and agentsafe's own detail.
var wireRules = []adapterRule{
	{name: "Wire/an engine's failure carries Agentsafe-Code, Agentsafe-Retryable and its status", check: func(s *suite) {
		const rule = "on error, the agentsafe code and retryable flag travel as the Agentsafe-Code and Agentsafe-Retryable headers, the status is the table's and the error carries agentsafe's detail"
		for _, tc := range []struct {
			what      string
			f         Fixture
			mode      Mode
			code      middleware.Code
			status    uint32 // 0: not checked (net/http has no canonical code for it)
			retryable bool
		}{
			{"a read's timeout", FixtureSlow, ModeHang, middleware.CodeTimeout, StatusDeadlineExceeded, true},
			// A timed-out write is not safe to re-invoke: it would run again under a new key.
			{"a write's timeout", FixtureWrite, ModeHang, middleware.CodeTimeout, StatusDeadlineExceeded, false},
			{"a concealed plain error", FixtureWrite, ModeFail, middleware.CodeExecutionFailed, StatusInternal, false},
			{"a panic", FixtureRead, ModePanic, middleware.CodeExecutionFailed, StatusInternal, false},
			{"an approval required", FixtureGated, ModeOK, middleware.CodeApprovalRequired, 0, false},
		} {
			r := s.call(tc.f, s.request(tc.mode), "")
			s.expect(rule+": "+tc.what, r, tc.code)
			if got := r.Header.Get(adapter.HeaderCode); got != tc.code.String() {
				s.Errorf("%s: %s: %s header %q, want %q", rule, tc.what, adapter.HeaderCode, got, tc.code)
			}
			if got := r.Header.Get(adapter.HeaderRetryable); got != strconv.FormatBool(tc.retryable) {
				s.Errorf("%s: %s: %s header %q, want %t", rule, tc.what, adapter.HeaderRetryable, got, tc.retryable)
			}
			if r.Envelope.Error.Retryable != tc.retryable {
				s.Errorf("%s: %s: the envelope's retryable is %t, want %t", rule, tc.what, r.Envelope.Error.Retryable, tc.retryable)
			}
			if r.Header.Get(adapter.HeaderExecutionID) != r.Envelope.ExecutionID {
				s.Errorf("%s: %s: %s header %q, envelope %q", rule, tc.what, adapter.HeaderExecutionID, r.Header.Get(adapter.HeaderExecutionID), r.Envelope.ExecutionID)
			}
			if tc.code == middleware.CodeApprovalRequired && (r.Envelope.ApprovalID == "" || r.Header.Get(adapter.HeaderApprovalID) != r.Envelope.ApprovalID) {
				s.Errorf("%s: %s: %s header %q, envelope %q", rule, tc.what, adapter.HeaderApprovalID, r.Header.Get(adapter.HeaderApprovalID), r.Envelope.ApprovalID)
			}
			if !r.EngineDetail {
				s.Errorf("%s: %s: the error carries no agentsafe detail", rule, tc.what)
			}
			if tc.status != 0 && (r.Status == nil || r.Status.Code != tc.status) {
				s.Errorf("%s: %s: the client decoded status %+v, want code %d", rule, tc.what, r.Status, tc.status)
			}
		}
	}},
	{name: "Concurrency/concurrent calls each get their own execution's envelope, headers and response", check: func(s *suite) {
		const rule = "each execution's envelope, headers and response reach its own caller, however many run at once"
		const calls = 16
		reqs, results := make([]Request, calls), make([]Result, calls)
		for i := range reqs {
			reqs[i] = s.request(ModeHeaders) // attempt 1 fails after writing a header, attempt 2 succeeds
		}
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() { results[i] = s.call(FixtureRead, reqs[i], "") })
		}
		wg.Wait()
		ids := map[string]bool{}
		for i, r := range results {
			s.expect(rule, r, middleware.CodeOK)
			runs := s.wantRuns(rule, reqs[i].ID, 2)
			id := r.Envelope.ExecutionID
			if r.Response.ID != reqs[i].ID || r.Response.ExecutionID != id || runs[1].ID != id || r.Header.Get(adapter.HeaderExecutionID) != id ||
				r.Header.Get(adapter.HeaderAttempts) != "2" || !slices.Equal(r.Header.Values("X-Conformance-Attempt"), []string{"2"}) {
				s.Errorf("%s: call %s got response %+v, envelope %s, headers %v; its handler ran in %s", rule, reqs[i].ID, r.Response, id, r.Header, runs[1].ID)
			}
			if ids[id] {
				s.Errorf("%s: two calls got execution %s", rule, id)
			}
			ids[id] = true
		}
	}},
}
