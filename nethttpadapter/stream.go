package nethttpadapter

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// serveStream runs a governed route in stream mode: once, synchronously,
// straight to the real writer; the body is not read ahead (a streaming
// handler reads as it goes) but still bounded by WithMaxBodyBytes.
func serveStream(rt adapter.Route, h http.Handler, cfg *config, w http.ResponseWriter, r *http.Request) {
	sw := &streamWriter{w: w, head: r.Method == http.MethodHead, max: cfg.maxResponse}
	env, err := adapter.ExecuteStream(r.Context(), rt, call[struct{}](r), func(ctx context.Context) error {
		x, _ := middleware.ExecutionFromContext(ctx)
		sw.id = x.ID
		req := r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			req.Body = http.MaxBytesReader(w, r.Body, cfg.maxBody)
		}
		h.ServeHTTP(sw, req)
		switch {
		case sw.held != nil:
			return sw.held.outcome(ctx)
		case sw.status == 0:
			return adapter.ErrNoResponse
		}
		return nil
	})
	_, own := adapter.HandlerError(err)
	if sw.held != nil {
		sw.held.seal(own)
	}
	if p, ok := errors.AsType[*middleware.PanicError](err); ok && (p.Value == http.ErrAbortHandler || sw.started()) {
		// The handler broke off mid-stream, or asked to abort: the client
		// sees a broken response rather than a clean end.
		panic(http.ErrAbortHandler)
	}
	switch {
	case sw.started():
	case own:
		sw.held.replay(w, env, r.Method)
	case err != nil:
		writeOutcome(w, env, err, adapter.HTTPStatus(err))
	default: // an implicit 200
		adapter.SetHeaders(w.Header(), env)
	}
}

// streamWriter passes a response through to the real writer, the envelope's
// ids added as it starts, except a failing one (a status of 500 or more, or
// 499): that is held, like a buffered attempt's, until the execution is
// final, so that it goes out with the envelope's code.
type streamWriter struct {
	w    http.ResponseWriter
	head bool
	max  int64
	id   string

	status int            // the first status written, 0 before
	held   *attemptWriter // the failing response, held
}

func (s *streamWriter) Header() http.Header { return s.w.Header() }

func (s *streamWriter) WriteHeader(code int) {
	if s.hold(code) {
		s.held.WriteHeader(code)
		return
	}
	s.w.WriteHeader(code)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.hold(http.StatusOK) {
		return s.held.Write(p)
	}
	return s.w.Write(p)
}

// Flush sends what was written so far; it makes stream mode usable for
// Server-Sent Events.
func (s *streamWriter) Flush() {
	if !s.hold(http.StatusOK) {
		_ = http.NewResponseController(s.w).Flush()
	}
}

// Unwrap gives http.ResponseController the real writer (deadlines, full
// duplex, hijacking). Stream mode runs one attempt, synchronously, so
// nothing can write late.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.w }

// hold notes the response's first status and reports whether the response
// is held. A response that passes through gets the envelope's ids first,
// replacing any the handler set.
func (s *streamWriter) hold(code int) bool {
	if s.status != 0 || code < 200 {
		return s.held != nil
	}
	s.status = code
	if failed(code) {
		s.held = &attemptWriter{header: s.w.Header(), head: s.head, max: s.max}
		return true
	}
	h := s.w.Header()
	adapter.DelHeaders(h)
	h.Set(adapter.HeaderExecutionID, s.id)
	h.Set(adapter.HeaderAttempts, "1")
	return false
}

// started reports whether the response went out to the client.
func (s *streamWriter) started() bool { return s.status != 0 && s.held == nil }
