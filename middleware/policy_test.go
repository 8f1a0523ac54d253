package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// policy is a test policy: a name and a function.
type policy struct {
	name   string
	decide func(ctx context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error)
}

func (p policy) Name() string { return p.name }
func (p policy) Decide(ctx context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return p.decide(ctx, in)
}

// always is a policy that decides d for every call.
func always(name string, d middleware.PolicyDecision) policy {
	return policy{name, func(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) { return d, nil }}
}

// countingStore counts every call the engine makes to its approval store.
type countingStore struct {
	store.ApprovalStore
	calls atomic.Int32
}

func (s *countingStore) Create(ctx context.Context, r store.ApprovalRequest) (store.ApprovalRecord, error) {
	s.calls.Add(1)
	return s.ApprovalStore.Create(ctx, r)
}

func (s *countingStore) Consume(ctx context.Context, id string, r store.ConsumeRequest) (store.ConsumedApproval, error) {
	s.calls.Add(1)
	return s.ApprovalStore.Consume(ctx, id, r)
}

func (s *countingStore) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	s.calls.Add(1)
	return s.ApprovalStore.Get(ctx, id)
}

// policied builds an engine with one write capability (cap c), a memory
// approval store behind a counter, and the policies given.
func policied(t *testing.T, c middleware.Capability, policies ...middleware.Policy) (*fixture, *countingStore) {
	t.Helper()
	st := &countingStore{ApprovalStore: approvalstore.NewMemory()}
	opts := []middleware.Option{middleware.WithApprovalStore(st), middleware.WithActor(actorOf)}
	for _, p := range policies {
		opts = append(opts, middleware.WithPolicy(p))
	}
	return newFixture(t, procRefund, c, opts...), st
}

var plainWrite = middleware.Capability{SideEffect: middleware.SideEffectWrite}

// runRefund makes one call of the refund as the agent, over surface s.
func runRefund(f *fixture, s middleware.Surface, in adapter.Input) (middleware.Envelope, error, int) {
	runs := 0
	_, env, err := adapter.Execute(as(f.t.Context(), agent), adapter.Resolve(f.eng, procRefund),
		adapter.Call[any]{Input: in, Surface: s}, func(context.Context) (any, error) { runs++; return "refunded", nil })
	return env, err, runs
}

func TestPolicyPrecedenceIsHideDenyRequireApprovalAllow(t *testing.T) {
	allow, require := middleware.Allow(), middleware.RequireApproval("a large refund")
	deny, hide := middleware.Deny("refunds are closed today"), middleware.Hide()
	for _, tc := range []struct {
		name      string
		decisions []middleware.PolicyDecision
		want      middleware.Code
	}{
		{"none", nil, middleware.CodeOK},
		{"allow", []middleware.PolicyDecision{allow, allow}, middleware.CodeOK},
		{"require approval over allow", []middleware.PolicyDecision{allow, require}, middleware.CodeApprovalRequired},
		{"deny over require approval", []middleware.PolicyDecision{require, deny}, middleware.CodePolicyDenied},
		{"deny over require approval, either order", []middleware.PolicyDecision{deny, require, allow}, middleware.CodePolicyDenied},
		{"hide over deny", []middleware.PolicyDecision{deny, hide}, middleware.CodeCapabilityNotFound},
		{"hide over everything", []middleware.PolicyDecision{hide, deny, require, allow}, middleware.CodeCapabilityNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []middleware.Policy
			for i, d := range tc.decisions {
				ps = append(ps, always(string(rune('a'+i)), d))
			}
			f, _ := policied(t, plainWrite, ps...)
			env, err, runs := runRefund(f, middleware.SurfaceRPC, refund)
			wantCode(t, env, err, tc.want)
			if (runs == 1) != (tc.want == middleware.CodeOK) {
				t.Fatalf("the handler ran %d times on %s", runs, tc.want)
			}
			if hidden := adapter.Hidden(err); hidden != (tc.want == middleware.CodeCapabilityNotFound) {
				t.Fatalf("adapter.Hidden = %t on %s", hidden, tc.want)
			}
		})
	}
}

