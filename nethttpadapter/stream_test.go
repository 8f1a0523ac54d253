package nethttpadapter_test

import (
	"bufio"
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

func TestStreamMode(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	next := make(chan struct{})
	cap := read(middleware.Capability{Streaming: true, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}})
	reg := middleware.NewRegistry().Register("GET /events", cap).Register("fails", cap).Register("panics", cap).Register("breaks", cap)
	h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("GET /events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				_, _ = io.WriteString(w, "data: flush failed\n\n")
			}
			<-next // the client must see event 1 while this handler still runs
			_, _ = io.WriteString(w, "data: 2\n\n")
		}))
		mux.Handle("/fails", nethttpadapter.Wrap(eng, "fails", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		})))
		mux.Handle("/panics", nethttpadapter.Wrap(eng, "panics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			panic("boom")
		})))
		mux.Handle("/breaks", nethttpadapter.Wrap(eng, "breaks", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "data: 1\n\n")
			http.NewResponseController(w).Flush()
			panic("boom")
		})))
		return nethttpadapter.WrapMux(eng, mux) // "GET /events" is governed by pattern
	})

	resp, err := h.client.Get(h.srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(adapter.HeaderExecutionID) == "" || resp.Header.Get(adapter.HeaderAttempts) != "1" {
		t.Errorf("stream header %v: want the ids before the first event", resp.Header)
	}
	lines := bufio.NewReader(resp.Body)
	if first, _ := lines.ReadString('\n'); first != "data: 1\n" {
		t.Fatalf("first line %q, want \"data: 1\" while the handler runs (not buffered)", first)
	}
	close(next)
	rest, _ := io.ReadAll(lines)
	if string(rest) != "\ndata: 2\n\n" {
		t.Errorf("rest of the stream %q", rest)
	}
	if f := h.final(); f.Type != middleware.EventCompleted {
		t.Errorf("final event %s, want completed", f.Type)
	}

	resp2, body := h.post("/fails", "", "")
	if resp2.StatusCode != http.StatusServiceUnavailable || runs.Load() != 1 || body != "" {
		t.Errorf("a failing stream: %d %q after %d runs, want its own 503 once: streams are never retried", resp2.StatusCode, body, runs.Load())
	}
	if resp2.Header.Get(adapter.HeaderCode) != "EXECUTION_FAILED" || resp2.Header.Get(adapter.HeaderRetryable) != "true" || resp2.Header.Get(adapter.HeaderExecutionID) == "" {
		t.Errorf("a failing stream's header %v: want its envelope's ids, code and retryable flag", resp2.Header)
	}
	if f := h.final(); f.Code != middleware.CodeExecutionFailed {
		t.Errorf("a failing stream ended %s, want EXECUTION_FAILED", f.Code)
	}

	resp3, body := h.post("/panics", "", "")
	if env := envelope(t, resp3); resp3.StatusCode != http.StatusInternalServerError || env.Error.Message != adapter.ConcealedMessage || strings.Contains(body, "boom") {
		t.Errorf("a stream that panics before writing: %d %q, want the concealed JSON envelope", resp3.StatusCode, body)
	}
	h.final()

	resp4, err := h.client.Get(h.srv.URL + "/breaks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp4.Body.Close()
	if b, err := io.ReadAll(resp4.Body); err == nil {
		t.Errorf("a stream that panicked midway ended cleanly after %q: the client must see it broken", b)
	}
	if f := h.final(); f.Code != middleware.CodeExecutionFailed {
		t.Errorf("a broken stream ended %s, want EXECUTION_FAILED", f.Code)
	}
}
