package twirpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
		_, err := h.client(testv1.NewTestServiceProtobufClient).Read(t.Context(), &testv1.Request{FailTimes: 9})
		if env, _ := envelopeOf(err); env.Attempts != 3 || h.svc.runs.Load() != 3 {
			t.Errorf("%d attempts, %d runs; want the option's 3", env.Attempts, h.svc.runs.Load())
		}
		h.final()
	})
	t.Run("registry overrides an option", func(t *testing.T) {
		t.Parallel()
		reg := middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead})
		h := newHarness(t, reg, &service{})
		_, err := h.client(testv1.NewTestServiceProtobufClient).Read(t.Context(), &testv1.Request{FailTimes: 9})
		if env, _ := envelopeOf(err); env.Attempts != 1 || h.svc.runs.Load() != 1 {
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

func TestBadInput(t *testing.T) {
	t.Parallel()
	t.Run("a malformed approval header is invalid_argument naming it", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil, &service{})
		ctx, err := twirp.WithHTTPRequestHeaders(t.Context(), http.Header{middleware.HeaderApprovalID: {"apr_not-an-id"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.client(testv1.NewTestServiceJSONClient).Write(ctx, &testv1.Request{})
		te := twerr(t, err)
		env, _ := envelopeOf(err)
		if te.Code() != twirp.InvalidArgument || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(te.Msg(), middleware.HeaderApprovalID) {
			t.Errorf("error %v (envelope %+v), want invalid_argument INVALID_ARGUMENT naming %s", err, env.Error, middleware.HeaderApprovalID)
		}
		if h.svc.runs.Load() != 0 {
			t.Error("the handler ran despite a malformed approval header")
		}
		h.final()
	})
	t.Run("strict mode refuses a method without capability", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil, &service{}, middleware.WithStrict())
		_, err := h.client(testv1.NewTestServiceProtobufClient).Ungoverned(t.Context(), &testv1.Request{})
		te := twerr(t, err)
		env, _ := envelopeOf(err)
		if te.Code() != twirp.NotFound || env.Error.Code != middleware.CodeCapabilityNotFound || h.svc.runs.Load() != 0 {
			t.Errorf("error %v (envelope %+v) after %d runs, want not_found CAPABILITY_NOT_FOUND, nothing run", err, env.Error, h.svc.runs.Load())
		}
		h.final()
	})
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
}

// A Twirp handler that answers canceled or deadline_exceeded because its
// context ended gave up: the outcome is the context's (CANCELLED here), not
// a failure of its own. The handler ends its caller's context itself and
// returns at once, so its answer usually reaches the engine before the
// engine sees the context end; every round must be CANCELLED.
func TestHandlerGivingUpWithItsContextIsTheContextsOutcome(t *testing.T) {
	t.Parallel()
	reg := middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead})
	eng, err := middleware.New(reg, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	type cancelKey struct{}
	svc := &service{hook: func(ctx context.Context, _ *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		ctx.Value(cancelKey{}).(context.CancelFunc)()
		return nil, twirp.NewError(twirp.Canceled, "gave up: "+ctx.Err().Error())
	}}
	srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer { return testv1.NewTestServiceServer(svc, opts...) })
	for range 50 {
		ctx, cancel := context.WithCancel(t.Context())
		ctx = context.WithValue(ctx, cancelKey{}, context.CancelFunc(cancel))
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, testv1.TestServicePathPrefix+"Read", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if body := rec.Body.String(); !strings.Contains(body, `"agentsafe_code":"CANCELLED"`) {
			t.Fatalf("%d %s, want CANCELLED", rec.Code, body)
		}
	}
}

// On a fake clock, in process: an attempt's timeout is the capability's,
// and a handler honouring it ends TIMEOUT, retryable.
func TestAttemptTimeoutOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Minute})
		eng, err := middleware.New(reg, middleware.WithApprovalStore(approvalstore.NewMemory()))
		if err != nil {
			t.Fatal(err)
		}
		srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer {
			return testv1.NewTestServiceServer(&service{}, opts...)
		})
		req := httptest.NewRequest(http.MethodPost, testv1.TestServicePathPrefix+"Read", strings.NewReader(`{"mode":"honour"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		start := time.Now()
		srv.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != http.StatusRequestTimeout || !strings.Contains(body, `"agentsafe_code":"TIMEOUT"`) || !strings.Contains(body, `"agentsafe_retryable":"true"`) {
			t.Errorf("%d %s, want deadline_exceeded with TIMEOUT, retryable", rec.Code, body)
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("answered after %s, want the attempt timeout of 1m", d)
		}
	})
}
