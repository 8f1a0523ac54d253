package twirpadapter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/twitchtv/twirp"
)

func TestRetriesOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	type call func(testv1.TestService, context.Context, *testv1.Request) (*testv1.Response, error)
	read, write, idemWrite := testv1.TestService.Read, testv1.TestService.Write, testv1.TestService.IdempotentWrite
	cases := []struct {
		name      string
		call      call
		req       *testv1.Request
		wantRuns  int
		wantCode  twirp.ErrorCode // NoError: success
		retryable bool
	}{
		{"a read is retried on unavailable", read, &testv1.Request{FailTimes: 2}, 3, twirp.NoError, false},
		{"retries stop after MaxRetries re-attempts", read, &testv1.Request{FailTimes: 5}, 3, twirp.Unavailable, true},
		{"a read is not retried on a permanent error", read, &testv1.Request{FailTimes: 1, FailCode: "invalid_argument"}, 1, twirp.InvalidArgument, false},
		{"a plain error is not retried", read, &testv1.Request{FailTimes: 1, FailCode: "plain"}, 1, twirp.Internal, false},
		{"a write that is not idempotent is never retried", write, &testv1.Request{FailTimes: 1}, 1, twirp.Unavailable, false},
		{"an idempotent write is retried", idemWrite, &testv1.Request{FailTimes: 1}, 2, twirp.NoError, false},
	}
	for _, enc := range encodings {
		for _, tc := range cases {
			t.Run(enc.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, nil, &service{})
				ctx, header := withHeaders(t.Context())
				resp, err := tc.call(h.client(enc.newClient), ctx, tc.req)
				if got := int(h.svc.runs.Load()); got != tc.wantRuns {
					t.Errorf("handler ran %d times, want %d", got, tc.wantRuns)
				}
				if tc.wantCode == twirp.NoError {
					if err != nil || resp.Attempt != int32(tc.wantRuns) {
						t.Fatalf("call: %v, %v; want success on attempt %d", resp, err, tc.wantRuns)
					}
				} else {
					te := twerr(t, err)
					env, ok := envelopeOf(err)
					if te.Code() != tc.wantCode || !ok || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable != tc.retryable || env.Attempts != tc.wantRuns {
						t.Errorf("error %v (envelope %+v, %+v), want %s, EXECUTION_FAILED, retryable=%t after %d attempts", err, env, env.Error, tc.wantCode, tc.retryable, tc.wantRuns)
					}
				}
				if got := header.Get(middleware.HeaderAttempts); got != itoa(tc.wantRuns) {
					t.Errorf("%s = %q, want %d", middleware.HeaderAttempts, got, tc.wantRuns)
				}
				if got := header.Get("X-Attempt"); got != itoa(tc.wantRuns) {
					t.Errorf("X-Attempt = %q, want the finalized attempt's %d", got, tc.wantRuns)
				}
				h.final()
			})
		}
	}
}

func TestTimeoutVersusCancellation(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			t.Run("an attempt's own timeout is TIMEOUT, deadline_exceeded", func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, nil, &service{})
				_, err := h.client(enc.newClient).Slow(t.Context(), &testv1.Request{Mode: "honour"}) // 50ms, from the option
				te := twerr(t, err)
				env, _ := envelopeOf(err)
				if te.Code() != twirp.DeadlineExceeded || env.Status != middleware.StatusCancelled || env.Error.Code != middleware.CodeTimeout || !env.Error.Retryable {
					t.Errorf("error %v, envelope %+v %+v; want deadline_exceeded, cancelled TIMEOUT, retryable", err, env, env.Error)
				}
				if f := h.final(); f.Type != middleware.EventCancelled || f.Code != middleware.CodeTimeout {
					t.Errorf("final event %s %s, want capability.cancelled TIMEOUT", f.Type, f.Code)
				}
			})
			t.Run("the client leaving is CANCELLED, never retried", func(t *testing.T) {
				t.Parallel()
				started, ended := make(chan struct{}, 4), make(chan error, 4)
				svc := &service{hook: func(ctx context.Context, _ *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
					started <- struct{}{}
					<-ctx.Done()
					ended <- ctx.Err()
					return nil, twirp.NewError(twirp.Unavailable, "gave up") // transient, yet never retried
				}}
				reg := middleware.NewRegistry().Register(procRead, middleware.Capability{
					SideEffect: middleware.SideEffectRead, Timeout: time.Minute, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond},
				})
				h := newHarness(t, reg, svc)
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error, 1)
				client := h.client(enc.newClient)
				go func() {
					_, err := client.Read(ctx, &testv1.Request{})
					errc <- err
				}()
				recv(t, started, "the handler to start")
				cancel()
				if err := recv(t, errc, "the client"); !errors.Is(err, context.Canceled) {
					t.Errorf("client error %v, want context.Canceled", err)
				}
				if err := recv(t, ended, "the handler's context to end"); !errors.Is(err, context.Canceled) {
					t.Errorf("the handler's context ended with %v, want cancellation", err)
				}
				if f := h.final(); f.Type != middleware.EventCancelled || f.Code != middleware.CodeCancelled || f.Attempts != 1 {
					t.Errorf("final event %s %s after %d attempts, want capability.cancelled CANCELLED after 1", f.Type, f.Code, f.Attempts)
				}
				if n := svc.runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want 1", n)
				}
			})
		})
	}
}
