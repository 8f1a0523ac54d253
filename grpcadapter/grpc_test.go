package grpcadapter_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// options is a service that answers every unary method from its behaviour
// function.
type options struct {
	testv1.UnimplementedTestServiceServer
	do func(ctx context.Context, method string, r *testv1.Request) (*testv1.Response, error)
}

func (o *options) Read(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return o.do(ctx, "Read", r)
}
func (o *options) Write(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return o.do(ctx, "Write", r)
}
func (o *options) Slow(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return o.do(ctx, "Slow", r)
}
func (o *options) Ungoverned(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return o.do(ctx, "Ungoverned", r)
}

func newEngine(t *testing.T, reg *middleware.Registry, opts ...middleware.Option) *middleware.Engine {
	t.Helper()
	eng, err := middleware.New(reg, append([]middleware.Option{middleware.WithApprovalStore(approvalstore.NewMemory())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func detail(t *testing.T, err error) *agentsafev1.ErrorDetail {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if d, ok := d.(*agentsafev1.ErrorDetail); ok {
			return d
		}
	}
	t.Fatalf("no agentsafe.v1.ErrorDetail on %v", err)
	return nil
}

func TestMethodOptionsGovernAndCodesMapToStatus(t *testing.T) {
	var reads atomic.Int32
	svc := &options{do: func(ctx context.Context, method string, r *testv1.Request) (*testv1.Response, error) {
		switch method {
		case "Read": // options: read, retry 2
			if reads.Add(1) < 3 {
				return nil, status.Error(codes.Unavailable, "replica lagging")
			}
			return &testv1.Response{Note: "third time"}, nil
		case "Write": // options: write, never retried
			return nil, status.Error(codes.NotFound, "order 42 does not exist")
		case "Slow": // options: 50ms per attempt
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &testv1.Response{Note: "ungoverned"}, nil
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))

	var header metadata.MD
	resp, err := c.Read(t.Context(), &testv1.Request{}, grpc.Header(&header))
	if err != nil || resp.GetNote() != "third time" || reads.Load() != 3 {
		t.Fatalf("Read (retry 2 from its option) after two Unavailable: %v, %v, %d runs", resp, err, reads.Load())
	}
	if env, ok := grpcadapter.EnvelopeFrom(header, nil, nil); !ok || env.Attempts != 3 || !strings.HasPrefix(env.ExecutionID, "exe_") {
		t.Errorf("envelope from headers %+v", env)
	}

	_, err = c.Write(t.Context(), &testv1.Request{})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "order 42 does not exist" {
		t.Errorf("a handler's own status must keep its code and message, got %v", st)
	}
	if d := detail(t, err); d.GetCode() != "EXECUTION_FAILED" || d.GetAttempts() != 1 || d.GetRetryable() {
		t.Errorf("detail %v", d)
	}

	var trailer metadata.MD
	_, err = c.Slow(t.Context(), &testv1.Request{}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.DeadlineExceeded || detail(t, err).GetCode() != "TIMEOUT" {
		t.Errorf("TIMEOUT must be DeadlineExceeded with its detail: %v", err)
	}
	env, _ := grpcadapter.EnvelopeFrom(header, trailer, err)
	if env.Error == nil || env.Error.Code != middleware.CodeTimeout || env.Status != middleware.StatusCancelled || !env.Error.Retryable {
		t.Errorf("envelope read back: %+v", env)
	}

	var none metadata.MD
	resp, err = c.Ungoverned(t.Context(), &testv1.Request{}, grpc.Header(&none))
	if err != nil || resp.GetNote() != "ungoverned" || len(none.Get("agentsafe-execution-id")) != 0 {
		t.Errorf("a method without metadata must pass through untouched: %v %v %v", resp, err, none)
	}
}

func TestPlainErrorsAreConcealed(t *testing.T) {
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		return nil, status.Error(codes.Unknown, "raw driver error: password=hunter2")
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
	_, err := c.Write(t.Context(), &testv1.Request{})
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != middleware.ConcealedMessage {
		t.Errorf("an unclassified error must be concealed as Internal: %v", st)
	}
}

func TestRegistryOverridesOptionsAndStrictRefuses(t *testing.T) {
	var runs atomic.Int32
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		runs.Add(1)
		return nil, status.Error(codes.Unavailable, "down")
	}}
	reg := middleware.NewRegistry().Register(testv1.TestService_Read_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectRead})
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, reg, middleware.WithStrict()), svc))
	c.Read(t.Context(), &testv1.Request{})
	if runs.Load() != 1 {
		t.Errorf("the registry entry (no retry) must replace the option (retry 2): %d runs", runs.Load())
	}
	_, err := c.Ungoverned(t.Context(), &testv1.Request{})
	if status.Code(err) != codes.NotFound || detail(t, err).GetCode() != "CAPABILITY_NOT_FOUND" {
		t.Errorf("strict mode must refuse an ungoverned method with NotFound: %v", err)
	}
}

