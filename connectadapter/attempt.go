package connectadapter

import (
	"context"
	"errors"
	"net/http"
	"reflect"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// attemptCallInfo is the [connect.CallInfo] one attempt's handler sees: the
// framework's, except that response headers and trailers go to the
// attempt's own maps. Embedding the framework's CallInfo supplies the rest
// (spec, peer, request header, HTTP method).
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

// attemptContext is an attempt's context: wherever a lookup would find the
// framework's CallInfo (connect.CallInfoForHandlerContext, in this handler or
// in any interceptor after this one), it finds the attempt's instead.
// Everything else — deadline, cancellation, the execution, other values —
// comes from the engine's attempt context unchanged. It also holds what the
// attempt returned, so that one allocation serves the whole attempt.
type attemptContext struct {
	context.Context
	frame connect.CallInfo
	info  attemptCallInfo
	res   connect.AnyResponse
}

func (c *attemptContext) Value(key any) any {
	v := c.Context.Value(key)
	if ci, ok := v.(connect.CallInfo); ok && ci == c.frame {
		return &c.info
	}
	return v
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

// attemptError is the error one attempt returned, as the handler returned it
// (reachable with errors.Is and errors.As), with the attempt's header sink.
// The engine keeps what an attempt returned as the Cause of its error only
// when that attempt is the one reported, so finding an attemptError in the
// engine's error identifies the finalized attempt, race-free.
type attemptError struct {
	err  error
	sink *attemptCallInfo
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

func asAttemptError(err error) (*attemptError, bool) {
	return errors.AsType[*attemptError](err)
}

// declare turns a handler's error into what the engine should see. A
// *connect.Error is a framework error returned on purpose (SPEC §4): it is
// declared to the engine with its message, so the envelope, the events and
// the wire agree, and marked retryable when its code is Unavailable. A
// *middleware.Error is left to the engine, and so is any other error, which
// the engine conceals.
func declare(ctx context.Context, err error, sink *attemptCallInfo) error {
	if c := connect.CodeOf(err); (c == connect.CodeDeadlineExceeded || c == connect.CodeCanceled) && ctx.Err() != nil {
		// The handler honoured its context (or a downstream call on it
		// ended): the engine classifies by the context's cause.
		return ctx.Err()
	}
	ae := &attemptError{err: err, sink: sink}
	if _, ok := errors.AsType[*middleware.Error](err); ok {
		return ae
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return ae
	}
	return &middleware.Error{
		Code:      middleware.CodeExecutionFailed,
		Message:   ce.Message(),
		Retryable: ce.Code() == connect.CodeUnavailable || middleware.DefaultClassifier(err),
		Cause:     ae,
	}
}
