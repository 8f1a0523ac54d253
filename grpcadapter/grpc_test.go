package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// options is a service that answers every unary method, and the stream,
// from its behaviour function.
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
func (o *options) Stream(r *testv1.Request, ss grpc.ServerStreamingServer[testv1.Response]) error {
	resp, err := o.do(ss.Context(), "Stream", r)
	if err != nil {
		return err
	}
	return ss.Send(resp)
}

func newEngine(t *testing.T, reg *middleware.Registry, opts ...middleware.Option) *middleware.Engine {
	t.Helper()
	quiet := []middleware.Option{middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(slog.New(slog.DiscardHandler))}
	eng, err := middleware.New(reg, append(quiet, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// ourDetail returns agentsafe's own detail on err, or nil.
func ourDetail(err error) *agentsafev1.ErrorDetail {
	for _, d := range status.Convert(err).Details() {
		if d, ok := d.(*agentsafev1.ErrorDetail); ok {
			return d
		}
	}
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

	var trailer metadata.MD
	_, err = c.Slow(t.Context(), &testv1.Request{}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.DeadlineExceeded || ourDetail(err).GetCode() != "TIMEOUT" {
		t.Errorf("TIMEOUT (50ms from its option) must be DeadlineExceeded with agentsafe's detail: %v", err)
	}
	env, _ := grpcadapter.EnvelopeFrom(header, trailer, err)
	if env.Error == nil || env.Error.Code != middleware.CodeTimeout || env.Status != middleware.StatusCancelled || !env.Error.Retryable ||
		env.Procedure != testv1.TestService_Slow_FullMethodName {
		t.Errorf("envelope read back: %+v", env)
	}

	var none metadata.MD
	resp, err = c.Ungoverned(t.Context(), &testv1.Request{}, grpc.Header(&none))
	if err != nil || resp.GetNote() != "ungoverned" || len(none.Get("agentsafe-execution-id")) != 0 {
		t.Errorf("a method without metadata must pass through untouched: %v %v %v", resp, err, none)
	}
}

// mustStatus builds a status with details, for handlers to return.
func mustStatus(t *testing.T, c codes.Code, msg string, details ...protoadapt.MessageV1) *status.Status {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A status error a handler returns on purpose reaches the client exactly
// as grpc-go sends it without agentsafe: code (Unknown included), message
// (even one that names a secret: the handler chose to send it) and
// details, with no agentsafe detail; the envelope travels in the metadata.
// An interop run against connectrpc/conformance caught each of these.
func TestHandlerStatusPassesThroughUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func(t *testing.T) *status.Status
	}{
		{"details of its own", func(t *testing.T) *status.Status {
			return mustStatus(t, codes.InvalidArgument, "amount must be positive",
				&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be positive"}}},
				&errdetails.ErrorInfo{Reason: "AMOUNT_NEGATIVE", Domain: "payments.example.com", Metadata: map[string]string{"amount": "-5"}},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		}},
		{"codes.Unknown", func(*testing.T) *status.Status { return status.New(codes.Unknown, "the ledger said no") }},
		{"a message that names a secret", func(*testing.T) *status.Status {
			return status.New(codes.FailedPrecondition, "card declined for token sk_live_hunter2")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.st(t)
			svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) { return nil, want.Err() }}
			c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))

			_, plain := c.Ungoverned(t.Context(), &testv1.Request{})
			var header, trailer metadata.MD
			_, err := c.Write(t.Context(), &testv1.Request{}, grpc.Header(&header), grpc.Trailer(&trailer))
			if got := status.Convert(err); !proto.Equal(got.Proto(), want.Proto()) || !proto.Equal(got.Proto(), status.Convert(plain).Proto()) {
				t.Errorf("the client read %v, want the handler's status unchanged, as an ungoverned method sends it: %v", got.Proto(), want.Proto())
			}
			if d := ourDetail(err); d != nil {
				t.Errorf("the handler's own status gained agentsafe's detail: %v", d)
			}
			if header.Get("agentsafe-code")[0] != "EXECUTION_FAILED" || header.Get("agentsafe-retryable")[0] != "false" {
				t.Errorf("a unary call's envelope travels in its header metadata: %v", header)
			}
			env, ok := grpcadapter.EnvelopeFrom(header, trailer, err)
			if !ok || env.Error == nil || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Message != want.Message() || env.Error.Retryable {
				t.Errorf("EnvelopeFrom %+v %+v, want EXECUTION_FAILED, not retryable, with the status's message", env, env.Error)
			}
		})
	}
}

