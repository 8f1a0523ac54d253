package twirpadapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// One call wraps the generated constructor. The capabilities come from the
// service's method options: Read may retry, Write may not.
func Example() {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory())) // method options only
	if err != nil {
		panic(err)
	}
	srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(flaky{}, opts...)
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()

	httpClient := &http.Client{Transport: twirpadapter.Transport(hs.Client().Transport)}
	client := testv1.NewTestServiceJSONClient(hs.URL, httpClient)

	// A read that fails once with unavailable is retried in the same execution.
	ctx, rec := twirpadapter.RecordEnvelope(context.Background())
	resp, err := client.Read(ctx, &testv1.Request{Id: "order-42"})
	env, _ := rec.Envelope(err)
	fmt.Println(resp.GetId(), "on attempt", resp.GetAttempt(), "-", env.Status, "after", env.Attempts, "attempts")

	// A write that is not idempotent is not: the caller gets the handler's
	// own error, unchanged, and the envelope in the response headers.
	ctx, rec = twirpadapter.RecordEnvelope(context.Background())
	_, err = client.Write(ctx, &testv1.Request{Id: "order-42"})
	env, _ = rec.Envelope(err)
	fmt.Println(err)
	fmt.Println(env.Status, env.Error.Code, "after", env.Attempts, "attempt; safe to re-invoke:", env.Error.Retryable)
	// Output:
	// order-42 on attempt 2 - completed after 2 attempts
	// twirp error unavailable: the ledger is briefly unavailable
	// failed EXECUTION_FAILED after 1 attempt; safe to re-invoke: false
}

// flaky fails every first attempt with unavailable.
type flaky struct{ testv1.TestService }

func (flaky) answer(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	if x.Attempt == 1 {
		return nil, twirp.NewError(twirp.Unavailable, "the ledger is briefly unavailable")
	}
	return &testv1.Response{Id: in.Id, Attempt: int32(x.Attempt)}, nil
}

func (f flaky) Read(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return f.answer(ctx, in)
}

func (f flaky) Write(ctx context.Context, in *testv1.Request) (*testv1.Response, error) {
	return f.answer(ctx, in)
}