func TestADeniedCallCarriesTheReasonAndRunsNothing(t *testing.T) {
	f, st := policied(t, plainWrite, always("refund-freeze", middleware.Deny("refunds are frozen until Monday")))
	env, err, runs := runRefund(f, middleware.SurfaceRPC, refund)
	wantCode(t, env, err, middleware.CodePolicyDenied)
	if runs != 0 || st.calls.Load() != 0 || env.Error.Message != "refunds are frozen until Monday" || env.Error.Retryable {
		t.Fatalf("runs %d, store calls %d, envelope %+v", runs, st.calls.Load(), env.Error)
	}
	final := f.final(env.ExecutionID)
	if final.Type != middleware.EventFailed || final.Code != middleware.CodePolicyDenied || !strings.Contains(final.Error, `"refund-freeze"`) {
		t.Errorf("final event %+v: the trail names the policy that denied", final)
	}
}

func TestAPolicyErrorOrPanicFailsClosed(t *testing.T) {
	for name, p := range map[string]policy{
		"error": {"limits", func(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
			return middleware.Allow(), errors.New("the limits service is down")
		}},
		"panic": {"limits", func(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
			panic("limits: nil map")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			// An allowing policy after it changes nothing: closed is closed.
			f, st := policied(t, plainWrite, p, always("open", middleware.Allow()))
			env, err, runs := runRefund(f, middleware.SurfaceRPC, refund)
			wantCode(t, env, err, middleware.CodePolicyUnavailable)
			if runs != 0 || st.calls.Load() != 0 || !env.Error.Retryable {
				t.Fatalf("runs %d, store calls %d, envelope %+v: nothing ran, so re-invoking is safe", runs, st.calls.Load(), env.Error)
			}
		})
	}
}

func TestAHiddenCallLooksAbsentAndTouchesNoStore(t *testing.T) {
	gatedWrite := middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}}
	f, st := policied(t, gatedWrite, always("agents-never-see-refunds", middleware.Hide()))
	env, err, runs := runRefund(f, middleware.SurfaceRPC, refund)
	if !adapter.Hidden(err) || runs != 0 || st.calls.Load() != 0 {
		t.Fatalf("Hidden %t, runs %d, store calls %d: a hidden gated call must not even ask for an approval", adapter.Hidden(err), runs, st.calls.Load())
	}
	if _, own := adapter.HandlerError(err); own || adapter.CarriesDetail(err) && env.ApprovalID != "" {
		t.Fatalf("a hidden call is no handler error and requests no approval: %+v", env)
	}
	final := f.final(env.ExecutionID)
	if final.Code != middleware.CodeCapabilityNotFound || !strings.Contains(final.Error, `"agents-never-see-refunds"`) {
		t.Errorf("final event %+v: operators see which policy hid the call", final)
	}
}

func TestACallOnAnUnexposedSurfaceIsHidden(t *testing.T) {
	asked := 0
	counting := policy{"counting", func(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
		asked++
		return middleware.Allow(), nil
	}}
	for _, tc := range []struct {
		name     string
		exposure []middleware.Surface
		surface  middleware.Surface
		hidden   bool
	}{
		{"the default serves rpc", nil, middleware.SurfaceRPC, false},
		{"the default serves http", nil, middleware.SurfaceHTTP, false},
		{"MCP is opt-in", nil, middleware.SurfaceMCP, true},
		{"listed mcp", []middleware.Surface{middleware.SurfaceMCP}, middleware.SurfaceMCP, false},
		{"mcp only hides rpc", []middleware.Surface{middleware.SurfaceMCP}, middleware.SurfaceRPC, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = 0
			c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: tc.exposure}
			f, st := policied(t, c, counting)
			env, err, runs := runRefund(f, tc.surface, refund)
			if adapter.Hidden(err) != tc.hidden || (runs == 0) != tc.hidden {
				t.Fatalf("Hidden %t, runs %d (err %v)", adapter.Hidden(err), runs, err)
			}
			if tc.hidden && (asked != 0 || st.calls.Load() != 0 || env.Attempts != 0) {
				t.Fatalf("an unexposed surface is answered before any policy or store: asked %d, store %d", asked, st.calls.Load())
			}
		})
	}
	t.Run("a malformed approval header does not tell it apart", func(t *testing.T) {
		f, _ := policied(t, plainWrite)
		_, _, err := execute(f.eng, adapter.WithSurface(t.Context(), middleware.SurfaceMCP), call{Procedure: procRefund, ApprovalID: "apr_nope"}, func(context.Context) (any, error) { return nil, nil })
		if !adapter.Hidden(err) {
			t.Fatalf("err %v: exposure is decided before the cheap checks", err)
		}
	})
}

