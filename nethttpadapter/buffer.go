package nethttpadapter

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// attemptWriter is the ResponseWriter of one buffered attempt. Everything
// the handler writes stays here; the real ResponseWriter is never reachable
// from it (no Unwrap, no Flush), so an attempt that is abandoned or fails
// cannot put a byte on the wire. Only the finalized attempt's writer is
// replayed, by the serving goroutine, after the execution is final.
//
// It follows net/http's rules: the header map is snapshotted when the
// status is written (later changes are trailers or ignored), the first
// status wins, Write implies 200, 1xx statuses are dropped (they cannot be
// held back and are advisory), bodies are refused where the status allows
// none.
type attemptWriter struct {
	header http.Header
	head   bool // a HEAD request: the body is discarded, as net/http does
	max    int64

	mu       sync.Mutex
	sent     http.Header // the header as of WriteHeader
	status   int
	body     buffer
	overflow bool
	sealed   bool
}

func (a *attemptWriter) init(r *http.Request, max int64) {
	a.header, a.head, a.max = make(http.Header), r.Method == http.MethodHead, max
}

func (a *attemptWriter) Header() http.Header { return a.header }

func (a *attemptWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeHeaderLocked(code)
}

// writeHeaderLocked notes the status, even after sealing: a late handler's
// status says whether it thinks it succeeded, which the engine reports
// (capability.abandoned_result).
func (a *attemptWriter) writeHeaderLocked(code int) {
	if a.status != 0 || code < 200 {
		return
	}
	a.status = code
	if !a.sealed {
		a.sent = a.header.Clone()
	}
}

func (a *attemptWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeHeaderLocked(http.StatusOK)
	if a.sealed {
		// The execution is final and this attempt was not the one: tell a
		// late handler, as http.TimeoutHandler does.
		return 0, http.ErrHandlerTimeout
	}
	switch {
	case !bodyAllowed(a.status):
		return 0, http.ErrBodyNotAllowed
	case a.head:
		return len(p), nil
	case a.overflow || int64(len(a.body.b))+int64(len(p)) > a.max:
		a.overflow = true
		return 0, a.tooLarge()
	}
	if a.body.p == nil {
		a.body = getBuffer(len(p))
	}
	if len(a.body.b)+len(p) > cap(a.body.b) {
		a.body.growTo(len(a.body.b) + len(p))
	}
	a.body.b = append(a.body.b, p...)
	return len(p), nil
}

// tooLarge is the error an overflowing attempt ends with. It reaches events
// only; the caller sees a concealed EXECUTION_FAILED.
func (a *attemptWriter) tooLarge() error {
	return fmt.Errorf("nethttpadapter: the response exceeds the %d-byte buffer of a governed route (WithMaxResponseBytes); stream it instead", a.max)
}

// seal stops the writer for good: later writes fail with
// http.ErrHandlerTimeout, and the buffered body of an attempt that was not
// finalized is dropped.
func (a *attemptWriter) seal(keep bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sealed = true
	if !keep {
		a.body.release()
	}
}

// outcome is what the attempt's response says: a success, a failing status
// ([StatusError]), no response at all ([adapter.ErrNoResponse]: the engine
// tells an implicit 200 from a handler that gave up), or an overflow.
func (a *attemptWriter) outcome(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.overflow:
		return a.tooLarge()
	case a.status == 0:
		return adapter.ErrNoResponse
	case failed(a.status):
		return &StatusError{Status: a.status, afterContext: ctx.Err() != nil}
	}
	return nil
}

// replay copies the finalized attempt to the real writer: the header as it
// was when the status was written, the envelope's headers, the status, the
// body, then the trailers. Call it after seal, on the serving goroutine.
func (a *attemptWriter) replay(w http.ResponseWriter, env middleware.Envelope, method string) {
	sent, status := a.sent, a.status
	if status == 0 { // the handler wrote nothing: its header is all there is
		sent, status = a.header, http.StatusOK
	}
	h := w.Header()
	for k, v := range sent {
		if !strings.HasPrefix(k, http.TrailerPrefix) { // trailers come last
			h[k] = v
		}
	}
	// The envelope's headers are the engine's alone: a handler's copy (of a
	// downstream response, say) belongs to another execution.
	adapter.SetHeaders(h, env)
	trailers := a.trailers(sent, h)
	if len(trailers) == 0 && bodyAllowed(status) && method != http.MethodHead &&
		h.Get("Content-Length") == "" && h.Get("Transfer-Encoding") == "" {
		// The whole body is known: say its length rather than chunk it.
		h["Content-Length"] = []string{strconv.Itoa(len(a.body.b))}
	}
	w.WriteHeader(status)
	if len(a.body.b) > 0 {
		_, _ = w.Write(a.body.b) // the client left: nothing to do about it
	}
	for _, k := range trailers {
		h[k] = a.header[k]
	}
	a.mu.Lock()
	a.body.release()
	a.mu.Unlock()
}

// trailers lists the trailers the handler set, and declares them in h: the
// keys it declared in the Trailer header before writing, and keys with
// http.TrailerPrefix; never the envelope's, which are the engine's alone
// and go in the headers.
func (a *attemptWriter) trailers(sent, h http.Header) []string {
	var keys []string
	for _, v := range sent["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if _, set := a.header[k]; set && !adapter.IsEnvelopeHeader(k) {
				keys = append(keys, k)
			}
		}
	}
	delete(h, "Trailer")
	if len(keys) > 0 {
		h.Set("Trailer", strings.Join(keys, ", "))
	}
	for k := range a.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && !adapter.IsEnvelopeHeader(name) {
			keys = append(keys, k)
		}
	}
	return keys
}

// bodyAllowed reports whether a response with status may have a body
// (RFC 9110 §6.4.1), as net/http decides it.
func bodyAllowed(status int) bool {
	return (status < 100 || status > 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