// A status a handler relays from a downstream governed call names the
// downstream execution in its agentsafe detail: the detail is dropped, the
// rest passes, and the client reads this call's envelope.
func TestRelayedDetailNeverBecomesThisCallsEnvelope(t *testing.T) {
	info := &errdetails.ErrorInfo{Reason: "STOCK_LOW", Domain: "inventory.example.com"}
	relayed := &agentsafev1.ErrorDetail{Code: "TIMEOUT", Retryable: true, ExecutionId: "exe_00000000000000000000000000000001", Procedure: "/inventory.v1.Stock/Reserve", Attempts: 3}
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		return nil, mustStatus(t, codes.DeadlineExceeded, "reserve timed out", relayed, info).Err()
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
	var header metadata.MD
	_, err := c.Write(t.Context(), &testv1.Request{}, grpc.Header(&header))
	if want := mustStatus(t, codes.DeadlineExceeded, "reserve timed out", info); !proto.Equal(status.Convert(err).Proto(), want.Proto()) {
		t.Errorf("the client read %v, want the handler's status without the relayed detail: %v", status.Convert(err).Proto(), want.Proto())
	}
	env, _ := grpcadapter.EnvelopeFrom(header, nil, err)
	if env.ExecutionID == relayed.ExecutionId || env.Error.Code != middleware.CodeExecutionFailed || env.Procedure != "" || env.Attempts != 1 {
		t.Errorf("EnvelopeFrom %+v %+v read the relayed execution's detail", env, env.Error)
	}

	// A client reading a relayed detail a server did not drop (an older
	// one) still takes the envelope from the metadata.
	header = metadata.Pairs("agentsafe-execution-id", "exe_00000000000000000000000000000002", "agentsafe-attempts", "1",
		"agentsafe-code", "EXECUTION_FAILED", "agentsafe-retryable", "false")
	env, _ = grpcadapter.EnvelopeFrom(header, nil, mustStatus(t, codes.DeadlineExceeded, "reserve timed out", relayed).Err())
	if env.ExecutionID != "exe_00000000000000000000000000000002" || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Procedure != "" {
		t.Errorf("EnvelopeFrom %+v %+v read the relayed execution's detail", env, env.Error)
	}
}

func TestPlainErrorsAreConcealedWithAgentsafeDetail(t *testing.T) {
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		return nil, errors.New("raw driver error: password=hunter2")
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
	var header metadata.MD
	_, err := c.Write(t.Context(), &testv1.Request{}, grpc.Header(&header))
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != adapter.ConcealedMessage || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a plain Go error must be concealed as Internal %q: %v", adapter.ConcealedMessage, st)
	}
	d := ourDetail(err)
	if d.GetCode() != "EXECUTION_FAILED" || d.GetExecutionId() != header.Get("agentsafe-execution-id")[0] || d.GetProcedure() != testv1.TestService_Write_FullMethodName {
		t.Errorf("a concealed error is agentsafe's outcome and carries its detail: %v", d)
	}
}

// The caller's own deadline ends the execution CANCELLED, written as every
// gRPC server writes a caller's deadline: DeadlineExceeded, with no detail
// (nobody is waiting to read one). A server interceptor shortens the
// deadline here, so that the client is still there to read the answer.
func TestCallersDeadlineIsDeadlineExceededWithoutDetail(t *testing.T) {
	eng := newEngine(t, nil)
	svc := &options{do: func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	callerLeaves := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		return next(ctx, req)
	}, grpcadapter.UnaryServerInterceptor(eng))
	c := testv1.NewTestServiceClient(serveWith(t, []grpc.ServerOption{callerLeaves}, svc))
	var header metadata.MD
	_, err := c.Read(t.Context(), &testv1.Request{}, grpc.Header(&header))
	if status.Code(err) != codes.DeadlineExceeded || ourDetail(err) != nil {
		t.Errorf("the caller's own deadline must be DeadlineExceeded without agentsafe's detail: %v", status.Convert(err).Proto())
	}
	if env, _ := grpcadapter.EnvelopeFrom(header, nil, err); env.Error == nil || env.Error.Code != middleware.CodeCancelled {
		t.Errorf("envelope %+v, want CANCELLED", env)
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
	if status.Code(err) != codes.NotFound || ourDetail(err).GetCode() != "CAPABILITY_NOT_FOUND" {
		t.Errorf("strict mode must refuse an ungoverned method with NotFound: %v", err)
	}
}

