package twirpadapter

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/twitchtv/twirp"
	"github.com/twitchtv/twirp/ctxsetters"
	"google.golang.org/protobuf/proto"
)

// interceptor is stage 1 and 8 of the pipeline for Twirp: resolve the
// procedure, run the call through the engine with every attempt isolated,
// and write the envelope.
func interceptor(eng *middleware.Engine) twirp.Interceptor {
	return func(next twirp.Method) twirp.Method {
		return func(ctx context.Context, req any) (any, error) {
			proc := procedure(ctx)
			if !eng.Governs(proc) {
				return next(ctx, req)
			}
			x := &exchange{next: next, req: req}
			call := middleware.Call{Procedure: proc, ApprovalID: requestHeader(ctx).Get(middleware.HeaderApprovalID)}
			if m, ok := req.(proto.Message); ok {
				x.msg = m
				call.Input = middleware.ProtoInput(m)
			}
			v, env, err := eng.Execute(ctx, call, x.attempt)
			// The finalized attempt's value comes back on failure too (nil
			// when no attempt returned in time): its headers go out with
			// its response or its error, as Twirp would send them.
			r, _ := v.(result)
			// The envelope's headers are the engine's alone: a handler's
			// copy (of a downstream response, say) is another execution's.
			r.header.Del(middleware.HeaderExecutionID)
			r.header.Del(middleware.HeaderAttempts)
			r.header.Del(middleware.HeaderApprovalID)
			copyHeader(ctx, r.header)
			setEnvelopeHeaders(ctx, env)
			if err != nil {
				return nil, toTwirpError(env, err)
			}
			return r.resp, nil
		}
	}
}

// procedure is "/package.Service/Method", Twirp's path prefix stripped.
func procedure(ctx context.Context) string {
	pkg, _ := twirp.PackageName(ctx)
	svc, _ := twirp.ServiceName(ctx)
	method, _ := twirp.MethodName(ctx)
	if pkg == "" {
		return "/" + svc + "/" + method
	}
	return "/" + pkg + "." + svc + "/" + method
}

// exchange is what the attempts of one call share: the pristine request
// they each clone.
type exchange struct {
	next twirp.Method
	req  any
	msg  proto.Message // req, when it is a message (always, for generated code)
}

// result is an attempt's value: its response (nil when it failed) and the
// headers it set.
type result struct {
	resp   any
	header http.Header
}

// errNilResponse is what a handler returning neither a response nor an
// error fails with; Twirp would refuse it too.
var errNilResponse = errors.New("twirpadapter: the handler returned a nil response and a nil error")

// attempt is the middleware.AttemptFunc. Each attempt gets its own clone of
// the request and its own response-header sink: the context Twirp's
// SetHTTPResponseHeader and AddHTTPResponseHeader write through points at
// the sink, not at the real response, so an attempt abandoned at its
// deadline can set headers for as long as it runs without touching the
// response. The finalized attempt's headers are copied to the response by
// the serving goroutine.
func (x *exchange) attempt(ctx context.Context) (any, error) {
	sink := headerSink{}
	in := x.req
	if x.msg != nil {
		in = proto.Clone(x.msg)
	}
	resp, err := x.next(ctxsetters.WithResponseWriter(ctx, sink), in)
	if err != nil {
		return result{header: http.Header(sink)}, classify(ctx, err)
	}
	if m, ok := resp.(proto.Message); resp == nil || (ok && !m.ProtoReflect().IsValid()) {
		return result{header: http.Header(sink)}, errNilResponse
	}
	return result{resp: resp, header: http.Header(sink)}, nil
}

// classify prepares a handler's error for the engine: a Twirp error the
// handler answers with because its context ended is that context's error
// (TIMEOUT or CANCELLED, decided by the engine), and twirp.Unavailable is
// transient.
func classify(ctx context.Context, err error) error {
	var twerr twirp.Error
	if !errors.As(err, &twerr) {
		return err
	}
	switch twerr.Code() {
	case twirp.Canceled, twirp.DeadlineExceeded:
		if ctx.Err() != nil {
			return ctx.Err()
		}
	case twirp.Unavailable:
		return middleware.Retryable(err)
	}
	return err
}

// headerSink is the response writer an attempt's context carries. Twirp
// handlers reach it only through SetHTTPResponseHeader and
// AddHTTPResponseHeader, which touch its header; the body is Twirp's.
type headerSink http.Header

func (s headerSink) Header() http.Header { return http.Header(s) }

func (headerSink) Write(p []byte) (int, error) { return 0, http.ErrBodyNotAllowed }

func (headerSink) WriteHeader(int) {}

// copyHeader sets h on the real response through ctx, the interceptor's
// context, which Twirp pointed at the real response writer.
func copyHeader(ctx context.Context, h http.Header) {
	for k, vs := range h {
		for i, v := range vs {
			if i == 0 {
				_ = twirp.SetHTTPResponseHeader(ctx, k, v)
			} else {
				_ = twirp.AddHTTPResponseHeader(ctx, k, v)
			}
		}
	}
}

func setEnvelopeHeaders(ctx context.Context, env middleware.Envelope) {
	h := make(http.Header, 3)
	env.SetHeaders(h)
	copyHeader(ctx, h)
}
