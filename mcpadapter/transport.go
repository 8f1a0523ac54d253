package mcpadapter

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// inProcess is an http.RoundTripper that serves each request with a
// handler in the same process: no socket, no second copy of the service.
// The handler sees the request as a server would — same headers, body and
// context (so cancelling the call cancels the handler) — and its response
// is buffered whole before the client reads it, which unary RPCs allow.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (res *http.Response, err error) {
	// net/http's server recovers a handler's panic and drops the
	// connection; this is the in-process version of that, so a panic
	// outside the engine (which recovers its handlers' own) never takes
	// the MCP server down.
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, errHandlerPanicked
		}
	}()
	r := req.Clone(req.Context())
	r.Host = req.URL.Host
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "in-process"
	if r.Body == nil {
		r.Body = http.NoBody
	}
	w := &recorder{header: make(http.Header)}
	t.h.ServeHTTP(w, r)
	if req.Body != nil {
		req.Body.Close() // a RoundTripper always closes the request body
	}
	return w.response(req), nil
}

var errHandlerPanicked = errors.New("mcpadapter: the service's handler panicked")

// recorder is the http.ResponseWriter the handler writes to: the
// response stays in memory until the handler returns.
type recorder struct {
	header      http.Header
	status      int
	body        bytes.Buffer
	wroteHeader bool
	// snapshot is the header as it was when the status was written: as
	// with net/http's server, what the handler sets later is not sent. (The
	// Connect protocol, which the bridge speaks, has no HTTP trailers.)
	snapshot http.Header
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader, w.status, w.snapshot = true, status, w.header.Clone()
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush implements http.Flusher; the response is delivered whole anyway.
func (w *recorder) Flush() { w.WriteHeader(http.StatusOK) }

func (w *recorder) response(req *http.Request) *http.Response {
	w.WriteHeader(http.StatusOK)
	return &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.snapshot,
		Body:          io.NopCloser(bytes.NewReader(w.body.Bytes())),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}
}