func TestTheSurfaceMarkOverridesTheAdapterAndStaysOffTheHandler(t *testing.T) {
	var seen []middleware.Surface
	recording := policy{"recording", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		if in.Listing {
			return middleware.Allow(), nil // asked first as at a listing (stage 2.0); the call's own ask follows
		}
		seen = append(seen, in.Surface)
		return middleware.Allow(), nil
	}}
	f, _ := policied(t, middleware.Capability{SideEffect: middleware.SideEffectRead, Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceMCP}}, recording)
	ctx := adapter.WithSurface(as(t.Context(), agent), middleware.SurfaceMCP)
	var inner middleware.Surface
	_, _, err := adapter.Execute(ctx, adapter.Resolve(f.eng, procRefund), adapter.Call[any]{Surface: middleware.SurfaceRPC}, func(ctx context.Context) (any, error) {
		// A call the handler makes in process on its context is its own.
		_, _, err := adapter.Execute(ctx, adapter.Resolve(f.eng, procRefund), adapter.Call[any]{Surface: middleware.SurfaceRPC}, func(context.Context) (any, error) { return nil, nil })
		inner = seen[len(seen)-1]
		return nil, err
	})
	if err != nil || !slices.Equal(seen, []middleware.Surface{middleware.SurfaceMCP, middleware.SurfaceRPC}) || inner != middleware.SurfaceRPC {
		t.Fatalf("err %v, policies saw surfaces %v: the mark is the bridge's call's alone", err, seen)
	}
}

func TestAPolicyReadsOnlyInputThatBinds(t *testing.T) {
	var read []byte
	reader := policy{"limits", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		doc, err := in.Input()
		if err != nil {
			return middleware.Allow(), err
		}
		read = doc
		return middleware.Allow(), nil
	}}
	// No sink, no approval: nothing but the policy needs the digest.
	rec := newFixtureNoSink(t, plainWrite, reader)
	_, _, err := execute(rec, as(t.Context(), agent), call{Procedure: procRefund, Input: adapter.JSONInput([]byte(`{"amount":1,"Amount":1500000}`))}, func(context.Context) (any, error) { return nil, nil })
	if middleware.CodeOf(err) != middleware.CodeInvalidArgument || read != nil {
		t.Fatalf("code %s, the policy read %q: a policy never judges a document the digest refuses", middleware.CodeOf(err), read)
	}
	_, _, err = execute(rec, as(t.Context(), agent), call{Procedure: procRefund, Input: refund}, func(context.Context) (any, error) { return nil, nil })
	if err != nil || string(read) != `{"order":"42","amount":120}` {
		t.Fatalf("err %v, the policy read %q", err, read)
	}
}

// lazyInput counts the digests the engine computes.
type lazyInput struct {
	adapter.Input
	digests *atomic.Int32
}

func (l lazyInput) Digest(procedure string) (string, error) {
	l.digests.Add(1)
	return l.Input.Digest(procedure)
}

func TestPolicyInputIsBoundOnlyWhenRead(t *testing.T) {
	var digests atomic.Int32
	in := lazyInput{refund, &digests}
	blind := newFixtureNoSink(t, plainWrite, always("blind", middleware.Allow()))
	if _, _, err := execute(blind, t.Context(), call{Procedure: procRefund, Input: in}, func(context.Context) (any, error) { return nil, nil }); err != nil || digests.Load() != 0 {
		t.Fatalf("err %v, %d digests: a policy that does not read the input costs no digest", err, digests.Load())
	}
	var got string
	reader := newFixtureNoSink(t, plainWrite, policy{"digest", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		var err error
		got, err = in.Digest()
		return middleware.Allow(), err
	}})
	if _, _, err := execute(reader, t.Context(), call{Procedure: procRefund, Input: in}, func(context.Context) (any, error) { return nil, nil }); err != nil || digests.Load() != 1 || !strings.HasPrefix(got, "sha256:") {
		t.Fatalf("err %v, %d digests, digest %q", err, digests.Load(), got)
	}
}

