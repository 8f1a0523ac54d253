package nethttpadapter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// scripted answers attempt n with statuses[n-1], and "ok n" once the script
// runs out.
func scripted(runs *atomic.Int32, statuses ...int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		x, _ := middleware.ExecutionFromContext(r.Context())
		if x.Attempt <= len(statuses) {
			w.WriteHeader(statuses[x.Attempt-1])
			fmt.Fprintf(w, "attempt %d failed", x.Attempt)
			return
		}
		fmt.Fprintf(w, "ok %d", x.Attempt)
	})
}

func TestRetriesOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	fast := func(n int) middleware.Retry { return middleware.Retry{MaxRetries: n, Backoff: time.Millisecond} }
	cases := []struct {
		name       string
		cap        middleware.Capability
		statuses   []int
		wantRuns   int
		wantStatus int
		wantBody   string
	}{
		{"a read is retried on 503 and 502", read(middleware.Capability{Retry: fast(2)}), []int{503, 502}, 3, 200, "ok 3"},
		{"a read is retried on 504", read(middleware.Capability{Retry: fast(1)}), []int{504}, 2, 200, "ok 2"},
		{"a read is not retried on 500", read(middleware.Capability{Retry: fast(2)}), []int{500}, 1, 500, "attempt 1 failed"},
		{"retries stop at MaxRetries re-attempts", read(middleware.Capability{Retry: fast(1)}), []int{503, 503, 503}, 2, 503, "attempt 2 failed"},
		{"a read without retries runs once", read(middleware.Capability{}), []int{503}, 1, 503, "attempt 1 failed"},
		{"a write that is not idempotent is never retried", middleware.Capability{SideEffect: middleware.SideEffectWrite}, []int{503}, 1, 503, "attempt 1 failed"},
		{"an external effect is never retried", middleware.Capability{SideEffect: middleware.SideEffectExternal}, []int{502}, 1, 502, "attempt 1 failed"},
		{"an idempotent write is retried", middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Retry: fast(1)}, []int{503}, 2, 200, "ok 2"},
		{"a 4xx is the handler's answer, not a failure", read(middleware.Capability{Retry: fast(2)}), []int{429}, 1, 429, "attempt 1 failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			h := newHarness(t, middleware.NewRegistry().Register("route", tc.cap), func(eng *middleware.Engine) http.Handler {
				return nethttpadapter.Wrap(eng, "route", scripted(&runs, tc.statuses...))
			})
			resp, body := h.post("/", "text/plain", "x")
			if got := int(runs.Load()); got != tc.wantRuns {
				t.Errorf("handler ran %d times, want %d", got, tc.wantRuns)
			}
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Errorf("response %d %q, want %d %q (the finalized attempt's, as written)", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if got := resp.Header.Get(middleware.HeaderAttempts); got != strconv.Itoa(tc.wantRuns) {
				t.Errorf("%s = %q, want %d", middleware.HeaderAttempts, got, tc.wantRuns)
			}
			final := h.final()
			wantCode := middleware.CodeOK
			if tc.wantStatus >= 500 {
				wantCode = middleware.CodeExecutionFailed
			}
			if final.Code != wantCode || final.Attempts != tc.wantRuns {
				t.Errorf("final event %s code %s after %d attempts, want %s after %d", final.Type, final.Code, final.Attempts, wantCode, tc.wantRuns)
			}
		})
	}
}

func TestTimeoutVersusCancellation(t *testing.T) {
	t.Parallel()

	// blockUntilDone blocks on its context, honouring it, and reports why it
	// ended.
	blockUntilDone := func(started chan<- struct{}, ended chan<- error) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-r.Context().Done()
			ended <- r.Context().Err()
		})
	}

	t.Run("an attempt's own timeout is TIMEOUT, 504", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name          string
			cap           middleware.Capability
			wantRetryable bool
		}{
			{"read: safe to re-invoke", read(middleware.Capability{Timeout: 20 * time.Millisecond}), true},
			{"write: not safe to re-invoke", middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 20 * time.Millisecond}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				started, ended := make(chan struct{}, 1), make(chan error, 1)
				h := newHarness(t, middleware.NewRegistry().Register("slow", tc.cap), func(eng *middleware.Engine) http.Handler {
					return nethttpadapter.Wrap(eng, "slow", blockUntilDone(started, ended))
				})
				resp, _ := h.post("/", "", "")
				if resp.StatusCode != http.StatusGatewayTimeout {
					t.Fatalf("status %d, want 504", resp.StatusCode)
				}
				env := envelope(t, resp)
				if env.Status != middleware.StatusCancelled || env.Error.Code != middleware.CodeTimeout || env.Error.Retryable != tc.wantRetryable {
					t.Errorf("envelope %s %+v, want cancelled TIMEOUT retryable=%t", env.Status, env.Error, tc.wantRetryable)
				}
				if err := recv(t, ended, "the handler to see its context end"); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("the handler's context ended with %v, want its deadline", err)
				}
				if f := h.final(); f.Type != middleware.EventCancelled || f.Code != middleware.CodeTimeout {
					t.Errorf("final event %s %s, want capability.cancelled TIMEOUT", f.Type, f.Code)
				}
			})
		}
	})

	t.Run("the client leaving is CANCELLED, and never retried", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		started, ended := make(chan struct{}, 4), make(chan error, 4)
		cap := read(middleware.Capability{Timeout: time.Minute, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}})
		h := newHarness(t, middleware.NewRegistry().Register("slow", cap), func(eng *middleware.Engine) http.Handler {
			inner := blockUntilDone(started, ended)
			return nethttpadapter.Wrap(eng, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				inner.ServeHTTP(w, r)
			}))
		})
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL, nil)
		errc := make(chan error, 1)
		go func() {
			resp, err := h.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		recv(t, started, "the handler to start")
		cancel()
		if err := recv(t, errc, "the client to return"); !errors.Is(err, context.Canceled) {
			t.Errorf("client error %v, want context.Canceled", err)
		}
		if err := recv(t, ended, "the handler to see its context end"); !errors.Is(err, context.Canceled) {
			t.Errorf("the handler's context ended with %v, want cancellation", err)
		}
		if f := h.final(); f.Type != middleware.EventCancelled || f.Code != middleware.CodeCancelled || f.Attempts != 1 {
			t.Errorf("final event %s %s after %d attempts, want capability.cancelled CANCELLED after 1", f.Type, f.Code, f.Attempts)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1: a cancellation is terminal", n)
		}
	})
}
