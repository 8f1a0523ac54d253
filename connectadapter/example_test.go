package connectadapter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// flakyService fails the first attempt of every call with Unavailable.
type flakyService struct {
	testv1connect.UnimplementedTestServiceHandler
}

func (flakyService) Read(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return flaky(ctx, req)
}

func (flakyService) Write(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return flaky(ctx, req)
}

func flaky(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	if x.Attempt == 1 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("database briefly unavailable"))
	}
	return connect.NewResponse(&testv1.Response{Note: "order " + req.Msg.GetId() + ": shipped"}), nil
}

// A Connect service adopts agentsafe with one interceptor, and its guard
// around the generated handler (so that a hidden procedure looks absent
// before connect-go reads its body). The capability metadata lives in its
// .proto file: Read is a read with retries, Write a write that is never
// retried at run time.
func Example() {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory())) // reads and validates the method options
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	interceptor := connectadapter.NewInterceptor(eng)
	mux.Handle(interceptor.Guard(testv1connect.NewTestServiceHandler(flakyService{},
		connect.WithInterceptors(interceptor), // the one line
	)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
	ctx := context.Background()

	res, err := client.Read(ctx, connect.NewRequest(&testv1.Request{Id: "42"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	env, _ := connectadapter.ReadEnvelope(res, err)
	fmt.Println(res.Msg.GetNote(), "-", env.Status, "after", env.Attempts, "attempts")

	_, err = client.Write(ctx, connect.NewRequest(&testv1.Request{Id: "42"}))
	env, _ = connectadapter.ReadEnvelope(nil, err)
	fmt.Println(connect.CodeOf(err), "-", env.Error.Code, "after", env.Attempts, "attempt; safe to call again:", env.Error.Retryable)
	// Output:
	// order 42: shipped - completed after 2 attempts
	// unavailable - EXECUTION_FAILED after 1 attempt; safe to call again: false
}
