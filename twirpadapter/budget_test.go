package twirpadapter_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// TestBudgetRefusalCarriesRetryAfter: over a deny budget, the error is
// resource_exhausted, BUDGET_EXCEEDED, with when enough of the window
// frees in its meta (whole seconds, rounded up), which EnvelopeFromError
// reads back as Envelope.RetryAfter.
func TestBudgetRefusalCarriesRetryAfter(t *testing.T) {
	reg := middleware.NewRegistry().Register(testv1.TestService_Write_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectWrite,
		Budgets: []middleware.Budget{{Name: "writes", Limit: 1, Window: time.Hour, Per: "audience"}}})
	h := newHarness(t, reg, &service{}, middleware.WithBudgetStore(budgetstore.NewMemory()))
	for i, enc := range encodings {
		c := h.client(enc.newClient)
		if i == 0 {
			if _, err := c.Write(t.Context(), &testv1.Request{Id: "a"}); err != nil {
				t.Fatalf("within the budget: %v", err)
			}
			h.final()
		}
		_, err := c.Write(t.Context(), &testv1.Request{Id: "b"})
		twerr, ok := errors.AsType[twirp.Error](err)
		if !ok || twerr.Code() != twirp.ResourceExhausted {
			t.Fatalf("%s: over the budget: %v, want resource_exhausted", enc.name, err)
		}
		if got := twerr.Meta(twirpadapter.MetaRetryAfter); got != strconv.Itoa(3600) {
			t.Errorf("%s: %s %q, want 3600", enc.name, twirpadapter.MetaRetryAfter, got)
		}
		env, ok := twirpadapter.EnvelopeFromError(err)
		if !ok || env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter != time.Hour {
			t.Errorf("%s: envelope read back: %+v (RetryAfter %s), want BUDGET_EXCEEDED after 1h", enc.name, env.Error, env.RetryAfter)
		}
		h.final()
	}
}
