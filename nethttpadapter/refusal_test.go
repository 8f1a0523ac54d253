package nethttpadapter_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// onlyReader hides the length of a body, so the client sends it chunked.
type onlyReader struct{ io.Reader }

// watchedReader records whether the client read the body to send it.
type watchedReader struct {
	io.Reader
	read atomic.Bool
}

func (w *watchedReader) Read(p []byte) (int, error) {
	w.read.Store(true)
	return w.Reader.Read(p)
}

func TestOversizeBodyIsRefusedAndNothingRuns(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, middleware.NewRegistry().Register("w", middleware.Capability{SideEffect: middleware.SideEffectWrite}), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "w", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		}), nethttpadapter.WithMaxBodyBytes(16))
	})
	for _, tc := range []struct {
		name string
		body io.Reader
	}{
		{"declared length", strings.NewReader(strings.Repeat("x", 17))},
		{"chunked", onlyReader{strings.NewReader(strings.Repeat("x", 4<<10))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL, tc.body)
			resp, _ := h.do(req)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413", resp.StatusCode)
			}
			env := envelope(t, resp)
			if env.Status != middleware.StatusFailed || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(env.Error.Message, "16 bytes") || env.Error.Retryable || env.ExecutionID == "" {
				t.Errorf("envelope %s %+v, want failed INVALID_ARGUMENT naming the 16-byte limit", env.Status, env.Error)
			}
		})
	}
	t.Run("declared length, refused before the body is sent", func(t *testing.T) {
		tr := h.srv.Client().Transport.(*http.Transport).Clone()
		tr.ExpectContinueTimeout = guard
		defer tr.CloseIdleConnections()
		body := &watchedReader{Reader: strings.NewReader(strings.Repeat("x", 17))}
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL, body)
		req.ContentLength = 17
		req.Header.Set("Expect", "100-continue")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || body.read.Load() {
			t.Errorf("status %d, body sent: %t; want 413 without asking for the body", resp.StatusCode, body.read.Load())
		}
	})
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times for oversize bodies, want 0", n)
	}
	// Each refusal is an execution that never ran: requested, then failed
	// with INVALID_ARGUMENT, never started.
	for _, e := range h.rec.Events() {
		switch {
		case e.Type == middleware.EventRequested:
		case e.Type == middleware.EventFailed && e.Code == middleware.CodeInvalidArgument && e.Attempts == 0:
		default:
			t.Errorf("an oversize body must be refused before anything runs, got event %s %s", e.Type, e.Code)
		}
	}
	resp, body := h.post("/", "", strings.Repeat("y", 16))
	if resp.StatusCode != http.StatusOK || body != strings.Repeat("y", 16) {
		t.Errorf("a body at the limit: %d %q, want it served", resp.StatusCode, body)
	}
}

