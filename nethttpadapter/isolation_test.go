package nethttpadapter_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// Once the execution is final, an abandoned attempt's writes fail with
// http.ErrHandlerTimeout, as under http.TimeoutHandler, and none of them
// reaches the client.
func TestALateWriteFailsWithErrHandlerTimeout(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t, read(middleware.Capability{Timeout: time.Second}))
		lateErr := make(chan error, 1)
		h := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Late", "1")
			time.Sleep(2 * time.Second) // ignores its context
			_, err := w.Write([]byte("LATE"))
			lateErr <- err
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if err := <-lateErr; !errors.Is(err, http.ErrHandlerTimeout) {
			t.Errorf("a write after the execution is final returned %v, want http.ErrHandlerTimeout", err)
		}
		if rec.Code != http.StatusGatewayTimeout || strings.Contains(rec.Body.String(), "LATE") || rec.Header().Get("X-Late") != "" {
			t.Errorf("response %d %q %v: the abandoned attempt reached the client", rec.Code, rec.Body, rec.Header())
		}
	})
}

// Every attempt reads the same body from the start, whatever the attempt
// before it consumed.
func TestBodyReplayedToEveryAttempt(t *testing.T) {
	t.Parallel()
	const sent = "{ \"amount\" : 42,\n  \"currency\": \"EUR\" }" // not canonical: bytes as sent
	var bodies [3][]byte
	var lengths [3]int64
	cap := middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}}
	h := newHarness(t, middleware.NewRegistry().Register("w", cap), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "w", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, _ := middleware.ExecutionFromContext(r.Context())
			n := x.Attempt - 1
			lengths[n] = r.ContentLength
			if x.Attempt == 1 {
				bodies[n] = make([]byte, 5)
				_, _ = io.ReadFull(r.Body, bodies[n]) // consumes part of it, then fails
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			bodies[n], _ = io.ReadAll(r.Body)
			if x.Attempt == 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(bodies[n])
		}))
	})
	resp, body := h.post("/", "application/json", sent)
	if resp.StatusCode != http.StatusOK || body != sent {
		t.Fatalf("response %d %q, want 200 and the body echoed", resp.StatusCode, body)
	}
	if string(bodies[0]) != sent[:5] {
		t.Errorf("attempt 1 read %q, want %q", bodies[0], sent[:5])
	}
	for i := 1; i < 3; i++ {
		if string(bodies[i]) != sent {
			t.Errorf("attempt %d read %q, want the whole body %q", i+1, bodies[i], sent)
		}
	}
	for i, n := range lengths {
		if n != int64(len(sent)) {
			t.Errorf("attempt %d saw ContentLength %d, want %d", i+1, n, len(sent))
		}
	}
}

// Only the finalized attempt's status, headers (as of WriteHeader), body and
// trailers reach the client, and the envelope's ids cannot be overridden.
func TestFinalizedResponsePassesThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, middleware.NewRegistry().Register("r", read(middleware.Capability{})), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-A", "a")
			w.Header().Add("X-Multi", "1")
			w.Header().Add("X-Multi", "2")
			w.Header().Set(adapter.HeaderExecutionID, "exe_spoofed")
			w.Header().Set(adapter.HeaderApprovalID, "apr_0123456789abcdef0123456789abcdef")
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusCreated)
			w.Header().Set("X-After", "too late") // net/http ignores it: so do we
			_, _ = w.Write([]byte("ab"))
			_, _ = w.Write([]byte("c"))
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Undeclared", "7")
		}))
	})
	resp, body := h.post("/", "", "")
	final := h.final()
	if resp.StatusCode != http.StatusCreated || body != "abc" {
		t.Errorf("response %d %q, want 201 \"abc\"", resp.StatusCode, body)
	}
	if resp.Header.Get("X-A") != "a" || strings.Join(resp.Header.Values("X-Multi"), ",") != "1,2" || resp.Header.Get("X-After") != "" {
		t.Errorf("header %v: want X-A, both X-Multi values, and no X-After", resp.Header)
	}
	if got := resp.Header.Get(adapter.HeaderExecutionID); got != final.ExecutionID {
		t.Errorf("%s = %q, want the execution's %q", adapter.HeaderExecutionID, got, final.ExecutionID)
	}
	if got := resp.Header.Get(adapter.HeaderApprovalID); got != "" {
		t.Errorf("%s = %q: the handler's copy must not pass for this execution's", adapter.HeaderApprovalID, got)
	}
	if resp.Trailer.Get("X-Sum") != "42" || resp.Trailer.Get("X-Undeclared") != "7" {
		t.Errorf("trailer %v, want X-Sum: 42 and X-Undeclared: 7", resp.Trailer)
	}
}

// A buffered attempt cannot flush: flushing would put bytes on the wire
// before the execution is final.
func TestBufferedAttemptCannotFlush(t *testing.T) {
	t.Parallel()
	flushErr := make(chan error, 1)
	h := newHarness(t, middleware.NewRegistry().Register("r", read(middleware.Capability{})), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("x"))
			if _, ok := w.(http.Flusher); ok {
				flushErr <- errors.New("the buffered writer implements http.Flusher")
				return
			}
			flushErr <- http.NewResponseController(w).Flush()
		}))
	})
	h.post("/", "", "")
	if err := recv(t, flushErr, "the handler"); !errors.Is(err, http.ErrNotSupported) {
		t.Errorf("Flush in a buffered attempt: %v, want http.ErrNotSupported", err)
	}
}

// An attempt that writes more than the buffer holds fails, concealed, and
// is not retried.
func TestResponseBufferIsBounded(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	writeErr := make(chan error, 4)
	cap := read(middleware.Capability{Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}})
	h := newHarness(t, middleware.NewRegistry().Register("r", cap), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			_, _ = w.Write(bytes.Repeat([]byte("a"), 8))
			_, err := w.Write([]byte("b"))
			writeErr <- err
		}), nethttpadapter.WithMaxResponseBytes(8))
	})
	resp, body := h.post("/", "", "")
	if err := recv(t, writeErr, "the handler"); err == nil {
		t.Error("writing past the buffer succeeded")
	}
	// The partial body is eight a's; an execution id may hold a run of
	// fewer by chance.
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(body, "aaaaaaaa") {
		t.Errorf("response %d %q, want 500 without the partial body", resp.StatusCode, body)
	}
	if env := envelope(t, resp); env.Error == nil || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Message != adapter.ConcealedMessage {
		t.Errorf("envelope error %+v, want concealed EXECUTION_FAILED", env.Error)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1: an overflow is not transient", n)
	}
	if f := h.final(); !strings.Contains(f.Error, "WithMaxResponseBytes") {
		t.Errorf("final event error %q should say which limit was hit", f.Error)
	}
}
