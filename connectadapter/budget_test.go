package connectadapter_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// TestBudgetRefusalCarriesRetryInfo: over a deny budget, every protocol
// gets ResourceExhausted with agentsafe's detail and a google.rpc.RetryInfo
// saying when enough of the window frees, the Retry-After header, and the
// envelope's RetryAfter read back by the client helper.
func TestBudgetRefusalCarriesRetryInfo(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		reg := middleware.NewRegistry().Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite,
			Budgets: []middleware.Budget{{Name: "writes", Limit: 1, Window: time.Hour, Per: "audience"}}})
		srv := newServer(t, serverConfig{reg: reg, opts: []middleware.Option{middleware.WithBudgetStore(budgetstore.NewMemory())},
			handle: func(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
				return connect.NewResponse(&testv1.Response{Note: "written"}), nil
			}})
		c := srv.client(t, p)
		if _, err := c.Write(t.Context(), request(&testv1.Request{})); err != nil {
			t.Fatalf("within the budget: %v", err)
		}
		res, err := c.Write(t.Context(), request(&testv1.Request{}))
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("over the budget: %v, want resource_exhausted", err)
		}
		var retry *errdetails.RetryInfo
		ce, _ := err.(*connect.Error)
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					retry = ri
				}
			}
		}
		if d := retry.GetRetryDelay().AsDuration(); d <= 59*time.Minute || d > time.Hour {
			t.Errorf("RetryInfo %v, want a delay of about an hour", retry)
		}
		if got := ce.Meta().Get(adapter.HeaderRetryAfter); got != "3600" {
			t.Errorf("Retry-After %q, want 3600", got)
		}
		env, _ := connectadapter.ReadEnvelope(res, err)
		if env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter <= 59*time.Minute {
			t.Errorf("envelope read back: %+v (RetryAfter %s)", env.Error, env.RetryAfter)
		}
	})
}
