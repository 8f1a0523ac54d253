package nethttpadapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

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
	x := &exchange{r: r, body: body, h: h, max: cfg.maxResponse}
	c := call[*attemptWriter](r)
	c.Input = adapter.HTTPInput(r, body, cfg.bound...)
	final, env, err := adapter.Execute(r.Context(), rt, c, x.attempt)
	if _, own := adapter.HandlerError(err); err != nil && !own {
		final = nil // an outcome the engine decided: the envelope is the answer
	}
	x.seal(final)
	reraiseAbort(err)
	if final != nil {
		// A success, or the handler's own failing response: as written.
		final.replay(w, env, r.Method)
		return
	}
	writeOutcome(w, env, err, adapter.HTTPStatus(err))
}

// call is what every governed request hands the engine.
func call[T any](r *http.Request) adapter.Call[T] {
	return adapter.Call[T]{ApprovalID: r.Header.Get(adapter.HeaderApprovalID), Surface: adapter.SurfaceHTTP, Status: status}
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

	mu      sync.Mutex
	writers []*attemptWriter
}

// attempt is one run of the handler on its own request copy (a fresh reader
// over the body, the attempt's context) and its own bounded writer. The
// request is copied for every attempt, the first included: an abandoned
// attempt may still run after the server took its request back.
func (x *exchange) attempt(ctx context.Context) (*attemptWriter, error) {
	aw := newAttemptWriter(x.r, x.max)
	x.mu.Lock()
	x.writers = append(x.writers, aw)
	x.mu.Unlock()

	req := x.r.Clone(ctx)
	req.ContentLength = int64(len(x.body))
	req.Body = http.NoBody
	if len(x.body) > 0 {
		req.Body = newBodyReader(x.body)
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

func newBodyReader(b []byte) *bodyReader {
	r := new(bodyReader)
	r.Reset(b)
	return r
}

func (*bodyReader) Close() error { return nil }

// readBody reads the whole body, at most limit bytes. A Content-Length over
// the limit is refused without reading.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // +1: the read that sees EOF needs no growth
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
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
