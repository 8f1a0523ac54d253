package twirpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/resultstore"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
	"google.golang.org/protobuf/proto"
)

// keyService answers Write and IdempotentWrite: a response naming the
// execution, a plain failure for mode "fail", a twirp.Error for mode
// "closed", and for mode "block" it holds until its context ends.
type keyService struct {
	testv1.TestService // the rest is not called
	runs               atomic.Int32
	started            chan struct{}
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
		return nil, twirp.NewError(twirp.FailedPrecondition, "order 42 is closed").WithMeta("order", "42")
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

// keyedCall makes one call with the caller's key and returns the
// response, the envelope and the error.
func keyedCall(t *testing.T, m func(context.Context, *testv1.Request) (*testv1.Response, error), in *testv1.Request, key string) (*testv1.Response, middleware.Envelope, error) {
	t.Helper()
	ctx, err := twirp.WithHTTPRequestHeaders(t.Context(), http.Header{adapter.HeaderIdempotencyKey: {key}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, rec := twirpadapter.RecordEnvelope(ctx)
	resp, err := m(ctx, in)
	env, _ := rec.Envelope(err)
	return resp, env, err
}

func wantRefusal(t *testing.T, env middleware.Envelope, err error, code twirp.ErrorCode, as middleware.Code) {
	t.Helper()
	twerr, _ := errors.AsType[twirp.Error](err)
	if twerr == nil || twerr.Code() != code || env.Error == nil || env.Error.Code != as {
		t.Errorf("got %v (%+v), want %s with %s", err, env.Error, code, as)
	}
}

// TestKeysOverTwirp: a repeat with the caller's key is replayed (the same
// message by proto.Equal, the same execution id, Agentsafe-Replayed), a
// handler's own twirp.Error too; a repeat while the first runs is aborted
// IDEMPOTENCY_IN_FLIGHT, another input under the key failed_precondition
// IDEMPOTENCY_KEY_REUSED, a key in doubt failed_precondition
// IDEMPOTENCY_IN_DOUBT, or the reconciled message when the capability
// reconciles; in the protobuf and JSON encodings.
func TestKeysOverTwirp(t *testing.T) {
	for name, newClient := range map[string]func(string, testv1.HTTPClient, ...twirp.ClientOption) testv1.TestService{
		"protobuf": testv1.NewTestServiceProtobufClient, "json": testv1.NewTestServiceJSONClient,
	} {
		t.Run(name, func(t *testing.T) {
			reg := middleware.NewRegistry().
				Register(testv1.TestService_Write_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectWrite}).
				Register(testv1.TestService_IdempotentWrite_FullMethodName, middleware.Capability{SideEffect: middleware.SideEffectExternal,
					Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
						return middleware.Reconciled{Done: true, Response: reconciled}, nil
					}})
			eng, err := middleware.New(reg, middleware.WithResultStore(resultstore.NewMemory()), middleware.WithApprovalStore(approvalstore.NewMemory()),
				middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
			if err != nil {
				t.Fatal(err)
			}
			svc := &keyService{started: make(chan struct{}, 1)}
			hs := httptest.NewServer(twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer { return testv1.NewTestServiceServer(svc, opts...) }))
			t.Cleanup(hs.Close)
			c := newClient(hs.URL, &http.Client{Transport: twirpadapter.Transport(hs.Client().Transport)})

			first, env1, err := keyedCall(t, c.Write, &testv1.Request{Id: "w-1"}, "order-42")
			if err != nil {
				t.Fatal(err)
			}
			again, env2, err := keyedCall(t, c.Write, &testv1.Request{Id: "w-1"}, `"order-42"`)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(first, again) || svc.runs.Load() != 1 || env2.ExecutionID != env1.ExecutionID || !env2.Replayed {
				t.Errorf("a repeat replays the stored message and envelope, and runs nothing: %v then %v (%+v), %d runs", first, again, env2, svc.runs.Load())
			}

			_, env, err := keyedCall(t, c.Write, &testv1.Request{Id: "w-2"}, "order-42")
			wantRefusal(t, env, err, twirp.FailedPrecondition, middleware.CodeIdempotencyKeyReused)

			_, _, own := keyedCall(t, c.Write, &testv1.Request{Id: "w-5", Mode: "closed"}, "closed")
			_, env, err = keyedCall(t, c.Write, &testv1.Request{Id: "w-5", Mode: "closed"}, "closed")
			twerr, _ := errors.AsType[twirp.Error](err)
			if twerr == nil || twerr.Error() != own.Error() || twerr.Meta("order") != "42" || !env.Replayed {
				t.Errorf("a handler's own twirp.Error is replayed unchanged: %v (%+v), first %v", err, env, own)
			}

			blocked, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				ctx, _ := twirp.WithHTTPRequestHeaders(blocked, http.Header{adapter.HeaderIdempotencyKey: {"slow"}})
				_, err := c.Write(ctx, &testv1.Request{Id: "w-3", Mode: "block"})
				done <- err
			}()
			<-svc.started
			_, env, err = keyedCall(t, c.Write, &testv1.Request{Id: "w-3", Mode: "block"}, "slow")
			wantRefusal(t, env, err, twirp.Aborted, middleware.CodeIdempotencyInFlight)
			cancel()
			<-done

			_, _, _ = keyedCall(t, c.Write, &testv1.Request{Id: "w-4", Mode: "fail"}, "doubt")
			_, env, err = keyedCall(t, c.Write, &testv1.Request{Id: "w-4", Mode: "fail"}, "doubt")
			wantRefusal(t, env, err, twirp.FailedPrecondition, middleware.CodeIdempotencyInDoubt)

			_, _, _ = keyedCall(t, c.IdempotentWrite, &testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile")
			res, env, err := keyedCall(t, c.IdempotentWrite, &testv1.Request{Id: "w-1", Mode: "fail"}, "reconcile")
			if err != nil || !proto.Equal(res, reconciled) || !env.Replayed {
				t.Errorf("a key in doubt that Reconcile finds done replays the reconciled message: %v, %v", res, err)
			}
		})
	}
}