// A panic with http.ErrAbortHandler aborts the response, as net/http does,
// once the execution is final; in stream mode too, before or after the
// response started. The server goes on serving.
func TestErrAbortHandlerIsReraised(t *testing.T) {
	t.Parallel()
	buffered := read(middleware.Capability{Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}})
	streamed := read(middleware.Capability{Streaming: true})
	var runs atomic.Int32
	abort := func(write bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			if write {
				_, _ = w.Write([]byte("partial"))
				http.NewResponseController(w).Flush()
			}
			panic(http.ErrAbortHandler)
		})
	}
	reg := middleware.NewRegistry().Register("buffered", buffered).Register("stream", streamed).Register("stream-started", streamed)
	h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/buffered", nethttpadapter.Wrap(eng, "buffered", abort(true)))
		mux.Handle("/stream", nethttpadapter.Wrap(eng, "stream", abort(false)))
		mux.Handle("/stream-started", nethttpadapter.Wrap(eng, "stream-started", abort(true)))
		return mux
	})
	for _, path := range []string{"/buffered", "/stream", "/stream-started"} {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, nil)
		if resp, err := h.client.Do(req); err == nil {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Errorf("%s: an aborted response arrived whole: %d %q", path, resp.StatusCode, b)
			}
		}
		if f := h.final(); f.Code != middleware.CodeExecutionFailed {
			t.Errorf("%s: the aborted execution ended %s, want EXECUTION_FAILED", path, f.Code)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("%d runs for 3 aborted calls: a panic is never retried", n)
	}
	if resp, _ := h.post("/nowhere", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the server stopped serving after an abort: %d", resp.StatusCode)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	echo := func(runs *atomic.Int32) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		})
	}
	reg := func() *middleware.Registry {
		return middleware.NewRegistry().Register("w", middleware.Capability{SideEffect: middleware.SideEffectWrite})
	}

	t.Run("malformed JSON reaches the handler as sent", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		h := newHarness(t, reg(), func(eng *middleware.Engine) http.Handler { return nethttpadapter.Wrap(eng, "w", echo(&runs)) })
		const bad = `{"amount": 42,`
		resp, body := h.post("/", "application/json", bad)
		if resp.StatusCode != http.StatusOK || body != bad || runs.Load() != 1 {
			t.Errorf("response %d %q after %d runs, want the handler to get %q", resp.StatusCode, body, runs.Load(), bad)
		}
	})

	t.Run("strict mode refuses an unknown pattern with 404 CAPABILITY_NOT_FOUND", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		h := newHarness(t, reg(), func(eng *middleware.Engine) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /unregistered", echo(&runs))
			return nethttpadapter.WrapMux(eng, mux)
		}, middleware.WithStrict())
		resp, _ := h.post("/unregistered", "", "x")
		env := envelope(t, resp)
		if resp.StatusCode != http.StatusNotFound || env.Error.Code != middleware.CodeCapabilityNotFound {
			t.Errorf("%d %+v, want 404 CAPABILITY_NOT_FOUND", resp.StatusCode, env.Error)
		}
		if runs.Load() != 0 {
			t.Error("a handler ran for an unknown procedure in strict mode")
		}
		// A path no pattern matches is the mux's own 404, not an envelope.
		if resp, _ := h.post("/nowhere", "", ""); resp.StatusCode != http.StatusNotFound || resp.Header.Get(adapter.HeaderExecutionID) != "" {
			t.Errorf("unmatched path: %d %v, want the mux's plain 404", resp.StatusCode, resp.Header)
		}
	})
}

// probe is a handler that records whether it ran inside an execution.
type probe struct{ governed atomic.Bool }

func (p *probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, ok := middleware.ExecutionFromContext(r.Context())
	p.governed.Store(ok)
}

func TestWrapMuxServesUngovernedPatternsUntouched(t *testing.T) {
	t.Parallel()
	eng, err := middleware.New(middleware.NewRegistry().Register("known", read(middleware.Capability{})), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{}
	mux := http.NewServeMux()
	mux.Handle("GET /health", p)
	h := httptestServer(t, nethttpadapter.WrapMux(eng, mux))
	resp, err := h.Client().Get(h.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p.governed.Load() || resp.Header.Get(adapter.HeaderExecutionID) != "" {
		t.Errorf("an ungoverned pattern was governed: header %v", resp.Header)
	}
}

// Two values of the single-valued Agentsafe-Approval-Id header are
// malformed: taking either would silently drop the other.
func TestAnApprovalHeaderSentTwiceIsInvalidArgument(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, middleware.NewRegistry().Register("r", middleware.Capability{SideEffect: middleware.SideEffectRead}), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) }))
	})
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL, nil)
	req.Header.Add(adapter.HeaderApprovalID, "apr_00000000000000000000000000000000")
	req.Header.Add(adapter.HeaderApprovalID, "apr_11111111111111111111111111111111")
	resp, _ := h.do(req)
	env := envelope(t, resp)
	if resp.StatusCode != http.StatusBadRequest || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(env.Error.Message, adapter.HeaderApprovalID) {
		t.Errorf("%d %+v, want 400 INVALID_ARGUMENT naming %s", resp.StatusCode, env.Error, adapter.HeaderApprovalID)
	}
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times, want none", runs.Load())
	}
}
