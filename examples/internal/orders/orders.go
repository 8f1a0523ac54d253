// Package orders is the order service behind the agentsafe examples,
// written the way agentsafe asks handlers to be written: it forwards its
// context, hands the execution's idempotency key to the system where the
// effect lives (a payment gateway that deduplicates by key), and refuses a
// second refund of the same order with a declared business error, because
// deduplication across re-invocations is business state, not plumbing.
//
// It knows no RPC framework; each example adapts it to one.
package orders

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/middleware"
)

// The business errors a framework adapter maps to its own codes.
var (
	// ErrNotFound: no such order.
	ErrNotFound = errors.New("NOT_FOUND: no such order")
	// ErrAlreadyRefunded: the order was refunded before, and what is left
	// to refund is less than the amount. The declared answer to a model
	// that calls refund twice.
	ErrAlreadyRefunded = errors.New("ALREADY_REFUNDED: the order was refunded before; less than the amount is left to refund")
	// ErrOrderChanged: the order changed since the refund was approved (its
	// version is not the approved one): the refund did nothing.
	ErrOrderChanged = errors.New("ORDER_CHANGED: the order changed since the refund was approved; nothing was refunded")
	// ErrTransient: a dependency failed briefly; trying again may work.
	ErrTransient = errors.New("UNAVAILABLE: a dependency failed briefly")
)

// RefundThresholdCents is the refund amount above which a manager must
// approve (see NeedsApproval). Smaller refunds add up under the refunds
// budget of orders.proto instead.
const RefundThresholdCents = 400_00

// Service is the order service. The zero value is not ready; use New.
type Service struct {
	mu     sync.Mutex
	orders map[string]*ordersv1.Order
	// cards is the card each order was paid with; versions counts the
	// changes of each order, for the conditional write of an approved
	// refund (see PreviewRefund).
	cards    map[string]string
	versions map[string]int64

	// Gateway is the downstream payment system.
	Gateway *Gateway
	// FlakyReads and FlakyMails make the next n reads or emails fail
	// transiently, to show retries (and their absence).
	FlakyReads, FlakyMails atomic.Int32
	// ReportTime is how long ExportReport works.
	ReportTime time.Duration
	// Attempts records every attempt the service ran, for the demo's story.
	Attempts *Log
}

