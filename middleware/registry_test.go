package middleware_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestValidationReportsEveryProblemAtOnce(t *testing.T) {
	reg := middleware.NewRegistry().
		Register("/s.V1/Unspecified", middleware.Capability{}).
		Register("/s.V1/UnknownSideEffect", middleware.Capability{SideEffect: middleware.SideEffect(42)}).
		Register("/s.V1/UnknownRisk", middleware.Capability{SideEffect: middleware.SideEffectRead, Risk: middleware.Risk(9)}).
		Register("/s.V1/RetriedWrite", middleware.Capability{SideEffect: middleware.SideEffectWrite, Retry: middleware.Retry{MaxRetries: 1}}).
		Register("/s.V1/RetriedDestructive", middleware.Capability{SideEffect: middleware.SideEffectDestructive, Retry: middleware.Retry{MaxRetries: 2}}).
		Register("/s.V1/RetriedExternal", middleware.Capability{SideEffect: middleware.SideEffectExternal, Retry: middleware.Retry{MaxRetries: 3}}).
		Register("/s.V1/NegativeTimeout", middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: -time.Second}).
		Register("/s.V1/NegativeAttempts", middleware.Capability{SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{MaxRetries: -1}}).
		Register("/s.V1/NegativeBackoff", middleware.Capability{SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{Backoff: -time.Millisecond}}).
		Register("/s.V1/NegativeExpiry", middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true, ExpiresIn: -time.Minute}}).
		Register("/s.V1/GatedStream", middleware.Capability{SideEffect: middleware.SideEffectWrite, Streaming: true, Approval: middleware.Approval{Required: true}}).
		Register("/s.V1/NegativeQuorum", middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true, Quorum: -1}}).
		Register("/s.V1/NegativeDedup", middleware.Capability{SideEffect: middleware.SideEffectWrite, Dedup: -time.Second}).
		Register("/s.V1/UnknownSurface", middleware.Capability{SideEffect: middleware.SideEffectRead, Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.Surface(0)}}).
		Register("", middleware.Capability{SideEffect: middleware.SideEffectRead}).
		Register("/s.V1/Twice", middleware.Capability{SideEffect: middleware.SideEffectRead}).
		Register("/s.V1/Twice", middleware.Capability{SideEffect: middleware.SideEffectRead}).
		Register("/s.V1/Fine", middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Retry: middleware.Retry{MaxRetries: 1}})

	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if eng != nil || err == nil {
		t.Fatal("New accepted invalid metadata")
	}
	want := []struct{ procedure, field, text string }{
		{"/s.V1/Unspecified", "SideEffect", "never inferred"},
		{"/s.V1/UnknownSideEffect", "SideEffect", "SideEffect(42)"},
		{"/s.V1/UnknownRisk", "Risk", "Risk(9)"},
		{"/s.V1/RetriedWrite", "Retry.MaxRetries", "side effect write is write-like: it may only be retried when declared Idempotent"},
		{"/s.V1/RetriedDestructive", "Retry.MaxRetries", "side effect destructive is write-like"},
		{"/s.V1/RetriedExternal", "Retry.MaxRetries", "side effect external is write-like"},
		{"/s.V1/NegativeTimeout", "Timeout", "must not be negative"},
		{"/s.V1/NegativeAttempts", "Retry.MaxRetries", "must not be negative"},
		{"/s.V1/NegativeBackoff", "Retry.Backoff", "must not be negative"},
		{"/s.V1/NegativeExpiry", "Approval.ExpiresIn", "must not be negative"},
		{"/s.V1/GatedStream", "Approval.Required", "streaming procedure cannot require approval"},
		{"/s.V1/NegativeQuorum", "Approval.Quorum", "must not be negative"},
		{"/s.V1/NegativeDedup", "Dedup", "must not be negative"},
		{"/s.V1/UnknownSurface", "Exposure", "Surface(0)"},
		{"", "Procedure", "must not be empty"},
		{"/s.V1/Twice", "Procedure", "registered more than once"},
	}
	var verr *middleware.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %T is not a *ValidationError: %v", err, err)
	}
	if len(verr.Problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(verr.Problems), len(want), err)
	}
	for _, w := range want {
		found := false
		for _, p := range verr.Problems {
			if p.Procedure == w.procedure && p.Field == w.field && strings.Contains(p.Problem, w.text) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem for %q field %s containing %q in:\n%v", w.procedure, w.field, w.text, err)
		}
		if w.procedure != "" && !strings.Contains(err.Error(), w.procedure) {
			t.Errorf("the error text does not name %s", w.procedure)
		}
	}
	if strings.Contains(err.Error(), "/s.V1/Fine") {
		t.Error("a valid capability was reported as a problem")
	}
	var fe *middleware.FieldError
	if !errors.As(err, &fe) {
		t.Error("errors.As cannot reach a *FieldError")
	}
}