// newFixtureNoSink is an engine without sinks (so nothing binds the input
// unless asked) with the policies given.
func newFixtureNoSink(t *testing.T, c middleware.Capability, policies ...middleware.Policy) *middleware.Engine {
	t.Helper()
	opts := []middleware.Option{middleware.WithProtoFiles(nil), middleware.WithLogger(discard), middleware.WithActor(actorOf), middleware.WithApprovalStore(approvalstore.NewMemory())}
	for _, p := range policies {
		opts = append(opts, middleware.WithPolicy(p))
	}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, c), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func TestPoliciesRequiringApprovalGateWithEveryReason(t *testing.T) {
	f, st := policied(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}},
		always("large", middleware.RequireApproval("over 1000")), always("new-customer", middleware.RequireApproval("a first refund")))
	env, err, runs := runRefund(f, middleware.SurfaceRPC, refund)
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	rec, gerr := st.Get(t.Context(), env.ApprovalID)
	want := []string{"the capability always requires approval", "over 1000", "a first refund"}
	if runs != 0 || gerr != nil || !slices.Equal(rec.Reasons, want) {
		t.Fatalf("runs %d, record reasons %q (%v), want %q", runs, rec.Reasons, gerr, want)
	}
}

func TestAPolicyGatesACallNothingElseBound(t *testing.T) {
	eng := newFixtureNoSink(t, plainWrite, always("gate", middleware.RequireApproval("policy says so")))
	_, env, err := execute(eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refund}, func(context.Context) (any, error) { return nil, nil })
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	_, env, err = execute(eng, as(t.Context(), agent), call{Procedure: procRefund, Input: adapter.JSONInput([]byte(`{"a":1,"a":2}`))}, func(context.Context) (any, error) { return nil, nil })
	wantCode(t, env, err, middleware.CodeInvalidArgument)
}

func TestPolicyNamesAreRequiredAndUnique(t *testing.T) {
	for name, opts := range map[string][]middleware.Option{
		"empty":    {middleware.WithPolicy(always("", middleware.Allow()))},
		"repeated": {middleware.WithPolicy(always("limits", middleware.Allow())), middleware.WithPolicy(always("limits", middleware.Hide()))},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.New(middleware.NewRegistry().Register(procRefund, plainWrite), append(opts, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))...)
			if err == nil || !strings.Contains(err.Error(), "WithPolicy") {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

func TestListingAsksEveryPolicyWithoutInput(t *testing.T) {
	exposed := middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceMCP}}
	var inputs []string
	probe := func(d middleware.PolicyDecision, err error) policy {
		return policy{"probe", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
			doc, _ := in.Input()
			dig, _ := in.Digest()
			if !in.Listing || doc != nil || dig != "" || in.Surface != middleware.SurfaceMCP || in.Actor.ID != agent.ID || in.Procedure != procRefund {
				return middleware.Allow(), errors.New("not a listing as promised")
			}
			inputs = append(inputs, string(doc))
			return d, err
		}}
	}
	conditionAsked := false
	condition := middleware.WithApprovalCondition(func(context.Context, middleware.ApprovalQuery) (bool, string, error) {
		conditionAsked = true
		return false, "", errors.New("a condition needs the input")
	})
	for _, tc := range []struct {
		name   string
		c      middleware.Capability
		p      policy
		listed bool
	}{
		{"allowed", exposed, probe(middleware.Allow(), nil), true},
		{"denied calls are still listed", exposed, probe(middleware.Deny("no"), nil), true},
		{"hidden", exposed, probe(middleware.Hide(), nil), false},
		{"an error leaves it out", exposed, probe(middleware.Allow(), errors.New("down")), false},
		{"not exposed on mcp", plainWrite, probe(middleware.Allow(), nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, tc.c), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
				middleware.WithActor(actorOf), middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithPolicy(tc.p), condition)
			if err != nil {
				t.Fatal(err)
			}
			if got := adapter.Resolve(eng, procRefund).Listed(as(t.Context(), agent), middleware.SurfaceMCP); got != tc.listed {
				t.Fatalf("Listed = %t, want %t", got, tc.listed)
			}
			if conditionAsked {
				t.Fatal("an approval condition is never asked at a listing: it only gates calls")
			}
		})
	}
}

