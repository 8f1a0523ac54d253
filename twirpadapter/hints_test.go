package twirpadapter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// The approval hints travel in the error's meta too, for clients that
// read only the error (EnvelopeFromError).
func TestApprovalHintsInErrorMeta(t *testing.T) {
	t.Parallel()
	reg := middleware.NewRegistry().Register(testv1.TestService_Gated_FullMethodName, middleware.Capability{
		SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}})
	link := func(id string) string { return "https://console.example/approvals/" + id }
	h := newHarness(t, reg, &service{},
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return middleware.Actor{ID: "agent-7"}, nil }),
		middleware.WithApprovalURL(link))
	for _, enc := range encodings {
		_, err := h.client(enc.newClient).Gated(t.Context(), &testv1.Request{Id: "a"})
		twerr, ok := errors.AsType[twirp.Error](err)
		if !ok {
			t.Fatalf("%s: want a twirp.Error, got %v", enc.name, err)
		}
		env, ok := twirpadapter.EnvelopeFromError(err)
		if !ok || env.Error == nil || env.Error.Code != middleware.CodeApprovalRequired {
			t.Fatalf("%s: envelope from the error %+v", enc.name, env)
		}
		expires, perr := time.Parse(time.RFC3339, twerr.Meta(twirpadapter.MetaApprovalExpires))
		if env.ApprovalURL != link(env.ApprovalID) || twerr.Meta(twirpadapter.MetaApprovalURL) != env.ApprovalURL ||
			perr != nil || !env.ExpiresAt.Equal(expires) || time.Until(expires) < 14*time.Minute {
			t.Errorf("%s: APPROVAL_REQUIRED must carry the approval URL and expiry in its meta: %v, envelope %+v", enc.name, twerr.MetaMap(), env)
		}
		h.final()
	}
}