func TestEngineOptionsAreValidatedWithTheMetadata(t *testing.T) {
	_, err := middleware.New(
		middleware.NewRegistry().Register("/s.V1/X", middleware.Capability{}), middleware.WithProtoFiles(nil),
		middleware.WithDefaults(middleware.Defaults{Timeout: -time.Second, MaxAbandoned: -1, Jitter: -time.Millisecond}),
	)
	for _, want := range []string{"Defaults.Timeout must not be negative", "Defaults.MaxAbandoned must not be negative", "Defaults.Jitter must not be negative", "/s.V1/X (registry): SideEffect"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestLookupResolvesDefaults(t *testing.T) {
	eng, err := middleware.New(middleware.NewRegistry().
		Register("/s.V1/Defaults", middleware.Capability{SideEffect: middleware.SideEffectRead}).
		Register("/s.V1/Set", middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Second, Retry: middleware.Retry{Backoff: time.Millisecond}, Approval: middleware.Approval{ExpiresIn: time.Hour}}),
		middleware.WithDefaults(middleware.Defaults{Timeout: 5 * time.Second}), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := adapter.Resolve(eng, "/s.V1/Defaults").Capability()
	if !ok || c.Timeout != 5*time.Second || c.Retry.Backoff != 250*time.Millisecond || c.Approval.ExpiresIn != 15*time.Minute || c.Risk != middleware.RiskLow {
		t.Errorf("defaults resolved to %+v", c)
	}
	c, _ = adapter.Resolve(eng, "/s.V1/Set").Capability()
	if c.Timeout != time.Second || c.Retry.Backoff != time.Millisecond || c.Approval.ExpiresIn != time.Hour {
		t.Errorf("explicit values changed: %+v", c)
	}
	if _, ok := adapter.Resolve(eng, "/s.V1/Nope").Capability(); ok {
		t.Error("Lookup found an unregistered procedure")
	}
	var procs []string
	for p := range eng.Capabilities() {
		procs = append(procs, p)
	}
	if len(procs) != 2 || procs[0] != "/s.V1/Defaults" {
		t.Errorf("Capabilities() = %v, want both, sorted", procs)
	}
}

func TestHintsFollowTheMetadata(t *testing.T) {
	for _, tc := range []struct {
		cap  middleware.Capability
		want middleware.Hints
	}{
		{middleware.Capability{SideEffect: middleware.SideEffectNone}, middleware.Hints{ReadOnly: true}},
		{middleware.Capability{SideEffect: middleware.SideEffectRead, Idempotent: true}, middleware.Hints{ReadOnly: true, Idempotent: true}},
		{middleware.Capability{SideEffect: middleware.SideEffectWrite}, middleware.Hints{}},
		{middleware.Capability{SideEffect: middleware.SideEffectDestructive}, middleware.Hints{Destructive: true}},
		{middleware.Capability{SideEffect: middleware.SideEffectExternal, Idempotent: true}, middleware.Hints{OpenWorld: true, Idempotent: true}},
	} {
		if got := tc.cap.Hints(); got != tc.want {
			t.Errorf("%s: Hints() = %+v, want %+v", tc.cap.SideEffect, got, tc.want)
		}
	}
}

// Approval.Quorum defaults to 1: the capabilities an engine lists, and
// what an adapter resolves, say so rather than the Go zero value.
func TestListedCapabilitiesResolveTheDefaultQuorumOfOne(t *testing.T) {
	eng, err := middleware.New(middleware.NewRegistry().
		Register("/s.V1/Default", middleware.Capability{SideEffect: middleware.SideEffectRead}).
		Register("/s.V1/Two", middleware.Capability{SideEffect: middleware.SideEffectRead, Approval: middleware.Approval{Quorum: 2}}),
		middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"/s.V1/Default": 1, "/s.V1/Two": 2}
	for p, c := range eng.Capabilities() {
		if c.Approval.Quorum != want[p] {
			t.Errorf("Capabilities() lists %s with quorum %d, want %d", p, c.Approval.Quorum, want[p])
		}
	}
	if c, _ := adapter.Resolve(eng, "/s.V1/Default").Capability(); c.Approval.Quorum != 1 {
		t.Errorf("Resolve gives quorum %d, want the default 1", c.Approval.Quorum)
	}
}

// Every field's default, on an engine built without WithDefaults: a
// capability that only names its side effect is listed with them.
func TestEveryFieldHasItsDocumentedDefault(t *testing.T) {
	eng, err := middleware.New(middleware.NewRegistry().Register("/s.V1/Bare", middleware.Capability{SideEffect: middleware.SideEffectWrite}),
		middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range eng.Capabilities() {
		if c.Risk != middleware.RiskLow || c.Description != "" || c.Idempotent || c.Timeout != 30*time.Second ||
			c.Retry.MaxRetries != 0 || c.Retry.Backoff != 250*time.Millisecond || c.Retry.RetryOn != nil ||
			c.Approval.Required || c.Approval.Type != "" || c.Approval.ExpiresIn != 15*time.Minute || c.Approval.Quorum != 1 ||
			c.Dedup != 0 || !c.Exposed(middleware.SurfaceRPC) || !c.Exposed(middleware.SurfaceHTTP) || c.Exposed(middleware.SurfaceMCP) {
			t.Errorf("defaults resolved to %+v", c)
		}
	}
}

// The registry is read once, by New: what is registered afterwards,
// a new procedure or a second entry for a governed one, changes nothing.
func TestRegisteringAfterNewHasNoEffect(t *testing.T) {
	reg := middleware.NewRegistry().Register("/s.V1/Read", middleware.Capability{SideEffect: middleware.SideEffectRead})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	reg.Register("/s.V1/Late", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register("/s.V1/Read", middleware.Capability{SideEffect: middleware.SideEffectDestructive})
	if adapter.Resolve(eng, "/s.V1/Late").Governed() {
		t.Error("a procedure registered after New is governed")
	}
	if c, _ := adapter.Resolve(eng, "/s.V1/Read").Capability(); c.SideEffect != middleware.SideEffectRead {
		t.Errorf("a second entry registered after New changed the capability to %s", c.SideEffect)
	}
}
