package twirpadapter_test

import (
	"context"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// Capabilities come from the method options in protoregistry.GlobalFiles by
// full method name; a registry entry replaces an option as a whole and
// governs methods without one.
func TestMetadataFromOptionsAndRegistry(t *testing.T) {
	t.Parallel()
	t.Run("options", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil, &service{})
		env, _, _ := call(t.Context(), func(ctx context.Context) error {
			_, err := h.client(testv1.NewTestServiceProtobufClient).Read(ctx, &testv1.Request{FailTimes: 9})
			return err
		})
		if env.Attempts != 3 || h.svc.runs.Load() != 3 {
			t.Errorf("%d attempts, %d runs; want the option's 3", env.Attempts, h.svc.runs.Load())
		}
		h.final()
	})
	t.Run("registry overrides an option", func(t *testing.T) {
		t.Parallel()
		reg := middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead})
		h := newHarness(t, reg, &service{})
		env, _, _ := call(t.Context(), func(ctx context.Context) error {
			_, err := h.client(testv1.NewTestServiceProtobufClient).Read(ctx, &testv1.Request{FailTimes: 9})
			return err
		})
		if env.Attempts != 1 || h.svc.runs.Load() != 1 {
			t.Errorf("%d attempts, %d runs; want 1: the registry entry has no retry", env.Attempts, h.svc.runs.Load())
		}
		h.final()
	})
	t.Run("registry governs a method without an option", func(t *testing.T) {
		t.Parallel()
		reg := middleware.NewRegistry().Register(procUngoverned, middleware.Capability{
			SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond},
		})
		h := newHarness(t, reg, &service{})
		resp, err := h.client(testv1.NewTestServiceJSONClient).Ungoverned(t.Context(), &testv1.Request{FailTimes: 1})
		if err != nil || resp.Attempt != 2 || resp.ExecutionId == "" {
			t.Errorf("response %v, %v; want a governed success on attempt 2", resp, err)
		}
		if f := h.final(); f.Procedure != procUngoverned {
			t.Errorf("procedure %q, want %q (Twirp's path prefix stripped)", f.Procedure, procUngoverned)
		}
	})
}

// In strict mode a method without a capability is refused, not run.
func TestStrictMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, &service{}, middleware.WithStrict())
	env, _, err := call(t.Context(), func(ctx context.Context) error {
		_, err := h.client(testv1.NewTestServiceProtobufClient).Ungoverned(ctx, &testv1.Request{})
		return err
	})
	if te := twerr(t, err); te.Code() != twirp.NotFound || env.Error.Code != middleware.CodeCapabilityNotFound || h.svc.runs.Load() != 0 {
		t.Errorf("error %v (envelope %+v) after %d runs, want not_found CAPABILITY_NOT_FOUND, nothing run", err, env.Error, h.svc.runs.Load())
	}
	h.final()
}

// The interceptors of the application run outside agentsafe's, once per
// call, and Wrap refuses a constructor that drops its options.
func TestWrap(t *testing.T) {
	t.Parallel()
	t.Run("application interceptors wrap the execution", func(t *testing.T) {
		t.Parallel()
		eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
		if err != nil {
			t.Fatal(err)
		}
		var outer atomic.Int32
		var governedInside atomic.Bool
		count := twirp.Interceptor(func(next twirp.Method) twirp.Method {
			return func(ctx context.Context, req any) (any, error) {
				outer.Add(1)
				_, inExecution := middleware.ExecutionFromContext(ctx)
				governedInside.Store(inExecution)
				return next(ctx, req)
			}
		})
		svc := &service{}
		srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
			return testv1.NewTestServiceServer(svc, opts...)
		}, twirpadapter.WithServerOptions(twirp.WithServerInterceptors(count), nil))
		hs := httptest.NewServer(srv)
		defer hs.Close()
		resp, err := testv1.NewTestServiceProtobufClient(hs.URL, hs.Client()).Read(t.Context(), &testv1.Request{FailTimes: 2})
		if err != nil || resp.Attempt != 3 {
			t.Fatalf("%v, %v", resp, err)
		}
		if outer.Load() != 1 || governedInside.Load() {
			t.Errorf("the application's interceptor ran %d times (inside an execution: %t), want once, outside", outer.Load(), governedInside.Load())
		}
		if srv.PathPrefix() != testv1.TestServicePathPrefix {
			t.Errorf("PathPrefix %q, want the generated server's", srv.PathPrefix())
		}
	})
	t.Run("a constructor that drops the options panics", func(t *testing.T) {
		t.Parallel()
		eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if recover() == nil {
				t.Error("Wrap accepted a constructor that leaves the service ungoverned")
			}
		}()
		twirpadapter.Wrap(eng, func(...any) testv1.TwirpServer { return testv1.NewTestServiceServer(&service{}) })
	})
	t.Run("the generated server mounted instead of Wrap's fails closed", func(t *testing.T) {
		t.Parallel()
		eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
		if err != nil {
			t.Fatal(err)
		}
		svc := &service{}
		var inner testv1.TwirpServer
		twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
			inner = testv1.NewTestServiceServer(svc, opts...)
			return inner
		})
		hs := httptest.NewServer(inner)
		defer hs.Close()
		_, err = testv1.NewTestServiceProtobufClient(hs.URL, hs.Client()).Write(t.Context(), &testv1.Request{})
		if te := twerr(t, err); te.Code() != twirp.Internal || svc.runs.Load() != 0 {
			t.Errorf("error %v after %d runs: a governed method must not run outside Wrap's server", err, svc.runs.Load())
		}
	})
}

// The request is copied only when a retry is possible, and then only for
// the attempts after the first: a call that cannot be retried runs on the
// message Twirp decoded.
func TestRequestIsCopiedOnlyForRetries(t *testing.T) {
	t.Parallel()
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	type decodedKey struct{}
	decoded := twirp.Interceptor(func(next twirp.Method) twirp.Method {
		return func(ctx context.Context, req any) (any, error) {
			return next(context.WithValue(ctx, decodedKey{}, req), req)
		}
	})
	var mu sync.Mutex
	original := map[string][]bool{} // by request id, per attempt: did it get the decoded message?
	svc := &service{hook: func(ctx context.Context, in *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		original[in.Id] = append(original[in.Id], ctx.Value(decodedKey{}) == any(in))
		return nil, nil
	}}
	srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(svc, opts...)
	}, twirpadapter.WithServerOptions(twirp.WithServerInterceptors(decoded)))
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := testv1.NewTestServiceProtobufClient(hs.URL, hs.Client())
	if _, err := client.Read(t.Context(), &testv1.Request{Id: "read", FailTimes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(t.Context(), &testv1.Request{Id: "write"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string][]bool{"read": {true, false}, "write": {true}}; !maps.EqualFunc(original, want, slices.Equal) {
		t.Errorf("attempts given the decoded message: %v, want %v", original, want)
	}
}
