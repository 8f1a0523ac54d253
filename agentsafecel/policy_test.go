package agentsafecel_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafecel"
	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

const (
	refund = "/shop.v1.Orders/Refund"
	cancel = "/shop.v1.Orders/Cancel"
)

var (
	agent = middleware.Actor{ID: "agent-7", Tenant: "shop", Kind: "agent", OnBehalfOf: []string{"alice"}}
	clerk = middleware.Actor{ID: "clerk-3", Tenant: "shop", Kind: "user"}
)

type actorKey struct{}

func actorOf(ctx context.Context) (middleware.Actor, error) {
	a, _ := ctx.Value(actorKey{}).(middleware.Actor)
	return a, nil
}

var rules = []agentsafecel.Rule{
	{When: `actor.kind == "agent" && procedure.endsWith("/Cancel")`, Then: middleware.Hide()},
	{When: `has(input.amount) && input.amount > 5000`, Then: middleware.Deny("over the limit")},
	{When: `has(input.amount) && input.amount > 1000`, Then: middleware.RequireApproval("a large refund")},
	{When: `"alice" in actor.onBehalfOf && capability.writeLike`, Then: middleware.RequireApproval("alice's calls are reviewed")},
}

func registry() *middleware.Registry {
	return middleware.NewRegistry().
		Register(refund, middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceMCP}}).
		Register(cancel, middleware.Capability{SideEffect: middleware.SideEffectDestructive, Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceMCP}})
}

func call(eng *middleware.Engine, who middleware.Actor, proc string, in adapter.Input) (middleware.Envelope, error) {
	ctx := context.WithValue(context.Background(), actorKey{}, who)
	_, env, err := adapter.Execute(ctx, adapter.Resolve(eng, proc), adapter.Call[any]{Input: in, Surface: adapter.SurfaceRPC},
		func(context.Context) (any, error) { return "done", nil })
	return env, err
}

func TestRulesComposeAsPoliciesDo(t *testing.T) {
	p, err := agentsafecel.New("support-rules", rules...)
	if err != nil {
		t.Fatal(err)
	}
	eng := agentsafetest.NewEngine(t, registry(), middleware.WithProtoFiles(nil), middleware.WithActor(actorOf), middleware.WithPolicy(p))
	for _, tc := range []struct {
		name    string
		who     middleware.Actor
		proc    string
		input   string
		want    middleware.Code
		reasons []string
	}{
		{"a small refund by a clerk", clerk, refund, `{"amount": 10}`, middleware.CodeOK, nil},
		{"a large refund", clerk, refund, `{"amount": 2000}`, middleware.CodeApprovalRequired, []string{"a large refund"}},
		{"every approval reason", agent, refund, `{"amount": 2000}`, middleware.CodeApprovalRequired, []string{"a large refund; alice's calls are reviewed"}},
		{"deny over require approval", clerk, refund, `{"amount": 9000}`, middleware.CodePolicyDenied, nil},
		{"hide over everything", agent, cancel, `{"amount": 9000}`, middleware.CodeCapabilityNotFound, nil},
		{"a clerk sees the cancel", clerk, cancel, `{}`, middleware.CodeOK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := call(eng.Engine, tc.who, tc.proc, adapter.JSONInput([]byte(tc.input)))
			if got := middleware.CodeOf(err); got != tc.want {
				t.Fatalf("code %s, want %s (%v)", got, tc.want, err)
			}
			if tc.want == middleware.CodeCapabilityNotFound && !adapter.Hidden(err) {
				t.Fatal("a hide rule hides")
			}
			if tc.reasons != nil {
				rec, err := eng.Get(t.Context(), env.ApprovalID)
				if err != nil || strings.Join(rec.Reasons, "|") != strings.Join(append([]string{}, tc.reasons...), "|") {
					t.Fatalf("reasons %q (%v), want %q", rec.Reasons, err, tc.reasons)
				}
			}
			if tc.want == middleware.CodePolicyDenied && env.Error.Message != "over the limit" {
				t.Fatalf("denial %q", env.Error.Message)
			}
		})
	}
}

func TestARuleThatCannotBeEvaluatedFailsClosed(t *testing.T) {
	p, err := agentsafecel.New("unguarded", agentsafecel.Rule{When: `input.amount > 1000`, Then: middleware.Deny("too much")})
	if err != nil {
		t.Fatal(err)
	}
	eng := agentsafetest.NewEngine(t, registry(), middleware.WithProtoFiles(nil), middleware.WithActor(actorOf), middleware.WithPolicy(p))
	if _, err := call(eng.Engine, clerk, refund, adapter.JSONInput([]byte(`{"order": "42"}`))); middleware.CodeOf(err) != middleware.CodePolicyUnavailable {
		t.Fatalf("a rule reading a missing key: %v, want POLICY_UNAVAILABLE", err)
	}
}

