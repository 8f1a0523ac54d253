package orders

import (
	"context"
	"fmt"

	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/middleware"
)

// RefundLimitCents is the refund amount above which no agent may refund at
// all, approved or not (see RefundLimit).
const RefundLimitCents = 5_000_00

// RefundLimit is the policy that keeps large refunds for the finance
// team: a refund over RefundLimitCents is denied outright, before any
// approval is asked for. Install it with middleware.WithPolicy.
type RefundLimit struct{}

// Name implements middleware.Policy.
func (RefundLimit) Name() string { return "refund-limit" }

// Decide implements middleware.Policy. It reads the refund's amount from
// the call's input, which the engine has checked first.
func (RefundLimit) Decide(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	if in.Listing || in.Procedure != "/orders.v1.OrderService/RefundOrder" {
		return middleware.Allow(), nil
	}
	doc, err := in.Input()
	if err != nil {
		return middleware.Allow(), err
	}
	var req ordersv1.RefundOrderRequest
	if err := unmarshal(doc, &req); err != nil {
		return middleware.Allow(), err
	}
	if req.GetAmountCents() > RefundLimitCents {
		return middleware.Deny(fmt.Sprintf("refunds over %s are made by the finance team, not by an agent", Money(RefundLimitCents))), nil
	}
	return middleware.Allow(), nil
}