func TestAnExposureNamesKnownSurfaces(t *testing.T) {
	_, err := middleware.New(middleware.NewRegistry().Register(procRefund, middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceMCP, 9}}),
		middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err == nil || !strings.Contains(err.Error(), "Exposure") || !strings.Contains(err.Error(), procRefund) {
		t.Fatalf("New: %v", err)
	}
}

func TestAnInputThatDoesNotBindIsRefusedOnlyWhenAPolicyReadsIt(t *testing.T) {
	notIJSON := adapter.JSONInput([]byte(`{"a":1,"a":2}`))
	// A sink binds every input it can, for its events; a policy that never
	// reads the input does not make an unbindable one a refusal.
	blind, _ := policied(t, plainWrite, always("blind", middleware.Allow()))
	if env, err, runs := runRefund(blind, middleware.SurfaceRPC, notIJSON); err != nil || runs != 1 {
		t.Fatalf("%+v %v, runs %d", env, err, runs)
	}
	reader, _ := policied(t, plainWrite, policy{"reader", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		_, err := in.Input()
		return middleware.Allow(), err
	}})
	env, err, runs := runRefund(reader, middleware.SurfaceRPC, notIJSON)
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if runs != 0 {
		t.Fatal("the handler ran")
	}
}

// BenchmarkPolicies is what policies cost a governed call: none, one that
// decides without the input, one that reads it (the I-JSON check, the
// digest and the JSON it reads). Compare the sub-benchmarks of one run.
func BenchmarkPolicies(b *testing.B) {
	in := adapter.JSONInput([]byte(`{"order":"42","amountCents":150000,"reason":"damaged in transit"}`))
	reader := policy{"reader", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		_, err := in.Input()
		return middleware.Allow(), err
	}}
	for _, bc := range []struct {
		name     string
		policies []middleware.Option
	}{
		{"none", nil},
		{"one-allow", []middleware.Option{middleware.WithPolicy(always("allow", middleware.Allow()))}},
		{"one-reading-input", []middleware.Option{middleware.WithPolicy(reader)}},
	} {
		eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, plainWrite),
			append(bc.policies, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))...)
		if err != nil {
			b.Fatal(err)
		}
		c := call{Procedure: procRefund, Input: in}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink, _, _ = execute(eng, context.Background(), c, noop)
			}
		})
	}
}

// TestAnExposureIsReadOnceAndNoReaderChangesIt: the registry is read once,
// and neither the slice registered nor the one a policy or Capabilities
// sees can change where a capability is served.
func TestAnExposureIsReadOnceAndNoReaderChangesIt(t *testing.T) {
	exposure := []middleware.Surface{middleware.SurfaceRPC}
	meddling := policy{"meddling", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		if len(in.Capability.Exposure) > 0 {
			in.Capability.Exposure[0] = middleware.SurfaceHTTP
		}
		return middleware.Allow(), nil
	}}
	f, _ := policied(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: exposure}, meddling)
	exposure[0] = middleware.SurfaceHTTP // after New: no effect
	for _, c := range f.eng.Capabilities() {
		c.Exposure[0] = middleware.SurfaceHTTP
	}
	for range 2 { // the policy meddles on the first call
		if _, err, runs := runRefund(f, middleware.SurfaceRPC, refund); err != nil || runs != 1 {
			t.Fatalf("a call on rpc: err %v, runs %d", err, runs)
		}
	}
	if _, err, _ := runRefund(f, middleware.SurfaceHTTP, refund); !adapter.Hidden(err) {
		t.Fatalf("a call on http, where the capability was never exposed: err %v", err)
	}
}

