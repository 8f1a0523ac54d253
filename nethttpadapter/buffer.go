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

	length [1]string // the replayed Content-Length's value

	mu       sync.Mutex
	sent     sentHeader // the header as of WriteHeader
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
		a.sent.take(a.header)
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
	status := a.status
	if status == 0 { // the handler wrote nothing: its header is all there is
		a.sent.take(a.header)
		status = http.StatusOK
	}
	sent := a.sent.fields
	h := w.Header()
	for _, f := range sent {
		if !strings.HasPrefix(f.key, http.TrailerPrefix) { // trailers come last
			h[f.key] = f.values
		}
	}
	// The envelope's headers are the engine's alone: a handler's copy (of a
	// downstream response, say) belongs to another execution.
	adapter.SetHeaders(h, env)
	trailers := a.trailers(sent, h)
	if len(trailers) == 0 && bodyAllowed(status) && method != http.MethodHead &&
		first(h["Content-Length"]) == "" && first(h["Transfer-Encoding"]) == "" {
		// The whole body is known: say its length rather than chunk it.
		a.length[0] = strconv.Itoa(len(a.body.b))
		h["Content-Length"] = a.length[:]
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
func (a *attemptWriter) trailers(sent []headerField, h http.Header) []string {
	var keys []string
	var declared []string
	for _, f := range sent {
		if f.key == "Trailer" {
			declared = f.values
		}
	}
	for _, v := range declared {
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

// sentHeader is the handler's header as it was when the status was
// written: what net/http would send, later changes aside. It holds the
// header's keys and value slices, not copies of the values: a handler
// changes its header with Set, Add and Del, which replace or extend a
// key's slice and never write into the one held here. Most responses have
// a few headers, which fit in buf: no allocation.
type sentHeader struct {
	fields []headerField
	buf    [8]headerField
}

type headerField struct {
	key    string
	values []string
}

// take notes h as the header sent.
func (s *sentHeader) take(h http.Header) {
	s.fields = s.buf[:0]
	for k, v := range h {
		s.fields = append(s.fields, headerField{k, v})
	}
}

// first is what Header.Get returns for the values of a canonical name,
// without canonicalizing it again.
func first(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}
