package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Unhandled is implemented by clients that can show what their framework's
// client reports for a procedure the server has no handler for, so that
// the rules of hidden calls can compare: a call a policy hides, or one on
// a surface its capability is not exposed on, must get exactly that.
// Without it those rules are skipped.
type Unhandled interface {
	// CallUnhandled calls f's procedure exactly as Call would, on a server
	// that has no handler for it (one started for the purpose, or the
	// same server with that one route removed), and returns what the
	// client saw.
	CallUnhandled(ctx context.Context, f Fixture, req Request) Result
}

// Surfaced is implemented by harnesses that know the surface their
// adapter's calls come in on: rpc for Connect, gRPC, gRPC-Web and Twirp,
// http for net/http routes, mcp for the MCP bridge's calls. The suite then
// checks that the adapter says exactly that; without it, any valid
// surface passes.
type Surfaced interface {
	Surface() middleware.Surface
}

// everywhere is the exposure the suite's fixtures have: every surface, so
// that every harness reaches them (MCP is opt-in).
var everywhere = []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceHTTP, middleware.SurfaceMCP}

// rulePolicy decides per fixture, by the procedure the harness serves it
// as; fixtures it does not name are allowed.
type rulePolicy struct {
	name    string
	h       Harness
	decide  map[Fixture]func() (middleware.PolicyDecision, error)
	mu      sync.Mutex
	surface []middleware.Surface // the surfaces of the calls it was asked about
}

func (p *rulePolicy) Name() string { return p.name }

func (p *rulePolicy) Decide(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	p.mu.Lock()
	p.surface = append(p.surface, in.Surface)
	p.mu.Unlock()
	for f, d := range p.decide {
		if p.h.Procedure(f) == in.Procedure {
			return d()
		}
	}
	return middleware.Allow(), nil
}

func decision(d middleware.PolicyDecision) func() (middleware.PolicyDecision, error) {
	return func() (middleware.PolicyDecision, error) { return d, nil }
}

// countingStore counts the calls the engine makes to the approval store.
type countingStore struct {
	store.ApprovalStore
	calls atomic.Int32
}

func (c *countingStore) Create(ctx context.Context, r store.ApprovalRequest) (store.ApprovalRecord, error) {
	c.calls.Add(1)
	return c.ApprovalStore.Create(ctx, r)
}

func (c *countingStore) Consume(ctx context.Context, id string, r store.ConsumeRequest) (store.ConsumedApproval, error) {
	c.calls.Add(1)
	return c.ApprovalStore.Consume(ctx, id, r)
}

// policySuite starts another server for a rule, its fixtures' capabilities
// changed by mutate (which may be nil), its engine judged by policies, its
// approvals counted.
func (s *suite) policySuite(mutate func(Fixture, *middleware.Capability), policies ...middleware.Policy) (*suite, *countingStore) {
	s.Helper()
	return s.policySuiteWith(nil, mutate, policies...)
}

// policySuiteWith is policySuite with opts added to the engine's options.
func (s *suite) policySuiteWith(opts []middleware.Option, mutate func(Fixture, *middleware.Capability), policies ...middleware.Policy) (*suite, *countingStore) {
	s.Helper()
	reg := middleware.NewRegistry()
	for f, c := range capabilities() {
		c.Exposure = everywhere
		if mutate != nil {
			mutate(f, &c)
		}
		reg.Register(s.h.Procedure(f), c)
	}
	rec := &agentsafetest.Recorder{}
	approvals := &countingStore{ApprovalStore: approvalstore.NewMemory()}
	opts = append([]middleware.Option{
		middleware.WithEventSink(rec),
		middleware.WithApprovalStore(approvals),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return suiteAgent, nil }),
		middleware.WithProtoFiles(nil),
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	for _, p := range policies {
		opts = append(opts, middleware.WithPolicy(p))
	}
	eng, err := middleware.New(reg, opts...)
	if err != nil {
		s.Fatalf("conformance: building the engine: %v", err)
	}
	out := &suite{T: s.T, h: s.h, eng: eng, rec: rec, runs: map[string][]middleware.Execution{}, started: map[string]chan struct{}{}, returned: map[string]chan struct{}{}}
	out.client = s.h.Start(s.T, eng, out.handle, out.stream)
	return out, approvals
}

