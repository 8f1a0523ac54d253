package twirpadapter

import (
	"context"
	"errors"
	"maps"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/twitchtv/twirp"
	"github.com/twitchtv/twirp/ctxsetters"
	"google.golang.org/protobuf/proto"
)

// interceptor is stage 1 and 8 of the pipeline for Twirp: resolve the
// procedure, hand the call to the engine with every attempt isolated, and
// write the envelope. It runs on the serving goroutine, so it writes the
// response headers directly.
func interceptor(eng *middleware.Engine) twirp.Interceptor {
	return func(next twirp.Method) twirp.Method {
		return func(ctx context.Context, req any) (any, error) {
			route := adapter.Resolve(eng, procedure(ctx))
			if !route.Governed() {
				return next(ctx, req)
			}
			w, ok := ctx.Value(wireKey{}).(*wire)
			if !ok { // fail closed: the generated server was mounted, not Wrap's
				return nil, twirp.InternalError("twirpadapter: serve the *Server that Wrap returned")
			}
			// The header by its canonical name, as the server stores it.
			call := adapter.Call[*result]{ApprovalID: adapter.ApprovalID(w.req[adapter.HeaderApprovalID]), Surface: adapter.SurfaceRPC, Status: status,
				IdempotencyKey: callerKey(w.req), Codec: newReplayCodec(route.Procedure())}
			msg, _ := req.(proto.Message) // always one, for generated code
			var snapshot proto.Message
			if msg != nil {
				call.Input = adapter.ProtoInput(msg)
				if route.MayRetry() { // attempt 1 may change req; later ones copy this
					snapshot = proto.Clone(msg)
				}
			}
			r, env, err := adapter.Execute(ctx, route, call, func(ctx context.Context) (*result, error) {
				in := req
				if x, _ := middleware.ExecutionFromContext(ctx); snapshot != nil && x.Attempt > 1 {
					in = proto.Clone(snapshot)
				}
				return attempt(ctx, next, in)
			})
			if adapter.Hidden(err) {
				return nil, absent(w)
			}
			// The finalized attempt comes back on failure too (nil when none
			// returned in time): its headers go out with its response or its
			// error, as Twirp would send them. SetHeaders replaces a
			// handler's copies of the envelope's (of a downstream response,
			// say).
			if r != nil {
				maps.Copy(w.resp, r.header)
			}
			adapter.SetHeaders(w.resp, env)
			if err != nil {
				return nil, twirpError(env, err)
			}
			if r == nil { // a replay, and no descriptor to rebuild its response with
				return nil, twirp.InternalError("agentsafe: a stored result cannot be replayed without the method's descriptor linked")
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

// result is an attempt's value: its response (nil when it failed) and the
// headers it set.
type result struct {
	resp   any
	header http.Header
}

// errNilResponse is what a handler returning neither a response nor an
// error fails with; Twirp would refuse it too.
var errNilResponse = errors.New("twirpadapter: the handler returned a nil response and a nil error")

// attempt runs one attempt with its own response-header sink: the context
// Twirp's SetHTTPResponseHeader and AddHTTPResponseHeader write through
// points at the sink, not at the response, so an attempt abandoned at its
// deadline can set headers for as long as it runs without touching the
// response.
func attempt(ctx context.Context, next twirp.Method, in any) (*result, error) {
	r := &result{header: http.Header{}}
	resp, err := next(ctxsetters.WithResponseWriter(ctx, headerSink(r.header)), in)
	if err != nil {
		return r, err
	}
	if m, ok := resp.(proto.Message); resp == nil || (ok && !m.ProtoReflect().IsValid()) {
		return r, errNilResponse
	}
	r.resp = resp
	return r, nil
}

// headerSink is the response writer an attempt's context carries. Twirp
// handlers reach it only through SetHTTPResponseHeader and
// AddHTTPResponseHeader, which touch its header; the body is Twirp's.
type headerSink http.Header

func (s headerSink) Header() http.Header { return http.Header(s) }

func (headerSink) Write([]byte) (int, error) { return 0, http.ErrBodyNotAllowed }

func (headerSink) WriteHeader(int) {}
