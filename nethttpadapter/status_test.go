package nethttpadapter_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// A handler signals failure by its status, net/http's own error: 500 or
// more, or 499. Its canonical code decides what the engine does with it
// (502, 503 and 504 are Unavailable: transient; a 504 answered after the
// attempt's context ended is the context's outcome), and the finalized attempt's
// response passes through as written, with the envelope's code; anything
// below 500, 4xx included, is the handler's answer.
func TestAHandlersStatusIsItsOutcome(t *testing.T) {
	for _, tc := range []struct {
		name      string
		statuses  []int
		wantRuns  int
		want      int
		wantBody  string
		retryable string // Agentsafe-Retryable; "" on success
	}{
		{"a 4xx is the handler's answer, not a failure", []int{429}, 1, 429, "attempt 1 failed", ""},
		{"500 is not transient", []int{500}, 1, 500, "attempt 1 failed", "false"},
		{"501 is not transient", []int{501}, 1, 501, "attempt 1 failed", "false"},
		{"502, 503 and 504 are transient", []int{503, 502, 504}, 3, 504, "attempt 3 failed", "true"},
		{"a transient failure is retried", []int{503, 502}, 3, 200, "ok 3", ""},
		{"the last of transient failures passes through", []int{503, 503, 503}, 3, 503, "attempt 3 failed", "true"},
		{"499 before the caller left is the handler's", []int{499}, 1, 499, "attempt 1 failed", "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agentsafetest.Test(t, func(t *testing.T) {
				var runs atomic.Int32
				eng := newEngine(t, read(middleware.Capability{Timeout: time.Minute, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}))
				rec := httptest.NewRecorder()
				nethttpadapter.Wrap(eng, "r", scripted(&runs, tc.statuses...)).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
				if int(runs.Load()) != tc.wantRuns || rec.Code != tc.want || rec.Body.String() != tc.wantBody {
					t.Errorf("%d runs answered %d %q, want %d runs answering %d %q (the finalized attempt's, as written)", runs.Load(), rec.Code, rec.Body, tc.wantRuns, tc.want, tc.wantBody)
				}
				env, _ := nethttpadapter.EnvelopeFromResponse(rec.Result())
				h := rec.Header()
				if h.Get(adapter.HeaderAttempts) != strconv.Itoa(tc.wantRuns) || h.Get(adapter.HeaderRetryable) != tc.retryable || env.Attempts != tc.wantRuns {
					t.Errorf("header %v, envelope %+v: want %d attempts, %s %q", h, env, tc.wantRuns, adapter.HeaderRetryable, tc.retryable)
				}
				if tc.retryable == "" {
					return
				}
				if env.Error == nil || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Message != adapter.ConcealedMessage || h.Get(adapter.HeaderCode) != "EXECUTION_FAILED" {
					t.Errorf("envelope %+v, header %v: want a concealed EXECUTION_FAILED", env.Error, h)
				}
			})
		})
	}
}
