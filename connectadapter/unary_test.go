package connectadapter_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
)

// Runtime retries follow the method options: the read and the idempotent
// write are retried after a transient failure, the plain write is not.
func TestRetriesFollowCapability(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{})
		c := srv.client(t, p)
		ctx := t.Context()

		t.Run("read is retried", func(t *testing.T) {
			res, err := c.Read(ctx, request(&testv1.Request{Id: "r1", FailTimes: 2, FailCode: "unavailable"}))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if res.Msg.GetAttempt() != 3 {
				t.Errorf("answered by attempt %d, want 3 (two transient failures, then success)", res.Msg.GetAttempt())
			}
			env, ok := connectadapter.ReadEnvelope(res, err)
			if !ok || env.Attempts != 3 || env.ExecutionID != res.Msg.GetExecutionId() || env.Status != middleware.StatusCompleted {
				t.Errorf("envelope %+v (ok=%t), want completed after 3 attempts of %s", env, ok, res.Msg.GetExecutionId())
			}
			srv.sink.final(t)
			srv.sink.wantTypes(t, env.ExecutionID, middleware.EventRequested, middleware.EventStarted,
				middleware.EventRetried, middleware.EventRetried, middleware.EventCompleted)
			keys := map[string]bool{}
			for _, x := range srv.svc.executions() {
				if x.ID == env.ExecutionID {
					keys[x.IdempotencyKey] = true
				}
			}
			if len(keys) != 1 || !keys[res.Msg.GetIdempotencyKey()] {
				t.Errorf("idempotency keys across attempts %v, want the one key %s", keys, res.Msg.GetIdempotencyKey())
			}
		})

		t.Run("idempotent write is retried", func(t *testing.T) {
			res, err := c.IdempotentWrite(ctx, request(&testv1.Request{Id: "w1", FailTimes: 1, FailCode: "unavailable"}))
			if err != nil {
				t.Fatalf("IdempotentWrite: %v", err)
			}
			if res.Msg.GetAttempt() != 2 || res.Header().Get(middleware.HeaderAttempts) != "2" {
				t.Errorf("attempt %d, header %q; want 2 and 2", res.Msg.GetAttempt(), res.Header().Get(middleware.HeaderAttempts))
			}
			srv.sink.final(t)
		})

		t.Run("plain write is not retried", func(t *testing.T) {
			before := srv.svc.runs.Load()
			_, err := c.Write(ctx, request(&testv1.Request{Id: "w2", FailTimes: 1, FailCode: "unavailable"}))
			ce := wantConnectCode(t, err, connect.CodeUnavailable)
			if ce.Message() != "backend unavailable" {
				t.Errorf("message %q, want the handler's own", ce.Message())
			}
			if runs := srv.svc.runs.Load() - before; runs != 1 {
				t.Errorf("a non-idempotent write ran %d times, want 1: a write-like capability must not be retried without Idempotent", runs)
			}
			env, ok := connectadapter.ReadEnvelope(nil, err)
			if !ok || env.Attempts != 1 || env.Error.Retryable {
				t.Errorf("envelope %+v, want 1 attempt and not retryable for the caller", env)
			}
			srv.sink.final(t)
		})

		t.Run("permanent error is not retried", func(t *testing.T) {
			before := srv.svc.runs.Load()
			_, err := c.Read(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "invalid_argument"}))
			wantConnectCode(t, err, connect.CodeInvalidArgument)
			if runs := srv.svc.runs.Load() - before; runs != 1 {
				t.Errorf("ran %d times, want 1: only transient errors are retried", runs)
			}
			srv.sink.final(t)
		})

		if got, want := srv.httpMajor(), []int{map[bool]int{false: 1, true: 2}[p.h2c]}; !slices.Equal(got, want) {
			t.Errorf("server saw HTTP major versions %v, want %v", got, want)
		}
	})
}

// An attempt's own timeout is TIMEOUT, written as DeadlineExceeded.
func TestTimeoutIsDeadlineExceeded(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{})
		_, err := srv.client(t, p).Slow(t.Context(), request(&testv1.Request{Mode: "block"}))
		ce := wantConnectCode(t, err, connect.CodeDeadlineExceeded)
		env, ok := connectadapter.ReadEnvelope(nil, err)
		if !ok || env.Error.Code != middleware.CodeTimeout || !env.Error.Retryable || env.Status != middleware.StatusCancelled {
			t.Fatalf("envelope %+v (ok=%t), want TIMEOUT, retryable for a read", env, ok)
		}
		if !strings.Contains(ce.Message(), "timed out after 50ms") {
			t.Errorf("message %q does not say which timeout fired", ce.Message())
		}
		if fin := srv.sink.final(t); fin.Code != middleware.CodeTimeout || fin.Type != middleware.EventCancelled {
			t.Errorf("final event %+v, want capability.cancelled TIMEOUT", fin)
		}
	})
}

