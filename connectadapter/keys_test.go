package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/resultstore"
	"google.golang.org/protobuf/proto"
)

// keyService answers Write and IdempotentWrite: a response naming the
// execution, a plain failure for mode "fail", and for mode "block" it
// holds until its context ends.
type keyService struct {
	testv1connect.UnimplementedTestServiceHandler
	runs    atomic.Int32
	started chan struct{}
}

func (s *keyService) handle(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	s.runs.Add(1)
	x, _ := middleware.ExecutionFromContext(ctx)
	switch r.Msg.GetMode() {
	case "fail":
		return nil, errors.New("the reply was lost")
	case "block":
		s.started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return connect.NewResponse(&testv1.Response{Id: r.Msg.GetId(), ExecutionId: x.ID, IdempotencyKey: x.IdempotencyKey, Note: "refund ref-1"}), nil
}

func (s *keyService) Write(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.handle(ctx, r)
}

func (s *keyService) IdempotentWrite(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.handle(ctx, r)
}

// reconciled is what the Reconcile hook of IdempotentWrite (here an
// external write that can look its effect up) finds.
var reconciled = &testv1.Response{Id: "w-1", Note: "found at the gateway: refund ref-7"}

func keyServer(t *testing.T) (*keyService, string) {
	reg := middleware.NewRegistry().
		Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register(procIdemWrite, middleware.Capability{SideEffect: middleware.SideEffectExternal,
			Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
				return middleware.Reconciled{Done: true, Response: reconciled}, nil
			}})
	eng, err := middleware.New(reg, middleware.WithResultStore(resultstore.NewMemory()), middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	if err != nil {
		t.Fatal(err)
	}
	svc := &keyService{started: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.Handle(testv1connect.NewTestServiceHandler(svc, connect.WithInterceptors(connectadapter.NewInterceptor(eng))))
	return svc, serve(t, mux)
}

func keyed(msg *testv1.Request, key string) *connect.Request[testv1.Request] {
	r := connect.NewRequest(msg)
	r.Header().Set(adapter.HeaderIdempotencyKey, key)
	return r
}

// wantCode checks a refusal's Connect code and agentsafe code.
func wantRefusal(t *testing.T, err error, code connect.Code, as middleware.Code) {
	t.Helper()
	env, _ := connectadapter.ReadEnvelope(nil, err)
	if connect.CodeOf(err) != code || env.Error == nil || env.Error.Code != as {
		t.Errorf("got %v (%+v), want %s with %s", err, env.Error, code, as)
	}
}

// TestKeysOverConnect: a repeat with the caller's key is replayed (the
// same message by proto.Equal, the same execution id, Agentsafe-Replayed),
// a repeat while the first runs is Aborted IDEMPOTENCY_IN_FLIGHT, another
// input under the key FailedPrecondition IDEMPOTENCY_KEY_REUSED, a key in
// doubt FailedPrecondition IDEMPOTENCY_IN_DOUBT, or the reconciled message
// when the capability reconciles; over every protocol.
func TestKeysOverConnect(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		svc, url := keyServer(t)
		c := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), url, p.opts...)
		ctx := t.Context()

		first, err := c.Write(ctx, keyed(&testv1.Request{Id: "w-1"}, "order-42"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.Write(ctx, keyed(&testv1.Request{Id: "w-1"}, `"order-42"`))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(first.Msg, again.Msg) || svc.runs.Load() != 1 {
			t.Errorf("a repeat replays the stored message and runs nothing: %v then %v, %d runs", first.Msg, again.Msg, svc.runs.Load())
		}
		if again.Header().Get(adapter.HeaderExecutionID) != first.Header().Get(adapter.HeaderExecutionID) || again.Header().Get(adapter.HeaderReplayed) != "true" {
			t.Errorf("a replay carries the first execution's id and %s: %v", adapter.HeaderReplayed, again.Header())
		}

		_, err = c.Write(ctx, keyed(&testv1.Request{Id: "w-2"}, "order-42"))
		wantRefusal(t, err, connect.CodeFailedPrecondition, middleware.CodeIdempotencyKeyReused)

		blocked, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(blocked, keyed(&testv1.Request{Id: "w-3", Mode: "block"}, "slow"))
			done <- err
		}()
		<-svc.started
		_, err = c.Write(ctx, keyed(&testv1.Request{Id: "w-3", Mode: "block"}, "slow"))
		wantRefusal(t, err, connect.CodeAborted, middleware.CodeIdempotencyInFlight)
		cancel()
		<-done

		_, _ = c.Write(ctx, keyed(&testv1.Request{Id: "w-4", Mode: "fail"}, "doubt"))
		_, err = c.Write(ctx, keyed(&testv1.Request{Id: "w-4", Mode: "fail"}, "doubt"))
		wantRefusal(t, err, connect.CodeFailedPrecondition, middleware.CodeIdempotencyInDoubt)

		_, _ = c.IdempotentWrite(ctx, keyed(&testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile"))
		res, err := c.IdempotentWrite(ctx, keyed(&testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile"))
		if err != nil || !proto.Equal(res.Msg, reconciled) || res.Header().Get(adapter.HeaderReplayed) != "true" {
			t.Errorf("a key in doubt that Reconcile finds done replays the reconciled message: %v, %v", res, err)
		}
	})
}

// TestAReplayIsReencodedForTheRepeatsProtocol: a result stored from a
// binary Connect call is replayed to a repeat over another protocol and
// codec (gRPC, Connect with JSON, a GET) as that repeat's client expects:
// the same message by proto.Equal.
func TestAReplayIsReencodedForTheRepeatsProtocol(t *testing.T) {
	svc, url := keyServer(t)
	first, err := testv1connect.NewTestServiceClient(httpClient(t, false), url).Write(t.Context(), keyed(&testv1.Request{Id: "w-1"}, "across"))
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]connect.ClientOption{
		"grpc":         {connect.WithGRPC()},
		"grpc-web":     {connect.WithGRPCWeb()},
		"connect json": {connect.WithProtoJSON()},
		"grpc json":    {connect.WithGRPC(), connect.WithProtoJSON()},
	} {
		again, err := testv1connect.NewTestServiceClient(httpClient(t, false), url, opts...).Write(t.Context(), keyed(&testv1.Request{Id: "w-1"}, "across"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !proto.Equal(first.Msg, again.Msg) || again.Header().Get(adapter.HeaderReplayed) != "true" {
			t.Errorf("%s: the replay is the stored message: %v, first %v", name, again.Msg, first.Msg)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("one key, one run: %d", n)
	}
}