// hiddenLikeAbsent checks that a hidden call of f got exactly what a call
// of a procedure with no handler gets, and left no trace of agentsafe on
// the wire.
func (s *suite) hiddenLikeAbsent(rule string, f Fixture, req Request, hidden Result) {
	s.Helper()
	if hidden.Envelope.ExecutionID != "" || hidden.EngineDetail || hidden.Response != nil {
		s.Errorf("%s: the client found an envelope %+v (agentsafe detail %t, response %v)", rule, hidden.Envelope, hidden.EngineDetail, hidden.Response)
	}
	for k := range hidden.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Agentsafe-") {
			s.Errorf("%s: header %s reached the client", rule, k)
		}
	}
	s.wantRuns(rule, req.ID, 0)
	u, ok := s.client.(Unhandled)
	if !ok {
		s.Skip("the harness's client cannot call a procedure with no handler (conformance.Unhandled)")
	}
	ctx, cancel := context.WithTimeout(s.Context(), patience)
	defer cancel()
	absent := u.CallUnhandled(ctx, f, req)
	if absent.Status == nil || hidden.Status == nil || *absent.Status != *hidden.Status || (absent.Err == nil) != (hidden.Err == nil) {
		s.Errorf("%s: the client decoded %s for the hidden call and %s for a procedure with no handler", rule, statusText(hidden), statusText(absent))
	}
}

func statusText(r Result) string {
	if r.Status == nil {
		return fmt.Sprintf("no status (err %v)", r.Err)
	}
	return fmt.Sprintf("%+v", *r.Status)
}

