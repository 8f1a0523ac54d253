package conformance

import (
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// inlineRules are what Inline changes (SPEC §3), in place of the rules
// about abandoned attempts: they run only with Inline capabilities (the
// approval's is among outcomeRules).
var inlineRules = []adapterRule{
	{name: "Timeout/an Inline handler that ignores its context holds the call until it returns", variant: inlineOnly, check: func(s *suite) {
		const rule = "an Inline attempt is never abandoned: the call answers when the handler returns, TIMEOUT, its late result discarded, reported as capability.deadline_overrun and never as abandoned_result"
		req := s.request(ModeIgnore)
		start := time.Now()
		r := s.call(FixtureSlow, req, "")
		took := time.Since(start)
		s.expect(rule, r, middleware.CodeTimeout)
		if took < slowTimeout+lateBy {
			s.Errorf("%s: the call took %s, less than the handler's %s: the attempt was abandoned", rule, took, slowTimeout+lateBy)
		}
		select {
		case <-s.returned[req.ID]:
		default:
			s.Errorf("%s: the call was answered before its handler returned", rule)
		}
		if r.Response != nil {
			s.Errorf("%s: the late result reached the client: %+v", rule, r.Response)
		}
		s.final(r.Envelope.ExecutionID)
		var types []middleware.EventType
		var overrun middleware.Event
		for _, e := range s.rec.Execution(r.Envelope.ExecutionID) {
			types = append(types, e.Type)
			if e.Type == middleware.EventDeadlineOverrun {
				overrun = e
			}
		}
		n := len(types)
		if n < 2 || types[n-2] != middleware.EventDeadlineOverrun || types[n-1] != middleware.EventCancelled {
			s.Errorf("%s: events %v, want capability.deadline_overrun right before the final capability.cancelled, and nothing after it", rule, types)
		}
		// The handler returned lateBy after its deadline; the grace is 100ms.
		if overrun.Attempt != 1 || overrun.Duration < lateBy/2 {
			s.Errorf("%s: deadline_overrun says attempt %d overran by %s; want attempt 1, by about %s", rule, overrun.Attempt, overrun.Duration, lateBy)
		}
	}},
	{name: "Keys/an Inline write's late result is stored for its key at once", variant: inlineOnly, results: true, check: func(s *suite) {
		const rule = "an Inline execution stores its late result for the caller's key when it finalizes, never in doubt: a repeat replays it"
		req := s.request(ModeIgnore)
		first, r := s.callTwice(rule, FixtureWrite, req, "late", middleware.CodeTimeout, middleware.CodeOK)
		s.replayOf(rule, r, first)
		if r.Response.ID != req.ID {
			s.Errorf("%s: the replay carries the late response: %+v", rule, r.Response)
		}
		s.wantRuns(rule, req.ID, 1)
	}},
}
