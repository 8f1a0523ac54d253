package grpcadapter_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/resultstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// keyService answers Write and IdempotentWrite: a response naming the
// execution, a plain failure for mode "fail", and for mode "block" it
// holds until its context ends.
type keyService struct {
	testv1.UnimplementedTestServiceServer
	runs    atomic.Int32
	started chan struct{}
}

func (s *keyService) handle(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	s.runs.Add(1)
	x, _ := middleware.ExecutionFromContext(ctx)
	switch r.GetMode() {
	case "fail":
		return nil, errors.New("the reply was lost")
	case "block":
		s.started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	case "closed":
		return nil, status.Error(codes.FailedPrecondition, "order 42 is closed")
	}
	return &testv1.Response{Id: r.GetId(), ExecutionId: x.ID, IdempotencyKey: x.IdempotencyKey, Note: "refund ref-1"}, nil
}

func (s *keyService) Write(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, r)
}

func (s *keyService) IdempotentWrite(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	return s.handle(ctx, r)
}

// reconciled is what the Reconcile hook of IdempotentWrite (here an
// external write that can look its effect up) finds.
var reconciled = &testv1.Response{Id: "w-1", Note: "found at the gateway: refund ref-7"}

// call makes one unary call with the caller's key and returns the
// response, its header metadata and error.
func call(ctx context.Context, m func(context.Context, *testv1.Request, ...grpc.CallOption) (*testv1.Response, error), in *testv1.Request, key string) (*testv1.Response, metadata.MD, error) {
	var header, trailer metadata.MD
	resp, err := m(metadata.AppendToOutgoingContext(ctx, "idempotency-key", key), in, grpc.Header(&header), grpc.Trailer(&trailer))
	return resp, metadata.Join(header, trailer), err
}

// one is the single value of key in md, or "".
func one(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	}
	return ""
}

func wantRefusal(t *testing.T, md metadata.MD, err error, code codes.Code, as middleware.Code) {
	t.Helper()
	env, _ := grpcadapter.EnvelopeFrom(md, nil, err)
	if status.Code(err) != code || env.Error == nil || env.Error.Code != as {
		t.Errorf("got %v (%+v), want %s with %s", err, env.Error, code, as)
	}
}

// TestKeysOverGRPC: a repeat with the caller's key is replayed (the same
// message by proto.Equal, the same execution id, agentsafe-replayed), a
// handler's own status too; a repeat while the first runs is Aborted
// IDEMPOTENCY_IN_FLIGHT, another input under the key FailedPrecondition
// IDEMPOTENCY_KEY_REUSED, a key in doubt FailedPrecondition
// IDEMPOTENCY_IN_DOUBT, or the reconciled message when the capability
// reconciles.
func TestKeysOverGRPC(t *testing.T) {
	reg := middleware.NewRegistry().
		Register(testv1.TestService_Write_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register(testv1.TestService_IdempotentWrite_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectExternal,
			Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
				return middleware.Reconciled{Done: true, Response: reconciled}, nil
			}})
	eng := newEngine(t, reg, middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	svc := &keyService{started: make(chan struct{}, 1)}
	c := testv1.NewTestServiceClient(serve(t, eng, svc))
	ctx := t.Context()

	first, md1, err := call(ctx, c.Write, &testv1.Request{Id: "w-1"}, "order-42")
	if err != nil {
		t.Fatal(err)
	}
	again, md2, err := call(ctx, c.Write, &testv1.Request{Id: "w-1"}, `"order-42"`)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first, again) || svc.runs.Load() != 1 {
		t.Errorf("a repeat replays the stored message and runs nothing: %v then %v, %d runs", first, again, svc.runs.Load())
	}
	if one(md2, "agentsafe-execution-id") != one(md1, "agentsafe-execution-id") || one(md2, "agentsafe-replayed") != "true" {
		t.Errorf("a replay carries the first execution's id and agentsafe-replayed: %v", md2)
	}

	_, md, err := call(ctx, c.Write, &testv1.Request{Id: "w-2"}, "order-42")
	wantRefusal(t, md, err, codes.FailedPrecondition, middleware.CodeIdempotencyKeyReused)

	_, _, own := call(ctx, c.Write, &testv1.Request{Id: "w-5", Mode: "closed"}, "closed")
	_, md, err = call(ctx, c.Write, &testv1.Request{Id: "w-5", Mode: "closed"}, "closed")
	if !proto.Equal(status.Convert(err).Proto(), status.Convert(own).Proto()) || one(md, "agentsafe-replayed") != "true" {
		t.Errorf("a handler's own status is replayed unchanged: %v, first %v", err, own)
	}

	blocked, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := call(blocked, c.Write, &testv1.Request{Id: "w-3", Mode: "block"}, "slow")
		done <- err
	}()
	<-svc.started
	_, md, err = call(ctx, c.Write, &testv1.Request{Id: "w-3", Mode: "block"}, "slow")
	wantRefusal(t, md, err, codes.Aborted, middleware.CodeIdempotencyInFlight)
	cancel()
	<-done

	_, _, _ = call(ctx, c.Write, &testv1.Request{Id: "w-4", Mode: "fail"}, "doubt")
	_, md, err = call(ctx, c.Write, &testv1.Request{Id: "w-4", Mode: "fail"}, "doubt")
	wantRefusal(t, md, err, codes.FailedPrecondition, middleware.CodeIdempotencyInDoubt)

	_, _, _ = call(ctx, c.IdempotentWrite, &testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile")
	res, md, err := call(ctx, c.IdempotentWrite, &testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile")
	if err != nil || !proto.Equal(res, reconciled) || one(md, "agentsafe-replayed") != "true" {
		t.Errorf("a key in doubt that Reconcile finds done replays the reconciled message: %v, %v", res, err)
	}
}

// TestAnEmptyKeyIsMalformed: idempotency-key metadata that is there but
// empty is no key of 1 to 255 characters: InvalidArgument naming it, and
// nothing runs; two values are refused alike.
func TestAnEmptyKeyIsMalformed(t *testing.T) {
	reg := middleware.NewRegistry().Register(testv1.TestService_Write_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectWrite})
	eng := newEngine(t, reg, middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	svc := &keyService{started: make(chan struct{}, 1)}
	c := testv1.NewTestServiceClient(serve(t, eng, svc))
	for name, ctx := range map[string]context.Context{
		"empty":      metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", ""),
		"two values": metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "a", "idempotency-key", "b"),
	} {
		var header, trailer metadata.MD
		_, err := c.Write(ctx, &testv1.Request{Id: "w-1"}, grpc.Header(&header), grpc.Trailer(&trailer))
		wantRefusal(t, metadata.Join(header, trailer), err, codes.InvalidArgument, middleware.CodeInvalidArgument)
		if st := status.Convert(err); !strings.Contains(st.Message(), "Idempotency-Key") {
			t.Errorf("%s: the refusal names the header: %q", name, st.Message())
		}
	}
	if n := svc.runs.Load(); n != 0 {
		t.Errorf("a malformed key runs nothing: %d runs", n)
	}
}
