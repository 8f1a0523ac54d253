package grpcadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestBudgetRefusalCarriesRetryInfo: over a deny budget, the status is
// ResourceExhausted with agentsafe's detail and a google.rpc.RetryInfo
// saying when enough of the window frees.
func TestBudgetRefusalCarriesRetryInfo(t *testing.T) {
	reg := middleware.NewRegistry().Register(testv1.TestService_Write_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectWrite,
		Budgets: []middleware.Budget{{Name: "writes", Limit: 1, Window: time.Hour, Per: "audience"}}})
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		return &testv1.Response{Note: "written"}, nil
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, reg, middleware.WithBudgetStore(budgetstore.NewMemory())), svc))
	if _, err := c.Write(t.Context(), &testv1.Request{}); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	var header, trailer metadata.MD
	_, err := c.Write(t.Context(), &testv1.Request{}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted || ourDetail(err).GetCode() != "BUDGET_EXCEEDED" {
		t.Fatalf("over the budget: %v, want ResourceExhausted with agentsafe's detail", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if d := retry.GetRetryDelay().AsDuration(); d <= 59*time.Minute || d > time.Hour {
		t.Errorf("RetryInfo %v, want a delay of about an hour", retry)
	}
	if env, _ := grpcadapter.EnvelopeFrom(header, trailer, err); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter <= 59*time.Minute {
		t.Errorf("envelope read back: %+v (RetryAfter %s)", env.Error, env.RetryAfter)
	}
}