// TestHideOutranksAnErrorInsideOnePolicy: every rule is evaluated, and
// what matched composes hide > error > deny > require_approval > allow,
// as between policies: a rule that fails on the caller's input before a
// hide rule must not tell the hidden procedure exists (POLICY_UNAVAILABLE
// is a 503 where absent is a 404).
func TestHideOutranksAnErrorInsideOnePolicy(t *testing.T) {
	p, err := agentsafecel.New("mixed",
		agentsafecel.Rule{When: `int(input.amount) > 1000`, Then: middleware.Deny("too much")}, // fails without an amount
		agentsafecel.Rule{When: `has(input.debug) && input.debug`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `!listing && actor.kind == "robot"`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `has(input.order)`, Then: middleware.Deny("orders are frozen")},
	)
	if err != nil {
		t.Fatal(err)
	}
	eng := agentsafetest.NewEngine(t, registry(), middleware.WithProtoFiles(nil), middleware.WithActor(actorOf), middleware.WithPolicy(p))
	robot := middleware.Actor{ID: "robot-1", Tenant: "shop", Kind: "robot"}
	for _, tc := range []struct {
		name  string
		who   middleware.Actor
		input string
		want  middleware.Code
	}{
		{"an input rule hides after one that fails", clerk, `{"debug": true}`, middleware.CodeCapabilityNotFound},
		{"an actor rule hides after one that fails", robot, `{}`, middleware.CodeCapabilityNotFound},
		{"an error outranks a deny", clerk, `{"order": "42"}`, middleware.CodePolicyUnavailable},
		{"an error with nothing else", clerk, `{"debug": false}`, middleware.CodePolicyUnavailable},
		{"a deny, nothing failing", clerk, `{"amount": 5, "order": "42"}`, middleware.CodePolicyDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(eng.Engine, tc.who, refund, adapter.JSONInput([]byte(tc.input)))
			if got := middleware.CodeOf(err); got != tc.want {
				t.Fatalf("code %s (%v), want %s", got, err, tc.want)
			}
			if hidden := adapter.Hidden(err); hidden != (tc.want == middleware.CodeCapabilityNotFound) {
				t.Fatalf("adapter.Hidden = %t", hidden)
			}
		})
	}
}

// countingInput counts the digests the engine computes.
type countingInput struct {
	adapter.Input
	n *atomic.Int32
}

func (c countingInput) Digest(p string) (string, error) { c.n.Add(1); return c.Input.Digest(p) }

func TestTheInputIsReadOnlyByRulesThatMentionIt(t *testing.T) {
	p, err := agentsafecel.New("actors-only", agentsafecel.Rule{When: `actor.kind == "robot"`, Then: middleware.Hide()})
	if err != nil {
		t.Fatal(err)
	}
	// No sink: nothing but a policy would bind the input.
	eng, err := middleware.New(registry(), middleware.WithProtoFiles(nil), middleware.WithActor(actorOf), middleware.WithPolicy(p),
		middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	if _, err := call(eng, clerk, refund, countingInput{adapter.JSONInput([]byte(`{"amount": 1}`)), &n}); err != nil || n.Load() != 0 {
		t.Fatalf("err %v, %d digests: a policy whose rules never mention input does not bind it", err, n.Load())
	}
}

func TestAtAListingRulesOnTheInputAreSkipped(t *testing.T) {
	p, err := agentsafecel.New("support-rules", rules...)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := middleware.New(registry(), middleware.WithProtoFiles(nil), middleware.WithActor(actorOf), middleware.WithPolicy(p),
		middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	as := func(a middleware.Actor) context.Context {
		return context.WithValue(context.Background(), actorKey{}, a)
	}
	if !adapter.Resolve(eng, refund).Listed(as(agent), middleware.SurfaceMCP) {
		t.Error("the refund is listed: its input rules cannot judge a listing")
	}
	if adapter.Resolve(eng, cancel).Listed(as(agent), middleware.SurfaceMCP) || !adapter.Resolve(eng, cancel).Listed(as(clerk), middleware.SurfaceMCP) {
		t.Error("the cancel is hidden from agents' listings, and listed for clerks")
	}
}

func TestNewReportsEveryBadRule(t *testing.T) {
	_, err := agentsafecel.New("broken",
		agentsafecel.Rule{When: `actor.kind ==`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `procedure`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `surfaces == "mcp"`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `listing`, Then: middleware.Hide()},
	)
	if err == nil {
		t.Fatal("New accepted broken rules")
	}
	for _, want := range []string{"rule 0", "rule 1", "want bool", "rule 2", "surfaces"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "rule 3") {
		t.Errorf("a valid rule was reported: %v", err)
	}
}

// TestAMisspeltKeyOfActorOrCapabilityFailsNew: their keys are fixed, so a
// typo is found when the policy is built, not at every call it would fail.
func TestAMisspeltKeyOfActorOrCapabilityFailsNew(t *testing.T) {
	_, err := agentsafecel.New("typos",
		agentsafecel.Rule{When: `actor.knd == "agent"`, Then: middleware.Hide()},
		agentsafecel.Rule{When: `capability["sideEfect"] == "write"`, Then: middleware.Deny("no")},
		agentsafecel.Rule{When: `has(capability.writeLike) && capability.writeLike && actor.onBehalfOf.size() > 0 && actor["tenant"] == "acme"`, Then: middleware.Hide()},
	)
	if err == nil {
		t.Fatal("New accepted misspelt keys")
	}
	for _, want := range []string{"rule 0", "actor.knd", "rule 1", "capability.sideEfect"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "rule 2") {
		t.Errorf("a valid rule was reported: %v", err)
	}
}
