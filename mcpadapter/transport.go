package mcpadapter

import (
	"bytes"
	"context"
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

// handlerContextKey keys the context the in-process handler serves a
// request with, when it is not the request's own (see serveWith).
type handlerContextKey struct{}

// serveWith returns a context for the client side of an in-process call
// that ctx's end does not cancel, carrying ctx for the handler: the
// handler (and the engine in it) sees ctx end, finalizes the execution
// CANCELLED and answers with its envelope, and the client reads that
// answer rather than abandoning the call with Go's "context canceled".
// The MCP SDK answers every request, a cancelled one too; this way that
// answer is the execution's, never Go's error text. The handler cannot
// outlive ctx by much: the engine returns when the attempt's context ends
// (bounded reporting).
func serveWith(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), handlerContextKey{}, ctx)
}

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
	ctx := req.Context()
	if hctx, ok := ctx.Value(handlerContextKey{}).(context.Context); ok {
		ctx = hctx
	}
	r := req.Clone(ctx)
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
