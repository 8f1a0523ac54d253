// Command twirp is the order service of examples/refund over Twirp: the one
// line a Twirp server needs is twirpadapter.Wrap around its generated
// constructor. Capabilities come from the method options in orders.proto.
//
//	go run ./examples/twirp
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "twirp:", err)
		os.Exit(1)
	}
}

func run() error {
	eng, err := middleware.New(nil, // the method options of orders.proto
		middleware.WithApprovalStore(approvalstore.NewMemory()), // its CancelOrder needs approvals
		middleware.WithBudgetStore(budgetstore.NewMemory()))     // its refunds and emails have budgets
	if err != nil {
		return err
	}
	svc := orders.New()
	srv := server(eng, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &http.Server{Handler: srv}
	go server.Serve(lis)
	defer server.Close()

	client := ordersv1.NewOrderServiceJSONClient("http://"+lis.Addr().String(), &http.Client{Transport: twirpadapter.Transport(nil)})
	svc.FlakyReads.Store(1)
	ctx, rec := twirpadapter.RecordEnvelope(context.Background())
	order, err := client.GetOrder(ctx, &ordersv1.GetOrderRequest{OrderId: "42"})
	env, _ := rec.Envelope(err)
	fmt.Printf("GetOrder: %s after %d attempts (%s), err=%v\n", order.GetStatus(), env.Attempts, env.ExecutionID, err)
	if err != nil || env.Attempts != 2 {
		return fmt.Errorf("GetOrder: want success in 2 attempts, got %v in %d", err, env.Attempts)
	}

	svc.FlakyMails.Store(1)
	ctx, rec = twirpadapter.RecordEnvelope(context.Background())
	_, err = client.NotifyCustomer(ctx, &ordersv1.NotifyCustomerRequest{OrderId: "42", Message: "hello"})
	env, _ = rec.Envelope(err)
	if env.Error == nil || env.Attempts != 1 || env.Error.Retryable {
		return fmt.Errorf("NotifyCustomer: want one attempt that is not safe to re-invoke, got %+v", env)
	}
	fmt.Printf("NotifyCustomer: %s %s after %d attempt (external: never retried), safe to re-invoke: %t\n", env.Status, env.Error.Code, env.Attempts, env.Error.Retryable)
	return nil
}

// server is the order service over Twirp, governed by eng.
func server(eng *middleware.Engine, svc *orders.Service) *twirpadapter.Server {
	return twirpadapter.Wrap(eng, func(opts ...any) ordersv1.TwirpServer { // the one line
		return ordersv1.NewOrderServiceServer(twirpErrors{svc}, opts...)
	})
}

// twirpErrors maps the service's business errors to Twirp errors the
// handler declares on purpose; plain errors would be concealed.
type twirpErrors struct{ *orders.Service }

func mapErr[T any](v T, err error) (T, error) {
	switch {
	case errors.Is(err, orders.ErrTransient):
		return v, twirp.NewError(twirp.Unavailable, err.Error())
	case errors.Is(err, orders.ErrAlreadyRefunded):
		return v, twirp.NewError(twirp.FailedPrecondition, err.Error())
	case errors.Is(err, orders.ErrNotFound):
		return v, twirp.NewError(twirp.NotFound, err.Error())
	}
	return v, err
}

func (t twirpErrors) GetOrder(ctx context.Context, r *ordersv1.GetOrderRequest) (*ordersv1.Order, error) {
	return mapErr(t.Service.GetOrder(ctx, r))
}
func (t twirpErrors) RefundOrder(ctx context.Context, r *ordersv1.RefundOrderRequest) (*ordersv1.RefundOrderResponse, error) {
	return mapErr(t.Service.RefundOrder(ctx, r))
}
func (t twirpErrors) NotifyCustomer(ctx context.Context, r *ordersv1.NotifyCustomerRequest) (*ordersv1.NotifyCustomerResponse, error) {
	return mapErr(t.Service.NotifyCustomer(ctx, r))
}
