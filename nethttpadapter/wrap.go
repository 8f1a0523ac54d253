package nethttpadapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sync"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
)

// Wrap governs h as procedure: the name under which the engine's registry
// (or a protobuf method option) holds its capability. The capability must be
// registered before the engine is built ([middleware.New] reads the registry
// once).
//
// Wrap panics at start-up if the engine governs no such procedure, in strict
// mode ([middleware.WithStrict]) too, as [http.ServeMux.Handle] does for a
// bad pattern: a typo in the name must not leave the route served without
// its capability. Register the capability, or serve the handler without
// Wrap. (Routes a [WrapMux] serves may be ungoverned: a mux holds ungoverned
// routes too.)
//
// A capability with Streaming set runs in stream mode (see the package
// documentation); every other governed route is buffered. Wrap panics if
// eng or h is nil.
func Wrap(eng *middleware.Engine, procedure string, h http.Handler, opts ...Option) http.Handler {
	if eng == nil || h == nil {
		panic("nethttpadapter: Wrap needs an engine and a handler")
	}
	// Lookup, not Governs: in strict mode the engine "governs" every name,
	// typos included, by refusing it at call time.
	c, ok := eng.Lookup(procedure)
	if !ok {
		panic(fmt.Sprintf("nethttpadapter: Wrap(%q): the engine governs no procedure %q; register its capability in the registry given to middleware.New, or do not Wrap the handler", procedure, procedure))
	}
	return &route{eng: eng, procedure: procedure, h: h, cfg: newConfig(opts), stream: c.Streaming}
}

// WrapMux governs every route of mux whose pattern names a capability: the
// procedure of a request is the pattern it matched, exactly as registered
// (for example "POST /refunds/{id}"). Requests that match no pattern, or a
// pattern the engine does not govern, go to mux untouched: a path no pattern
// routes is the mux's own 404 (or 405), without an envelope. In strict mode
// ([middleware.WithStrict]) a matched pattern without a capability is
// refused instead, with 404 CAPABILITY_NOT_FOUND and a JSON envelope. It is
// the one-line adoption for a whole ServeMux:
//
//	http.ListenAndServe(addr, nethttpadapter.WrapMux(eng, mux))
//
// WrapMux decides before the engine runs. A path the mux would redirect to
// a governed pattern — an unclean path such as "//refund" or "/a/../refund",
// or a subtree pattern's path without its trailing slash — is refused with
// 400 and a JSON envelope (INVALID_ARGUMENT, the message names the
// canonical path), as an execution that never ran ([middleware.Engine.Refuse]):
// following the redirect is the caller's decision, and were the engine to
// run, its one attempt would be the mux's redirect, the handler would not
// run, and an approval would be spent on it. Nothing runs and nothing is
// consumed; the same call at the canonical path proceeds as usual. A
// redirect to an ungoverned pattern, and a governed route whose own handler
// redirects, are served as the mux serves them.
//
// WrapMux panics if eng or mux is nil.
func WrapMux(eng *middleware.Engine, mux *http.ServeMux, opts ...Option) http.Handler {
	if eng == nil || mux == nil {
		panic("nethttpadapter: WrapMux needs an engine and a ServeMux")
	}
	return &muxRoute{eng: eng, mux: mux, cfg: newConfig(opts)}
}

type route struct {
	eng       *middleware.Engine
	procedure string
	h         http.Handler
	cfg       config
	stream    bool
}

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.stream {
		serveStream(rt.eng, rt.procedure, rt.h, &rt.cfg, w, r)
		return
	}
	serveBuffered(rt.eng, rt.procedure, rt.h, &rt.cfg, w, r)
}

type muxRoute struct {
	eng *middleware.Engine
	mux *http.ServeMux
	cfg config
}

func (m *muxRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.RequestURI == "*" {
		// The mux answers "OPTIONS *" with 400 itself, without routing it.
		m.mux.ServeHTTP(w, r)
		return
	}
	h, pattern := m.mux.Handler(r)
	if pattern == "" || !m.eng.Governs(pattern) {
		m.mux.ServeHTTP(w, r)
		return
	}
	if canonical, ok := m.redirect(h, r); ok {
		refuseRedirect(m.eng, w, r, pattern, canonical)
		return
	}
	// Each attempt is routed again by the mux, on its own request copy, so
	// the handler sees its pattern and path values as usual.
	if c, _ := m.eng.Lookup(pattern); c.Streaming {
		serveStream(m.eng, pattern, m.mux, &m.cfg, w, r)
		return
	}
	serveBuffered(m.eng, pattern, m.mux, &m.cfg, w, r)
}

// redirect reports whether h, what the mux's Handler returned for r, is the
// redirect the mux makes itself for a path that is not canonical (unclean,
// or a subtree pattern's missing trailing slash), and where it points. The
// pattern Handler returns with such a redirect is the one that would match
// after it: were the engine to run, its one "attempt" would be the mux's
// 301/307, the handler would never run, and an approval would be spent.
//
// The mux makes a fresh http.RedirectHandler for each such lookup, while a
// route registered with one returns the same handler every time; asking
// twice tells them apart without guessing at the mux's rules. Running the
// mux's redirect handler only writes the redirect into a recorder.
func (m *muxRoute) redirect(h http.Handler, r *http.Request) (canonical string, ok bool) {
	if reflect.TypeOf(h) != redirectHandlerType {
		return "", false
	}
	if again, _ := m.mux.Handler(r); again == h {
		return "", false
	}
	rec := &redirectRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	loc := rec.header.Get("Location")
	if u, err := url.Parse(loc); err == nil {
		return u.EscapedPath(), true
	}
	return loc, true
}