// policyRules are the rules of policies and exposure: every adapter must
// let the engine refuse a call, and write a hidden one as its framework
// writes a procedure that does not exist.
var policyRules = []adapterRule{
	{name: "Policy/hide wins over deny, deny over require_approval, require_approval over allow", check: func(s *suite) {
		const rule = "policies compose hide > deny > require_approval > allow, whatever their order"
		first := &rulePolicy{name: "first", h: s.h, decide: map[Fixture]func() (middleware.PolicyDecision, error){
			FixtureRead:            decision(middleware.RequireApproval("the first policy wants a look")),
			FixtureWrite:           decision(middleware.Deny("writes are frozen")),
			FixtureIdempotentWrite: decision(middleware.Hide()),
		}}
		second := &rulePolicy{name: "second", h: s.h, decide: map[Fixture]func() (middleware.PolicyDecision, error){
			FixtureRead:            decision(middleware.Allow()),
			FixtureWrite:           decision(middleware.RequireApproval("the second policy wants a look")),
			FixtureIdempotentWrite: decision(middleware.Deny("denied, but hidden first")),
		}}
		ps, approvals := s.policySuite(nil, second, first)
		req := ps.request(ModeOK)
		r := ps.call(FixtureRead, req, "")
		ps.expect(rule+" (require_approval over allow)", r, middleware.CodeApprovalRequired)
		req = ps.request(ModeOK)
		r = ps.call(FixtureWrite, req, "")
		ps.expect(rule+" (deny over require_approval)", r, middleware.CodePolicyDenied)
		if r.Envelope.Error.Message != "writes are frozen" || r.Envelope.Error.Retryable || !r.EngineDetail {
			s.Errorf("%s: a denial carries the policy's reason, is not retryable, and is the engine's outcome: %+v", rule, r.Envelope.Error)
		}
		ps.wantRuns(rule, req.ID, 0)
		before := approvals.calls.Load()
		req = ps.request(ModeOK)
		r = ps.call(FixtureIdempotentWrite, req, "")
		if r.Envelope.ExecutionID != "" || r.Err == nil || approvals.calls.Load() != before {
			s.Errorf("%s (hide over deny): the client found envelope %+v (err %v)", rule, r.Envelope, r.Err)
		}
		ps.wantRuns(rule, req.ID, 0)
		ps.expect(rule+" (allow)", ps.call(FixtureSlow, ps.request(ModeOK), ""), middleware.CodeOK)
	}},
	{name: "Policy/an error or a panic fails closed with POLICY_UNAVAILABLE", check: func(s *suite) {
		const rule = "a policy that errors or panics fails the call closed: POLICY_UNAVAILABLE, nothing runs"
		broken := &rulePolicy{name: "broken", h: s.h, decide: map[Fixture]func() (middleware.PolicyDecision, error){
			FixtureWrite: func() (middleware.PolicyDecision, error) {
				return middleware.Allow(), errors.New("the policy service is down")
			},
			FixtureRead: func() (middleware.PolicyDecision, error) { panic("conformance: policy bug") },
		}}
		ps, _ := s.policySuite(nil, broken)
		for _, f := range []Fixture{FixtureWrite, FixtureRead} {
			req := ps.request(ModeOK)
			r := ps.call(f, req, "")
			ps.expect(rule, r, middleware.CodePolicyUnavailable)
			ps.wantRuns(rule, req.ID, 0)
			if !r.Envelope.Error.Retryable {
				s.Errorf("%s: nothing ran, so re-invoking %s is safe: %+v", rule, f, r.Envelope.Error)
			}
		}
	}},
	{name: "Hidden/a hidden call gets exactly what a procedure with no handler gets", check: func(s *suite) {
		const rule = "a hidden call looks absent: the framework's not-found, no agentsafe headers, no store call"
		hide := &rulePolicy{name: "hide", h: s.h, decide: map[Fixture]func() (middleware.PolicyDecision, error){
			FixtureGated: decision(middleware.Hide()),
			FixtureRead:  decision(middleware.Hide()),
		}}
		ps, approvals := s.policySuite(nil, hide)
		for _, f := range []Fixture{FixtureGated, FixtureRead} {
			req := ps.request(ModeOK)
			ps.hiddenLikeAbsent(rule, f, req, ps.call(f, req, ""))
		}
		if n := approvals.calls.Load(); n != 0 {
			s.Errorf("%s: the approval store was called %d times for a hidden gated call", rule, n)
		}
	}},
	{name: "Exposure/the adapter says which surface a call came in on", check: func(s *suite) {
		const rule = "every adapter sets Call.Surface: rpc, http, or mcp for the bridge's calls"
		seen := &rulePolicy{name: "surface", h: s.h}
		ps, _ := s.policySuite(nil, seen)
		ps.call(FixtureRead, ps.request(ModeOK), "")
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if len(seen.surface) == 0 || !validSurface(seen.surface[0]) {
			s.Errorf("%s: the policy saw surfaces %v", rule, seen.surface)
			return
		}
		if h, ok := s.h.(Surfaced); ok && seen.surface[0] != h.Surface() {
			s.Errorf("%s: the call came in on %s, want %s", rule, seen.surface[0], h.Surface())
		}
	}},
	{name: "Exposure/a call on a surface the capability is not exposed on is hidden", check: func(s *suite) {
		const rule = "a capability is served only on the surfaces it is exposed on; elsewhere it looks absent"
		seen := &rulePolicy{name: "surface", h: s.h}
		probe, _ := s.policySuite(nil, seen)
		probe.call(FixtureRead, probe.request(ModeOK), "")
		seen.mu.Lock()
		if len(seen.surface) == 0 || !validSurface(seen.surface[0]) {
			seen.mu.Unlock()
			s.Fatalf("%s: the adapter does not say which surface the call came in on (%v)", rule, seen.surface)
		}
		surface := seen.surface[0]
		seen.mu.Unlock()
		ps, _ := s.policySuite(func(f Fixture, c *middleware.Capability) {
			if f == FixtureRead {
				c.Exposure = nil
				for _, e := range everywhere {
					if e != surface {
						c.Exposure = append(c.Exposure, e)
					}
				}
			}
		})
		req := ps.request(ModeOK)
		ps.hiddenLikeAbsent(rule, FixtureRead, req, ps.call(FixtureRead, req, ""))
		ps.expect(rule+": other capabilities are served", ps.call(FixtureWrite, ps.request(ModeOK), ""), middleware.CodeOK)
	}},
}

func validSurface(s middleware.Surface) bool {
	return s == middleware.SurfaceRPC || s == middleware.SurfaceHTTP || s == middleware.SurfaceMCP
}