// New returns a service with a few orders.
func New() *Service {
	return &Service{
		orders: map[string]*ordersv1.Order{
			"42": {OrderId: "42", Customer: "ada@example.com", TotalCents: 120_00, Status: "delivered"},
			"43": {OrderId: "43", Customer: "grace@example.com", TotalCents: 1_500_00, Status: "delivered"},
			"44": {OrderId: "44", Customer: "edsger@example.com", TotalCents: 80_00, Status: "shipped"},
			"45": {OrderId: "45", Customer: "barbara@example.com", TotalCents: 2_500_00, Status: "delivered"},
			"77": {OrderId: "77", Customer: "margaret@example.com", TotalCents: 500_00, Status: "delivered"},
			// Carol's orders, each refunded in part by her agent's loop.
			"51": {OrderId: "51", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"52": {OrderId: "52", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"53": {OrderId: "53", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"54": {OrderId: "54", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"55": {OrderId: "55", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"56": {OrderId: "56", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
			"57": {OrderId: "57", Customer: "carol@example.com", TotalCents: 600_00, Status: "delivered"},
		},
		cards: map[string]string{"42": "****4242", "43": "****4343", "44": "****4444", "45": "****4545", "77": "****1234",
			"51": "****5151", "52": "****5252", "53": "****5353", "54": "****5454", "55": "****5555", "56": "****5656", "57": "****5757"},
		versions:   map[string]int64{},
		Gateway:    NewGateway(),
		ReportTime: time.Second,
		Attempts:   &Log{},
	}
}

func (s *Service) note(ctx context.Context, what string) {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.Attempts.Add(Attempt{Procedure: x.Procedure, ExecutionID: x.ID, IdempotencyKey: x.IdempotencyKey, Attempt: x.Attempt, What: what})
}

// GetOrder reads an order.
func (s *Service) GetOrder(ctx context.Context, req *ordersv1.GetOrderRequest) (*ordersv1.Order, error) {
	if s.FlakyReads.Add(-1) >= 0 {
		s.note(ctx, "orders database: connection reset")
		return nil, ErrTransient
	}
	s.note(ctx, "read")
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[req.GetOrderId()]
	if !ok {
		return nil, ErrNotFound
	}
	return cloneOrder(o), nil
}

// RefundOrder refunds an order through the payment gateway, under the
// execution's idempotency key. An approved refund is a conditional write:
// it runs only if the order is still as the manager approved it (the
// version its preview was computed from, ApprovedState), checked and
// written under one lock — in a database, one transaction:
//
//	UPDATE orders SET refunded = refunded + $amount, version = version + 1
//	WHERE id = $order AND version = $approved
//
// and when the order changed since, it refunds nothing and says so with
// middleware.NoEffect, which gives the approval back.
func (s *Service) RefundOrder(ctx context.Context, req *ordersv1.RefundOrderRequest) (*ordersv1.RefundOrderResponse, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[req.GetOrderId()]
	switch {
	case !ok:
		return nil, ErrNotFound
	case x.ApprovedState != nil && string(x.ApprovedState) != s.state(o.OrderId):
		s.note(ctx, "refused: the order changed since it was approved")
		return nil, middleware.NoEffect(ErrOrderChanged)
	case req.GetAmountCents() > o.TotalCents-o.RefundedCents:
		s.note(ctx, "refused: already refunded")
		return nil, ErrAlreadyRefunded
	}
	ref, err := s.Gateway.Refund(ctx, x.SubKey("payment-gateway"), req.GetOrderId(), req.GetAmountCents())
	if err != nil {
		s.note(ctx, "payment gateway: reply lost")
		return nil, err
	}
	s.note(ctx, "refunded through the gateway, reference "+ref)
	s.refund(o, req.GetAmountCents())
	return &ordersv1.RefundOrderResponse{OrderId: req.GetOrderId(), RefundedCents: req.GetAmountCents(), GatewayReference: ref}, nil
}

// refund records a refund of cents on o; s.mu is held.
func (s *Service) refund(o *ordersv1.Order, cents int64) {
	o.RefundedCents += cents
	o.Status = "refunded"
	if o.RefundedCents < o.TotalCents {
		o.Status = "partly refunded"
	}
	s.versions[o.OrderId]++
}

// RefundElsewhere refunds part of an order outside the agent's reach (the
// support desk, say): the order changes under an approval given before.
func (s *Service) RefundElsewhere(orderID string, cents int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.orders[orderID]; ok {
		s.refund(o, cents)
	}
}

// state is what a refund of order id depends on: its version; s.mu is
// held.
func (s *Service) state(id string) string {
	return fmt.Sprintf("order %s version %d", id, s.versions[id])
}

// PreviewRefund is the preview of RefundOrder (middleware.WithPreview): the
// refund as it would happen now, which the manager approves, and the
// order's version, which the approval is bound to.
func (s *Service) PreviewRefund(_ context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
	var req ordersv1.RefundOrderRequest
	if err := unmarshal(in.Input, &req); err != nil {
		return middleware.Preview{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.GetOrderId()
	o, ok := s.orders[id]
	if !ok {
		return middleware.Preview{Text: fmt.Sprintf("refund %s of order %s: there is no such order", Money(req.GetAmountCents()), id), State: []byte(s.state(id))}, nil
	}
	text := fmt.Sprintf("refund %s of order %s to card %s (paid %s", Money(req.GetAmountCents()), id, s.cards[id], Money(o.TotalCents))
	if o.RefundedCents > 0 {
		text += fmt.Sprintf(", %s refunded already", Money(o.RefundedCents))
	}
	return middleware.Preview{Text: text + ")", State: []byte(s.state(id))}, nil
}

// CancelOrder cancels an order.
func (s *Service) CancelOrder(ctx context.Context, req *ordersv1.CancelOrderRequest) (*ordersv1.CancelOrderResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[req.GetOrderId()]
	if !ok {
		return nil, ErrNotFound
	}
	o.Status = "cancelled"
	s.note(ctx, "cancelled")
	return &ordersv1.CancelOrderResponse{OrderId: o.OrderId, Status: o.Status}, nil
}

// NotifyCustomer emails the customer.
func (s *Service) NotifyCustomer(ctx context.Context, req *ordersv1.NotifyCustomerRequest) (*ordersv1.NotifyCustomerResponse, error) {
	if s.FlakyMails.Add(-1) >= 0 {
		s.note(ctx, "mail relay: 503")
		return nil, ErrTransient
	}
	x, _ := middleware.ExecutionFromContext(ctx)
	s.note(ctx, "email sent")
	return &ordersv1.NotifyCustomerResponse{MessageId: "msg-" + x.IdempotencyKey[len("idk_"):][:8]}, nil
}

// ExportReport works for ReportTime, honouring its context.
func (s *Service) ExportReport(ctx context.Context, req *ordersv1.ExportReportRequest) (*ordersv1.ExportReportResponse, error) {
	s.note(ctx, "exporting")
	select {
	case <-time.After(s.ReportTime):
		s.mu.Lock()
		defer s.mu.Unlock()
		return &ordersv1.ExportReportResponse{Orders: int64(len(s.orders))}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// NeedsApproval is the conditional approval of RefundOrder: refunds over
// the threshold need a manager. Install it with
// middleware.WithApprovalCondition.
func NeedsApproval(_ context.Context, q middleware.ApprovalQuery) (bool, string, error) {
	if q.Procedure != "/orders.v1.OrderService/RefundOrder" {
		return false, "", nil
	}
	in, err := q.Input()
	if err != nil {
		return false, "", err
	}
	var req ordersv1.RefundOrderRequest
	if err := unmarshal(in, &req); err != nil {
		return false, "", err
	}
	if req.GetAmountCents() > RefundThresholdCents {
		return true, fmt.Sprintf("refund of %s is over the %s threshold", Money(req.GetAmountCents()), Money(RefundThresholdCents)), nil
	}
	return false, "", nil
}

// Money formats cents.
func Money(cents int64) string { return fmt.Sprintf("%d.%02d EUR", cents/100, cents%100) }

func cloneOrder(o *ordersv1.Order) *ordersv1.Order {
	return &ordersv1.Order{OrderId: o.OrderId, Customer: o.Customer, TotalCents: o.TotalCents, Status: o.Status, RefundedCents: o.RefundedCents}
}
