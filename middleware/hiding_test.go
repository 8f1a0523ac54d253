package middleware_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// hideAgents hides every procedure from agents, and from callers it
// cannot tell (the zero actor): asked as at a listing, with no input.
func hideAgents(asked *[]middleware.PolicyInput, mu *sync.Mutex) policy {
	return policy{"no-agents", func(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
		mu.Lock()
		*asked = append(*asked, in)
		mu.Unlock()
		if in.Actor.Kind == "agent" || in.Actor.ID == "" {
			return middleware.Hide(), nil
		}
		return middleware.Allow(), nil
	}}
}

// TestHidingIsDecidedFirst: a call a policy hides (asked as at a listing)
// looks absent whatever else is wrong with it — SPEC §3 stage 2.0, before
// the caller-context check and before any agentsafe header or the body is
// read. Each of these refusals would otherwise tell the procedure exists.
func TestHidingIsDecidedFirst(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	failingActor := middleware.WithActor(func(context.Context) (middleware.Actor, error) {
		return boss, errors.New("the token expired") // what it returns with its error is not the caller

	})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    keyedCall
		opts []middleware.Option
	}{
		{"a malformed approval id", t.Context(), keyedCall{approvalID: "x"}, nil},
		{"a malformed Idempotency-Key", t.Context(), keyedCall{key: `"unterminated`}, nil},
		{"a keyed input the digest refuses", t.Context(), keyedCall{key: "k1", in: adapter.JSONInput([]byte(`{"amount":1,"amount":2}`))}, nil},
		{"a caller already gone", expired, keyedCall{}, nil},
		{"a strict audit sink that fails at requested", t.Context(), keyedCall{}, []middleware.Option{middleware.WithAuditSink(failingAuditSink{at: middleware.EventRequested})}},
		{"an actor function that fails (the zero actor is asked)", t.Context(), keyedCall{actor: boss}, []middleware.Option{failingActor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []middleware.PolicyInput
			var mu sync.Mutex
			gatedWrite := writeCap
			gatedWrite.Approval.Required = true
			approvals := &countingStore{ApprovalStore: approvalstore.NewMemory()}
			r := oneResult(t, gatedWrite, append([]middleware.Option{middleware.WithApprovalStore(approvals), middleware.WithPolicy(hideAgents(&asked, &mu))}, tc.opts...)...)
			_, env, err := r.call(tc.ctx, tc.c, refunded)
			if !adapter.Hidden(err) {
				t.Fatalf("code %s (%v): a hidden call looks absent whatever else is wrong with it", middleware.CodeOf(err), err)
			}
			if adapter.CarriesDetail(err) && env.Error.Code != middleware.CodeCapabilityNotFound {
				t.Fatalf("envelope %+v", env)
			}
			r.wantRuns("a hidden call runs nothing", 0)
			if n := approvals.calls.Load(); n != 0 {
				t.Fatalf("the approval store was called %d times for a hidden call", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 || !asked[0].Listing {
				t.Fatalf("the policy was asked %+v: at stage 2.0 every policy is asked as at a listing", asked)
			}
			if tc.opts != nil && tc.c.actor.ID != "" && asked[0].Actor.ID != "" {
				t.Fatalf("the policy was asked about %+v: an actor function that fails leaves the zero actor", asked[0].Actor)
			}
			if doc, derr := asked[0].Input(); doc != nil || derr != nil {
				t.Fatalf("the policy read input %q (%v) when asked as at a listing", doc, derr)
			}
		})
	}
}

// TestAHiddenCallsRequestedGoesThroughTheAuditQueue: a strict audit sink
// that fails or stalls at requested cannot reveal a hidden procedure, yet
// the call still has its trail, which reaches the sink through its queue
// as every other event does.
func TestAHiddenCallsRequestedGoesThroughTheAuditQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		sink *auditSink
	}{
		{"it records", &auditSink{}},
		{"it fails at requested", &auditSink{failOn: middleware.EventRequested}},
		{"it outlasts its bound at requested", &auditSink{stallOn: middleware.EventRequested}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				var asked []middleware.PolicyInput
				var mu sync.Mutex
				f := newFixture(t, procRefund, plainWrite, middleware.WithActor(actorOf), middleware.WithPolicy(hideAgents(&asked, &mu)), middleware.WithAuditSink(tc.sink, time.Second))
				var ran atomic.Bool
				start := time.Now()
				_, env, err := execute(f.eng, as(t.Context(), agent), call{Procedure: procRefund}, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
				if !adapter.Hidden(err) || ran.Load() {
					t.Fatalf("code %s, ran %t: the audit sink must not tell a hidden procedure", middleware.CodeOf(err), ran.Load())
				}
				if waited := time.Since(start); waited != 0 {
					t.Fatalf("the hidden call waited %s for the audit sink: its requested goes through the queue", waited)
				}
				f.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventFailed)
				if tc.sink.stallOn != "" {
					// The stalled write outlasts its bound: the watchdog
					// hands the queue to a fresh worker, which must idle
					// out before the bubble ends.
					time.Sleep(2 * time.Second)
				}
				if tc.sink.failOn == "" && tc.sink.stallOn == "" {
					time.Sleep(time.Millisecond) // let the sink's worker deliver
					got := tc.sink.rec.Events()
					if len(got) != 2 || got[0].Type != middleware.EventRequested || got[0].ExecutionID != env.ExecutionID {
						t.Fatalf("the audit sink recorded %+v: the hidden call's trail reaches it through its queue", got)
					}
				}
			})
		})
	}
}

// TestAGuardDecidesHidingBeforeAnythingIsRead: Route.Absent, which an
// adapter's guard calls before its framework reads the call, answers as
// stage 2.0 does, records a hidden call (and only a hidden one), and takes
// a bridge's surface mark over the surface it is given.
func TestAGuardDecidesHidingBeforeAnythingIsRead(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var asked []middleware.PolicyInput
		var mu sync.Mutex
		mcpOnly := middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceMCP}}
		f := newFixture(t, procRefund, mcpOnly, middleware.WithActor(actorOf), middleware.WithPolicy(hideAgents(&asked, &mu)))
		route := adapter.Resolve(f.eng, procRefund)
		boss := as(t.Context(), boss)
		if !route.Absent(boss, middleware.SurfaceRPC) {
			t.Fatal("a capability exposed on mcp only is absent on rpc")
		}
		if route.Absent(adapter.WithSurface(boss, middleware.SurfaceMCP), middleware.SurfaceRPC) {
			t.Fatal("the bridge's mark says the call came in on mcp, where it is exposed")
		}
		if !route.Absent(adapter.WithSurface(as(t.Context(), agent), middleware.SurfaceMCP), middleware.SurfaceRPC) {
			t.Fatal("a policy hides it from agents")
		}
		if adapter.Resolve(f.eng, "/orders.v1.Orders/Unknown").Absent(boss, middleware.SurfaceRPC) {
			t.Fatal("a procedure the engine does not govern is its framework's to answer")
		}
		synctest.Wait()
		var trail []middleware.EventType
		for _, e := range f.rec.Events() {
			trail = append(trail, e.Type)
		}
		want := []middleware.EventType{middleware.EventRequested, middleware.EventFailed, middleware.EventRequested, middleware.EventFailed}
		if !slices.Equal(trail, want) {
			t.Fatalf("the trail is %v: each hidden call is recorded, once, and a visible one not (its Execute records it)", trail)
		}
	})
}