func TestIdempotencyKeyReachesDownstreamUnchangedAcrossRetries(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	downstream := &options{do: func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		keys = append(keys, strings.Join(md.Get("idempotency-key"), ","))
		mu.Unlock()
		return &testv1.Response{}, nil
	}}
	down := testv1.NewTestServiceClient(serve(t, newEngine(t, middleware.NewRegistry(), middleware.WithProtoFiles(nil)), downstream,
		grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor("127.0.0.1"))))

	var seen []string
	var attempts atomic.Int32
	upstream := &options{do: func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		seen = append(seen, x.IdempotencyKey)
		if _, err := down.Ungoverned(ctx, &testv1.Request{}); err != nil {
			return nil, err
		}
		if attempts.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "try again")
		}
		return &testv1.Response{}, nil
	}}
	up := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), upstream))
	if _, err := up.Read(t.Context(), &testv1.Request{}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != seen[0] || keys[1] != seen[0] || seen[1] != seen[0] {
		t.Errorf("downstream saw keys %v, the handler had %v: the execution's key must arrive unchanged on every attempt", keys, seen)
	}

	// Not to hosts the application did not list.
	keys = nil
	other := testv1.NewTestServiceClient(serve(t, newEngine(t, middleware.NewRegistry(), middleware.WithProtoFiles(nil)), downstream,
		grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor("payments.internal"))))
	upstream.do = func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
		_, err := other.Ungoverned(ctx, &testv1.Request{})
		return &testv1.Response{}, err
	}
	up.Read(t.Context(), &testv1.Request{})
	if len(keys) != 1 || keys[0] != "" {
		t.Errorf("a host not listed received the key: %v", keys)
	}
}

func TestMalformedApprovalHeaderIsInvalidArgument(t *testing.T) {
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		return &testv1.Response{}, nil
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "agentsafe-approval-id", "apr_123")
	_, err := c.Read(ctx, &testv1.Request{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "Agentsafe-Approval-Id") {
		t.Errorf("malformed approval header: %v", st)
	}
}

// TestHandlerHonouringItsContextIsTimeoutNotFailure: gRPC status errors do
// not wrap the context's, so a handler returning its context's status (or
// a downstream call's) must still be classified by the context's cause.
func TestHandlerHonouringItsContextIsTimeoutNotFailure(t *testing.T) {
	var reads atomic.Int32
	svc := &options{do: func(ctx context.Context, method string, _ *testv1.Request) (*testv1.Response, error) {
		if method == "Read" && reads.Add(1) > 1 {
			return &testv1.Response{Note: "second"}, nil
		}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	reg := middleware.NewRegistry().Register(testv1.TestService_Read_FullMethodName, middleware.Capability{
		SideEffect: middleware.SideEffectRead, Timeout: 50 * time.Millisecond, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}})
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, reg), svc))
	_, err := c.Slow(t.Context(), &testv1.Request{})
	if status.Code(err) != codes.DeadlineExceeded || detail(t, err).GetCode() != "TIMEOUT" {
		t.Errorf("a handler returning its context's status must be TIMEOUT: %v", err)
	}
	resp, err := c.Read(t.Context(), &testv1.Request{})
	if err != nil || resp.GetNote() != "second" || reads.Load() != 2 {
		t.Errorf("a read whose first attempt timed out must be retried: %v %v, %d runs", resp, err, reads.Load())
	}
}
