package connectadapter

import (
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// detailType is the fully-qualified name of the error detail agentsafe
// attaches to every governed error.
var detailType = string((&agentsafev1.ErrorDetail{}).ProtoReflect().Descriptor().FullName())

// wireError is stage 8 for a failed execution: the *connect.Error the
// client receives, carrying the agentsafe error detail.
//
// The code and message are the handler's own when the reported attempt
// returned a *connect.Error (its details and, unless it came off the wire
// from a downstream call, its metadata are kept); otherwise they are the
// envelope's, through the one code table ([middleware.Code.RPCCode]), which
// conceals plain Go errors as Internal "the operation failed". The engine's
// error stays reachable on the server with errors.As, never on the wire.
func wireError(err error, env middleware.Envelope) *connect.Error {
	var out *connect.Error
	if ce, ok := handlerError(err); ok {
		out = connect.NewError(ce.Code(), &wireMessage{msg: ce.Message(), err: err})
		for _, d := range ce.Details() {
			if d.Type() != detailType { // a downstream agentsafe's detail is not ours
				out.AddDetail(d)
			}
		}
		if !connect.IsWireError(ce) {
			merge(out.Meta(), ce.Meta())
			dropEnvelope(out.Meta())
		}
	} else {
		code, msg := middleware.CodeExecutionFailed, middleware.ConcealedMessage
		if env.Error != nil {
			code, msg = env.Error.Code, env.Error.Message
		}
		out = connect.NewError(connect.Code(code.RPCCode()), &wireMessage{msg: msg, err: err})
	}
	if d, derr := connect.NewErrorDetail(env.ErrorDetail()); derr == nil {
		out.AddDetail(d)
	}
	return out
}

// handlerError returns the *connect.Error the handler of the reported
// attempt returned on purpose, if that is what the execution failed with.
func handlerError(err error) (*connect.Error, bool) {
	if middleware.CodeOf(err) != middleware.CodeExecutionFailed {
		return nil, false
	}
	ae, ok := asAttemptError(err)
	if !ok {
		return nil, false
	}
	if _, declared := errors.AsType[*middleware.Error](ae.err); declared {
		return nil, false
	}
	return errors.AsType[*connect.Error](ae.err)
}

// wireMessage is the message a governed error shows the caller, wrapping the
// engine's error for errors.Is and errors.As on the server.
type wireMessage struct {
	msg string
	err error
}

func (w *wireMessage) Error() string { return w.msg }
func (w *wireMessage) Unwrap() error { return w.err }

// dropEnvelope deletes the envelope's headers from h, however they are
// spelled. They are the engine's alone: a handler's copy (forwarded from a
// downstream response, say) belongs to another execution, and would put a
// second value on the wire or, in a stream, replace the engine's.
func dropEnvelope(h http.Header) {
	for k := range h {
		switch {
		case strings.EqualFold(k, middleware.HeaderExecutionID),
			strings.EqualFold(k, middleware.HeaderAttempts),
			strings.EqualFold(k, middleware.HeaderApprovalID):
			delete(h, k)
		}
	}
}

// setEnvelope makes env's ids the only envelope headers in h.
func setEnvelope(h http.Header, env middleware.Envelope) {
	dropEnvelope(h)
	env.SetHeaders(h)
}
