package nethttpadapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// serve runs one governed request, streamed or buffered.
func serve(rt adapter.Route, stream bool, h http.Handler, cfg *config, w http.ResponseWriter, r *http.Request) {
	if stream {
		serveStream(rt, h, cfg, w, r)
		return
	}
	body, err := readBody(w, r, cfg.maxBody)
	if err != nil {
		refuseBody(rt, w, r, err)
		return
	}
	x := &exchange{r: r, body: body.b, h: h, max: cfg.maxResponse}
	c := call[*attemptWriter](r)
	c.Input = adapter.HTTPInput(r, body.b, cfg.bound...)
	c.IdempotencyKey, c.Codec = callerKey(r), replayCodec{}
	final, env, err := adapter.Execute(r.Context(), rt, c, x.attempt)
	if _, own := adapter.HandlerError(err); err != nil && !own {
		final = nil // an outcome the engine decided: the envelope is the answer
	}
	x.seal(final)
	if int(x.returned.Load()) == env.Attempts {
		// Every attempt the engine started has returned, so none reads
		// the body any more (one abandoned, or not yet running, might:
		// then the body is left to the collector).
		body.release()
	}
	reraiseAbort(err)
	if final != nil {
		// A success, or the handler's own failing response: as written.
		final.replay(w, env, r.Method)
		return
	}
	writeOutcome(w, env, err, adapter.HTTPStatus(err))
}

// call is what every governed request hands the engine. (Headers are read
// by their canonical names, as the server stores them: Values would
// canonicalize the name again on every call.)
func call[T any](r *http.Request) adapter.Call[T] {
	return adapter.Call[T]{ApprovalID: adapter.ApprovalID(r.Header[adapter.HeaderApprovalID]), Surface: adapter.SurfaceHTTP, Status: status}
}

// reraiseAbort re-raises a handler's panic with http.ErrAbortHandler on
// the serving goroutine, once the execution is final, so the server aborts
// the response as it would without agentsafe.
func reraiseAbort(err error) {
	if p, ok := errors.AsType[*middleware.PanicError](err); ok && p.Value == http.ErrAbortHandler {
		panic(http.ErrAbortHandler)
	}
}

// exchange is the state one request shares with its attempts: the body read
// once, and every attempt's writer, so that all can be sealed at the end.
type exchange struct {
	r    *http.Request
	body []byte
	h    http.Handler
	max  int64

	// returned counts the attempts whose handler has returned.
	returned atomic.Int32

	mu      sync.Mutex
	writers []*attemptWriter
	// The first attempt's writer and body reader, and room for it in
	// writers: most executions have one attempt, and then the exchange is
	// one allocation instead of four.
	first struct {
		writers [1]*attemptWriter
		w       attemptWriter
		body    bodyReader
	}
}

// attempt is one run of the handler on its own request copy (a fresh reader
// over the body, the attempt's context) and its own bounded writer. The
// request is copied for every attempt, the first included: an abandoned
// attempt may still run after the server took its request back.
func (x *exchange) attempt(ctx context.Context) (*attemptWriter, error) {
	x.mu.Lock()
	var aw *attemptWriter
	var body *bodyReader
	if x.writers == nil {
		aw, body = &x.first.w, &x.first.body
		x.writers = x.first.writers[:0]
	} else {
		aw, body = new(attemptWriter), new(bodyReader)
	}
	aw.init(x.r, x.max)
	x.writers = append(x.writers, aw)
	x.mu.Unlock()
	defer x.returned.Add(1)

	req := x.r.Clone(ctx)
	req.ContentLength = int64(len(x.body))
	req.Body = http.NoBody
	if len(x.body) > 0 {
		body.Reset(x.body)
		req.Body = body
	}
	x.h.ServeHTTP(aw, req)
	return aw, aw.outcome(ctx)
}

// seal ends every attempt's writer; only final keeps its body, for replay.
func (x *exchange) seal(final *attemptWriter) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, aw := range x.writers {
		aw.seal(aw == final)
	}
}

// bodyReader replays the body to one attempt. It keeps bytes.Reader's
// WriteTo, so io.Copy from it does not allocate a buffer.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// readBody reads the whole body, at most limit bytes, into a pooled buffer
// (see buffers). A Content-Length over the limit is refused without
// reading.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (buffer, error) {
	if r.ContentLength > limit {
		return buffer{}, &http.MaxBytesError{Limit: limit}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return buffer{}, nil
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // +1: the read that sees EOF needs no growth
	}
	rd := r.Body
	if r.ContentLength < 0 {
		// Only a body of unknown length can outgrow its limit unseen
		// (net/http ends a declared one at its length); MaxBytesReader
		// also tells the server to close the connection when it does.
		rd = http.MaxBytesReader(w, r.Body, limit)
	}
	b := getBuffer(size)
	for {
		if len(b.b) == cap(b.b) {
			b.grow()
		}
		n, err := rd.Read(b.b[len(b.b):cap(b.b)])
		b.b = b.b[:len(b.b)+n]
		if int64(len(b.b)) > limit {
			b.release()
			return buffer{}, &http.MaxBytesError{Limit: limit}
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			b.release()
			return buffer{}, err
		}
	}
}

// refuseBody answers a request whose body could not be read: 413 over the
// limit, CANCELLED when the caller left, else 400.
func refuseBody(rt adapter.Route, w http.ResponseWriter, r *http.Request, err error) {
	status, refusal := 0, middleware.NewError(middleware.CodeInvalidArgument, "the request body could not be read")
	switch tooLarge, ok := errors.AsType[*http.MaxBytesError](err); {
	case ok:
		status = http.StatusRequestEntityTooLarge
		refusal = middleware.NewError(middleware.CodeInvalidArgument, fmt.Sprintf("the request body exceeds the limit of %d bytes", tooLarge.Limit))
	case r.Context().Err() != nil:
		refusal = middleware.NewError(middleware.CodeCancelled, "the caller cancelled the call")
	}
	refusal.Cause = err
	refuse(rt, w, r, status, refusal)
}

// refuse answers a governed request that cannot reach the engine's
// pipeline, with status (0: the code's own): an execution that never ran,
// so the caller still gets an execution id and the audit trail shows the
// refusal.
func refuse(rt adapter.Route, w http.ResponseWriter, r *http.Request, status int, refusal *middleware.Error) {
	env, err := adapter.Refuse(r.Context(), rt, call[struct{}](r), refusal)
	if status == 0 {
		status = adapter.HTTPStatus(err)
	}
	writeOutcome(w, env, err, status)
}