var redirectHandlerType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// redirectRecorder keeps the headers of the mux's redirect and discards the
// rest. (Not httptest.ResponseRecorder: a library should not link test
// support into the programs that import it.)
type redirectRecorder struct{ header http.Header }

func (r *redirectRecorder) Header() http.Header         { return r.header }
func (r *redirectRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *redirectRecorder) WriteHeader(int)             {}

// refuseRedirect answers a request the mux would redirect to a governed
// pattern: INVALID_ARGUMENT, as an execution that never ran (an execution
// id and an audit trail), naming the path to send the call to. Nothing
// runs and no approval is consumed.
func refuseRedirect(eng *middleware.Engine, w http.ResponseWriter, r *http.Request, procedure, canonical string) {
	refusal := middleware.NewError(middleware.CodeInvalidArgument, fmt.Sprintf(
		"the path %q is not canonical (the mux would redirect it, and a governed route does not follow redirects); send the call to %q",
		r.URL.EscapedPath(), canonical))
	env, _ := eng.Refuse(r.Context(), middleware.Call{Procedure: procedure, ApprovalID: r.Header.Get(middleware.HeaderApprovalID)}, refusal)
	writeEnvelope(w, env, middleware.CodeInvalidArgument.HTTPStatus())
}

// serveBuffered runs one governed, buffered request: read the body once,
// execute, then write the finalized attempt or the envelope.
func serveBuffered(eng *middleware.Engine, procedure string, h http.Handler, cfg *config, w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, cfg.maxBody)
	if err != nil {
		refuse(eng, w, r, procedure, err)
		return
	}
	x := &exchange{r: r, body: body, h: h, max: cfg.maxResponse}
	call := middleware.Call{
		Procedure:  procedure,
		Input:      middleware.HTTPInput(r, body, cfg.bound...),
		ApprovalID: r.Header.Get(middleware.HeaderApprovalID),
	}
	v, env, _ := eng.Execute(r.Context(), call, x.attempt)
	// The finalized attempt's writer comes back on failure too, when its
	// handler answered 5xx: that response passes through as written. It is
	// nil when no attempt returned in time, or its response is not fit to
	// send (a panic, an overflow).
	final, _ := v.(*attemptWriter)
	x.seal(final)
	switch {
	case final != nil:
		final.replay(w, env.SetHeaders, r.Method)
	case env.Error != nil:
		writeEnvelope(w, env, env.Error.Code.HTTPStatus())
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

// attempt is the middleware.AttemptFunc: one run of the handler on its own
// request copy (a fresh reader over the body, the attempt's context) and
// its own bounded writer.
func (x *exchange) attempt(ctx context.Context) (any, error) {
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

	status, wrote, overflow := aw.result()
	switch {
	case overflow:
		return nil, aw.tooLarge()
	case !wrote:
		// An implicit 200: a success, unless the handler gave up because
		// its context ended, which the engine tells apart.
		return aw, seam.ErrNoResponse
	case ctx.Err() != nil && status >= 500:
		// The handler gave up because its context ended: that is the
		// outcome (TIMEOUT or CANCELLED), not its 5xx.
		return nil, ctx.Err()
	case status >= 500:
		err := error(&StatusError{Status: status})
		if status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout {
			err = middleware.Retryable(err)
		}
		return aw, err
	}
	return aw, nil
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

// StatusError is the error an attempt ends with when its handler answered
// with a status of 500 or more: EXECUTION_FAILED, retryable (within what
// the capability allows) for 502, 503 and 504. A [middleware.Classifier]
// sees it, wrapped by [middleware.Retryable] for those three, and may
// decide otherwise. When the attempt is the finalized one, its response
// reaches the client as the handler wrote it.
type StatusError struct {
	Status int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("handler answered %d %s", e.Status, http.StatusText(e.Status))
}

// errTooLarge is why a body is refused; it carries the limit for the message.
type errTooLarge struct{ limit int64 }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("the request body exceeds the limit of %d bytes", e.limit)
}

// readBody reads the whole body, at most limit bytes. A Content-Length over
// the limit is refused without reading.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge{limit}
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
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return nil, errTooLarge{limit}
			}
			return nil, err
		}
	}
}

// refuse answers a request whose body could not be read; nothing ran.
func refuse(eng *middleware.Engine, w http.ResponseWriter, r *http.Request, procedure string, err error) {
	status := http.StatusBadRequest
	refusal := middleware.NewError(middleware.CodeInvalidArgument, "the request body could not be read")
	switch t, ok := errors.AsType[errTooLarge](err); {
	case ok:
		status = http.StatusRequestEntityTooLarge
		refusal = middleware.NewError(middleware.CodeInvalidArgument, t.Error())
	case r.Context().Err() != nil:
		status = middleware.CodeCancelled.HTTPStatus()
		refusal = middleware.NewError(middleware.CodeCancelled, "the caller cancelled the call")
	}
	refusal.Cause = err
	// An execution that never ran, so the caller still gets an execution id
	// and the audit trail shows the refusal.
	env, _ := eng.Refuse(r.Context(), middleware.Call{Procedure: procedure, ApprovalID: r.Header.Get(middleware.HeaderApprovalID)}, refusal)
	env.SetHeaders(w.Header())
	writeEnvelope(w, env, status)
}