// TestAStreamOnAnUnexposedSurfaceIsHiddenBeforeAnyRefusal: a stream the
// engine could not know streams, gated, refused on a surface it is not
// served on would tell the procedure exists.
func TestAStreamOnAnUnexposedSurfaceIsHiddenBeforeAnyRefusal(t *testing.T) {
	mcpOnly := plainWriteGate
	mcpOnly.Exposure = []middleware.Surface{middleware.SurfaceMCP}
	f, st := policied(t, mcpOnly)
	ran := false
	_, err := adapter.ExecuteStream(as(t.Context(), agent), adapter.Resolve(f.eng, procRefund), adapter.Call[struct{}]{Surface: middleware.SurfaceRPC},
		func(context.Context) error { ran = true; return nil })
	if !adapter.Hidden(err) || ran || st.calls.Load() != 0 {
		t.Fatalf("err %v, ran %t, store calls %d: an unexposed stream looks absent", err, ran, st.calls.Load())
	}
}

// TestACallerWhoLeftWhileAPolicyDecidedIsCancelled: a policy that fails
// because the caller's context ended did not fail the engine: the caller
// left, and re-invoking is theirs to decide.
func TestACallerWhoLeftWhileAPolicyDecidedIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(as(t.Context(), agent))
	defer cancel()
	leaving := policy{"remote-check", func(ctx context.Context, _ middleware.PolicyInput) (middleware.PolicyDecision, error) {
		cancel() // the caller leaves while the policy asks its service
		<-ctx.Done()
		return middleware.Allow(), ctx.Err()
	}}
	f, _ := policied(t, plainWrite, leaving)
	runs := 0
	_, env, err := adapter.Execute(ctx, adapter.Resolve(f.eng, procRefund), adapter.Call[any]{Input: refund, Surface: middleware.SurfaceRPC},
		func(context.Context) (any, error) { runs++; return nil, nil })
	wantCode(t, env, err, middleware.CodeCancelled)
	if runs != 0 || f.final(env.ExecutionID).Type != middleware.EventCancelled {
		t.Fatalf("runs %d, final event %+v", runs, f.final(env.ExecutionID))
	}
}

// TestAHiddenCallIsNeverAReplay: a caller key whose result is stored does
// not tell a procedure a policy now hides from its caller: the policy is
// asked before the result store.
func TestAHiddenCallIsNeverAReplay(t *testing.T) {
	var hiding atomic.Bool
	p := policy{"later-hidden", func(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
		if hiding.Load() {
			return middleware.Hide(), nil
		}
		return middleware.Allow(), nil
	}}
	r := oneResult(t, writeCap, middleware.WithPolicy(p))
	c := keyedCall{key: "order-42-refund"}
	if _, _, err := r.call(t.Context(), c, refunded); err != nil {
		t.Fatal(err)
	}
	hiding.Store(true)
	v, env, err := r.call(t.Context(), c, refunded)
	if !adapter.Hidden(err) || v != nil || env.Replayed {
		t.Fatalf("a repeat of a stored key, now hidden: %v, %v, %+v", v, err, env)
	}
	r.wantRuns("a hidden call is never a replay", 1)
}

// A policy that read an input which does not bind refuses the call; the
// caller is told which value, but events carry no payload, ever.
func TestAnUnboundInputAPolicyReadStaysOutOfEvents(t *testing.T) {
	reader, _ := policied(t, plainWrite, policy{"reader", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		_, err := in.Input()
		return middleware.Allow(), err
	}})
	env, err, runs := runRefund(reader, middleware.SurfaceRPC, adapter.JSONInput([]byte(`{"card":41111111111111111111}`)))
	wantCode(t, env, err, middleware.CodeInvalidArgument)
	if runs != 0 {
		t.Fatal("the handler ran")
	}
	for _, e := range reader.events(env.ExecutionID) {
		if strings.Contains(fmt.Sprintf("%+v", e), "41111111111111111111") {
			t.Errorf("event %s carries the input's value: %+v", e.Type, e)
		}
	}
}
