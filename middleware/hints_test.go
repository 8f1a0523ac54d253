package middleware_test

import (
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

func consoleLink(id string) string { return "https://console.example/approvals/" + id }

func TestApprovalHintsOnRequiredAndPending(t *testing.T) {
	g := newGated(t, gatedCap, middleware.WithApprovalURL(consoleLink))
	env, err, _ := g.call(agent, refund, "")
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	id := env.ApprovalID
	rec, _ := g.store.Get(t.Context(), id)
	if env.ApprovalURL != consoleLink(id) || !env.ExpiresAt.Equal(rec.ExpiresAt) || env.ExpiresAt.IsZero() {
		t.Errorf("APPROVAL_REQUIRED must carry the approval's URL and expiry: url %q expires %v, want %q %v", env.ApprovalURL, env.ExpiresAt, consoleLink(id), rec.ExpiresAt)
	}

	env, err, _ = g.call(agent, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalPending)
	if env.ApprovalURL != consoleLink(id) || !env.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Errorf("APPROVAL_PENDING must carry the approval's URL and expiry: url %q expires %v", env.ApprovalURL, env.ExpiresAt)
	}

	g.approve(id)
	for _, want := range []middleware.Code{middleware.CodeOK, middleware.CodeApprovalConsumed} {
		env, err, _ = g.call(agent, refund, id)
		wantCode(t, env, err, want)
		if env.ApprovalURL != "" || !env.ExpiresAt.IsZero() {
			t.Errorf("%s: only envelopes that ask for a decision carry the hints: %+v", want, env)
		}
	}
}

func TestApprovalHintsWithoutURLCarryTheExpiry(t *testing.T) {
	g := newGated(t, gatedCap)
	env, err, _ := g.call(agent, refund, "")
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	if env.ApprovalURL != "" || env.ExpiresAt.IsZero() {
		t.Errorf("without WithApprovalURL the envelope carries the expiry and no URL: %+v", env)
	}
}

func TestApprovalURLThatPanicsLeavesNoHint(t *testing.T) {
	g := newGated(t, gatedCap, middleware.WithApprovalURL(func(string) string { panic("the console's base URL is not configured") }))
	env, err, _ := g.call(agent, refund, "")
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	if env.ApprovalURL != "" || env.ExpiresAt.IsZero() || !store.ValidApprovalID(env.ApprovalID) {
		t.Errorf("a URL function that panics leaves the envelope without a URL, and the outcome as it was: %+v", env)
	}
}

func TestApprovalHintsRevealNothingToAnotherActor(t *testing.T) {
	g := newGated(t, gatedCap, middleware.WithApprovalURL(consoleLink))
	id := g.requested(refund)
	other := middleware.Actor{ID: "agent-9", Tenant: "acme", Kind: "agent"}
	env, err, _ := g.call(other, refund, id)
	wantCode(t, env, err, middleware.CodeApprovalNotFound)
	if env.ApprovalURL != "" || !env.ExpiresAt.IsZero() {
		t.Errorf("another actor's approval id must reveal nothing, not even its expiry: %+v", env)
	}
}