// The client's own deadline or cancellation ends the execution CANCELLED,
// never retried, even for a read with retries configured.
func TestCallerLeavingIsCancelledWithoutRetry(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		for _, tc := range []struct {
			name string
			want connect.Code
			ctx  func(context.Context, <-chan struct{}) (context.Context, context.CancelFunc)
		}{
			{"deadline", connect.CodeDeadlineExceeded, func(ctx context.Context, _ <-chan struct{}) (context.Context, context.CancelFunc) {
				// Long enough for the call to reach the handler on a loaded
				// machine; the capability's own timeout is far longer.
				return context.WithTimeout(ctx, 300*time.Millisecond)
			}},
			{"cancel", connect.CodeCanceled, func(ctx context.Context, started <-chan struct{}) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				go func() {
					select {
					case <-started:
						cancel()
					case <-ctx.Done():
					}
				}()
				return ctx, cancel
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				started := make(chan struct{}, 8)
				reg := middleware.NewRegistry().Register(procRead, middleware.Capability{
					SideEffect: middleware.SideEffectRead, Timeout: time.Minute, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond},
				})
				srv := newServer(t, serverConfig{reg: reg, handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
					started <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				}})
				ctx, cancel := tc.ctx(t.Context(), started)
				defer cancel()
				_, err := srv.client(t, p).Read(ctx, request(&testv1.Request{}))
				// The server learns the client's deadline from the request
				// and may answer CANCELLED just before the client's own timer
				// fires; otherwise the client reports its own error, which
				// carries no envelope.
				if code := connect.CodeOf(err); code != tc.want && code != connect.CodeCanceled {
					t.Fatalf("connect code %s (%v), want %s", code, err, tc.want)
				}
				if env, ok := connectadapter.ReadEnvelope(nil, err); ok && env.Error.Code != middleware.CodeCancelled {
					t.Errorf("envelope %+v, want CANCELLED", env)
				}
				fin := srv.sink.final(t)
				if fin.Code != middleware.CodeCancelled || fin.Attempts != 1 {
					t.Errorf("final event %+v, want CANCELLED after 1 attempt", fin)
				}
				if runs := srv.svc.runs.Load(); runs != 1 {
					t.Errorf("handler ran %d times, want 1: the caller leaving is terminal", runs)
				}
			})
		}
	})
}

// Interceptors listed before the guard run once per execution, those after
// it once per attempt.
func TestInterceptorOrder(t *testing.T) {
	var outer, inner atomic.Int32
	count := func(n *atomic.Int32) connect.Interceptor {
		return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				n.Add(1)
				return next(ctx, req)
			}
		})
	}
	srv := newServer(t, serverConfig{before: []connect.Interceptor{count(&outer)}, after: []connect.Interceptor{count(&inner)}})
	if _, err := srv.client(t, protocols[0]).Read(t.Context(), request(&testv1.Request{FailTimes: 2, FailCode: "unavailable"})); err != nil {
		t.Fatal(err)
	}
	if outer.Load() != 1 || inner.Load() != 3 {
		t.Errorf("outer interceptor ran %d times, inner %d; want 1 and 3", outer.Load(), inner.Load())
	}
}

// A handler that honours its context by returning its context's Connect
// status (as a downstream Connect call on it would) is classified by the
// context's cause: TIMEOUT, retried for a read, not EXECUTION_FAILED.
func TestContextStatusIsTheContextsOutcome(t *testing.T) {
	var runs atomic.Int32
	srv := newServer(t, serverConfig{
		reg: middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Read", middleware.Capability{
			SideEffect: middleware.SideEffectRead, Timeout: 50 * time.Millisecond, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}),
		handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			if runs.Add(1) > 1 {
				return answer(ctx, req), nil
			}
			<-ctx.Done()
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		},
	})
	res, err := srv.client(t, protocols[0]).Read(t.Context(), request(&testv1.Request{Id: "ctx"}))
	if err != nil || res.Msg.GetAttempt() != 2 {
		t.Fatalf("a read whose first attempt returned its context's status must be retried as a TIMEOUT: %v", err)
	}
	if ev := srv.sink.final(t); ev.Code != middleware.CodeOK || ev.Attempts != 2 {
		t.Errorf("final event %+v", ev)
	}
}
