package nethttpadapter

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
)

// serveStream runs a governed route in stream mode: once, synchronously, on
// the serving goroutine, straight to the real writer (the handler may
// Flush). The ids go in the response headers before the handler runs; the
// body is not read ahead (a Server-Sent Events or MCP streamable HTTP
// handler reads as it goes) but still bounded by WithMaxBodyBytes.
func serveStream(eng *middleware.Engine, procedure string, h http.Handler, cfg *config, w http.ResponseWriter, r *http.Request) {
	sw := &streamWriter{w: w}
	call := middleware.Call{Procedure: procedure, ApprovalID: r.Header.Get(middleware.HeaderApprovalID)}
	env, err := eng.ExecuteStream(r.Context(), call, func(ctx context.Context) error {
		x, _ := middleware.ExecutionFromContext(ctx)
		w.Header().Set(middleware.HeaderExecutionID, x.ID)
		w.Header().Set(middleware.HeaderAttempts, strconv.Itoa(x.Attempt))
		req := r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			req.Body = http.MaxBytesReader(w, r.Body, cfg.maxBody)
		}
		h.ServeHTTP(sw, req)
		status, wrote := sw.result()
		switch {
		case ctx.Err() != nil && !wrote:
			return ctx.Err()
		case status >= 500:
			return &StatusError{Status: status} // never retried: a stream runs once
		}
		return nil
	})
	if err == nil {
		return
	}
	if _, wrote := sw.result(); !wrote {
		writeEnvelope(w, env, env.Error.Code.HTTPStatus())
		return
	}
	if _, ok := errors.AsType[*middleware.PanicError](err); ok {
		// The handler broke off mid-stream: let the client see a broken
		// response rather than a clean end.
		panic(http.ErrAbortHandler)
	}
}

// streamWriter passes everything through to the real writer and notes
// whether the response has started.
type streamWriter struct {
	w      http.ResponseWriter
	mu     sync.Mutex
	status int
}

func (s *streamWriter) Header() http.Header { return s.w.Header() }

func (s *streamWriter) WriteHeader(code int) {
	s.note(code)
	s.w.WriteHeader(code)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.note(http.StatusOK)
	return s.w.Write(p)
}

// Flush sends what was written so far; it makes stream mode usable for
// Server-Sent Events.
func (s *streamWriter) Flush() {
	s.note(http.StatusOK)
	_ = http.NewResponseController(s.w).Flush()
}

// Unwrap gives http.ResponseController the real writer (deadlines, full
// duplex, hijacking). Stream mode runs one attempt, synchronously, so
// nothing can write late.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.w }

func (s *streamWriter) note(code int) {
	if code < 200 {
		return
	}
	s.mu.Lock()
	if s.status == 0 {
		s.status = code
	}
	s.mu.Unlock()
}

func (s *streamWriter) result() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		return http.StatusOK, false
	}
	return s.status, true
}