func TestIdempotencyKeyReachesDownstreamUnchangedAcrossRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		// key is the client interceptor under test, listing hosts.
		key func(hosts ...string) grpc.DialOption
		// call calls the downstream service the way the interceptor covers.
		call func(ctx context.Context, c testv1.TestServiceClient) error
	}{
		{"unary",
			func(hosts ...string) grpc.DialOption {
				return grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor(hosts...))
			},
			func(ctx context.Context, c testv1.TestServiceClient) error {
				_, err := c.Ungoverned(ctx, &testv1.Request{})
				return err
			}},
		{"stream",
			func(hosts ...string) grpc.DialOption {
				return grpc.WithChainStreamInterceptor(grpcadapter.StreamClientInterceptor(hosts...))
			},
			func(ctx context.Context, c testv1.TestServiceClient) error {
				st, err := c.Stream(ctx, &testv1.Request{})
				for err == nil {
					_, err = st.Recv()
				}
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var keys []string
			downstream := &options{do: func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				mu.Lock()
				keys = append(keys, strings.Join(md.Get("idempotency-key"), ","))
				mu.Unlock()
				return &testv1.Response{}, nil
			}}
			down := testv1.NewTestServiceClient(serveWith(t, nil, downstream, tc.key("127.0.0.1"))) // a plain gRPC server

			var seen []string
			var attempts atomic.Int32
			upstream := &options{do: func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
				x, _ := middleware.ExecutionFromContext(ctx)
				seen = append(seen, x.IdempotencyKey)
				if err := tc.call(ctx, down); err != nil {
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
			if want := adapter.QuoteKey(seen[0]); len(keys) != 2 || keys[0] != want || keys[1] != want || seen[1] != seen[0] {
				t.Errorf("downstream saw keys %v, the handler had %v: the execution's key must arrive unchanged on every attempt", keys, seen)
			}

			// Not to hosts the application did not list.
			keys = nil
			other := testv1.NewTestServiceClient(serveWith(t, nil, downstream, tc.key("payments.internal")))
			upstream.do = func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
				return &testv1.Response{}, tc.call(ctx, other)
			}
			up.Read(t.Context(), &testv1.Request{})
			if len(keys) != 1 || keys[0] != "" {
				t.Errorf("a host not listed received the key: %v", keys)
			}

			// A key the application set itself is kept, alone: two values
			// would be a malformed key downstream.
			keys = nil
			upstream.do = func(ctx context.Context, _ string, _ *testv1.Request) (*testv1.Response, error) {
				return &testv1.Response{}, tc.call(metadata.AppendToOutgoingContext(ctx, "idempotency-key", `"the-apps-own"`), down)
			}
			up.Read(t.Context(), &testv1.Request{})
			if len(keys) != 1 || keys[0] != `"the-apps-own"` {
				t.Errorf("downstream saw keys %q, want the application's own key alone", keys)
			}
		})
	}
}

func TestNilEnginePanicsAtStartUp(t *testing.T) {
	for name, build := range map[string]func(){
		"ServerOptions":           func() { grpcadapter.ServerOptions(nil) },
		"UnaryServerInterceptor":  func() { grpcadapter.UnaryServerInterceptor(nil) },
		"StreamServerInterceptor": func() { grpcadapter.StreamServerInterceptor(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s(nil) must panic: a missing engine would leave every method ungoverned", name)
				}
			}()
			build()
		}()
	}
}

// Two values of the single-valued agentsafe-approval-id metadata are
// malformed: taking either would silently drop the other.
func TestAnApprovalHeaderSentTwiceIsInvalidArgument(t *testing.T) {
	var runs atomic.Int32
	svc := &options{do: func(context.Context, string, *testv1.Request) (*testv1.Response, error) {
		runs.Add(1)
		return &testv1.Response{}, nil
	}}
	c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "agentsafe-approval-id", "apr_00000000000000000000000000000000",
		"agentsafe-approval-id", "apr_11111111111111111111111111111111")
	_, err := c.Read(ctx, &testv1.Request{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || ourDetail(err).GetCode() != "INVALID_ARGUMENT" || !strings.Contains(st.Message(), adapter.HeaderApprovalID) {
		t.Errorf("%v, want InvalidArgument naming %s with agentsafe's detail", err, adapter.HeaderApprovalID)
	}
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times, want none", runs.Load())
	}
}
