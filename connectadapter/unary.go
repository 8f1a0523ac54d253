package connectadapter

import (
	"context"
	"errors"
	"net/http"
	"reflect"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/protobuf/proto"
)

// unary governs one unary call: the engine runs attempts of next, each
// with its own request message (when the capability may retry) and its own
// response header and trailer sink; once it has finalized, the finalized
// attempt's sink and the envelope go to Connect, on the serving goroutine.
func unary(ctx context.Context, route adapter.Route, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	frame, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok { // connect gives every handler one; fail closed rather than run ungoverned
		return nil, connect.NewError(connect.CodeInternal, errors.New("agentsafe: no connect.CallInfo in the handler's context"))
	}
	// Headers by their canonical names, as the server stores them.
	call := adapter.Call[*attempt]{ApprovalID: adapter.ApprovalID(req.Header()[adapter.HeaderApprovalID]), Surface: adapter.SurfaceRPC, Status: status,
		IdempotencyKey: callerKey(req.Header()), Codec: newReplayCodec(req.Spec())}
	var snapshot proto.Message
	if msg, ok := req.Any().(proto.Message); ok {
		call.Input = adapter.ProtoInput(msg)
		if route.MayRetry() {
			snapshot = proto.Clone(msg)
		}
	}
	a, env, err := adapter.Execute(ctx, route, call, func(ctx context.Context) (*attempt, error) {
		in := req
		if x, _ := middleware.ExecutionFromContext(ctx); x.Attempt > 1 && snapshot != nil {
			in = withMessage(req, proto.Clone(snapshot))
		}
		own := &attempt{Context: ctx, frame: frame, info: attemptCallInfo{CallInfo: frame}}
		var err error
		own.res, err = next(own, in)
		return own, err
	})
	if adapter.Hidden(err) {
		return nil, absent(req.Spec(), req.Peer())
	}
	if a != nil { // the finalized attempt returned: its sink is final
		adapter.DelHeaders(a.info.header)
		adapter.DelHeaders(a.info.trailer)
		if len(a.info.header) > 0 { // asking Connect for a map makes one
			merge(frame.ResponseHeader(), a.info.header)
		}
		if len(a.info.trailer) > 0 {
			merge(frame.ResponseTrailer(), a.info.trailer)
		}
	}
	adapter.SetHeaders(frame.ResponseHeader(), env) // Connect sends them on success and error alike
	if err != nil {
		return nil, wireError(err, env)
	}
	if a == nil { // a replay, and no schema to rebuild its response with
		return nil, connect.NewError(connect.CodeInternal, errors.New("agentsafe: a stored result cannot be replayed without the method's schema (connect.WithSchema)"))
	}
	if a.res != nil { // Connect sends the response's own headers and trailers too
		adapter.DelHeaders(a.res.Header())
		adapter.DelHeaders(a.res.Trailer())
	}
	return a.res, nil
}

// attempt is one attempt's context: wherever a lookup would find Connect's
// CallInfo (connect.CallInfoForHandlerContext, in the handler or in any
// interceptor after this one), it finds the attempt's own, whose response
// headers and trailers are the attempt's own maps. Everything else comes
// from the engine's attempt context. It also holds what the attempt
// returned, so that one allocation serves the whole attempt.
type attempt struct {
	context.Context
	frame connect.CallInfo
	info  attemptCallInfo
	res   connect.AnyResponse
}

func (a *attempt) Value(key any) any {
	v := a.Context.Value(key)
	if ci, ok := v.(connect.CallInfo); ok && ci == a.frame {
		return &a.info
	}
	return v
}

// attemptCallInfo is Connect's CallInfo (spec, peer, request header, HTTP
// method) with the attempt's own response header and trailer maps.
type attemptCallInfo struct {
	connect.CallInfo
	header, trailer http.Header
}

func (c *attemptCallInfo) ResponseHeader() http.Header {
	if c.header == nil {
		c.header = make(http.Header)
	}
	return c.header
}

func (c *attemptCallInfo) ResponseTrailer() http.Header {
	if c.trailer == nil {
		c.trailer = make(http.Header)
	}
	return c.trailer
}

// withMessage returns a copy of req carrying msg: the same spec, peer,
// HTTP method and request header map, of the same concrete *connect.Request
// type the handler expects. Connect offers no constructor that is not
// generic in the message type, so the copy is made by reflection on the
// exported Msg field and a whole-struct copy. It returns req unchanged if
// req is not a *connect.Request of msg's type.
func withMessage(req connect.AnyRequest, msg any) connect.AnyRequest {
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return req
	}
	cp := reflect.New(v.Type().Elem())
	cp.Elem().Set(v.Elem())
	f := cp.Elem().FieldByName("Msg")
	m := reflect.ValueOf(msg)
	if !f.IsValid() || !f.CanSet() || !m.IsValid() || !m.Type().AssignableTo(f.Type()) {
		return req
	}
	f.Set(m)
	out, ok := cp.Interface().(connect.AnyRequest)
	if !ok {
		return req
	}
	return out
}

func merge(into, from http.Header) {
	for k, vs := range from {
		into[k] = append(into[k], vs...)
	}
}
