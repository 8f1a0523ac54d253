package connectadapter

import (
	"errors"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// detailType is the fully-qualified name of the error detail agentsafe
// attaches to the errors it decides.
var detailType = string((&agentsafev1.ErrorDetail{}).ProtoReflect().Descriptor().FullName())

// wireError is stage 8 for a failed execution: the error the interceptor
// returns to Connect. A handler's or Connect's own error goes back as it
// is ([ownError]). An outcome the engine decided is a new *connect.Error
// with the envelope's code (through [adapter.RPCCode]) and message, and
// agentsafe's detail when [adapter.CarriesDetail]; the engine's error stays
// reachable from it with errors.As, on the server only.
func wireError(err error, env middleware.Envelope) error {
	if own, ok := adapter.HandlerError(err); ok {
		return ownError(own)
	}
	msg := adapter.ConcealedMessage
	if env.Error != nil {
		msg = env.Error.Message
	}
	out := connect.NewError(connect.Code(adapter.RPCCode(err)), &wireMessage{msg: msg, err: err})
	if adapter.CarriesDetail(err) {
		if d, derr := connect.NewErrorDetail(adapter.ErrorDetail(env)); derr == nil {
			out.AddDetail(d)
		}
		if ri := adapter.RetryInfo(env); ri != nil {
			if d, derr := connect.NewErrorDetail(ri); derr == nil {
				out.AddDetail(d)
			}
		}
	}
	return out
}

// ownError returns err, a handler's or Connect's own error, for Connect to
// send exactly as it would without agentsafe, but for what belongs to
// another execution: the agentsafe detail of an error relayed from a
// downstream governed call, and the envelope's headers in its metadata.
// Such an error is rebuilt without them; err itself is never modified (a
// handler may return one error value from many calls).
func ownError(err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return err
	}
	wire := connect.IsWireError(ce)
	var meta http.Header
	if !wire { // Connect drops a wire error's metadata itself
		view := *ce // Meta allocates on a nil map: read it through a copy
		meta = view.Meta()
	}
	if !slices.ContainsFunc(ce.Details(), isEngineDetail) && !hasEnvelopeHeader(meta) {
		return err
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	if wire {
		out = connect.NewWireError(ce.Code(), errors.New(ce.Message()))
	}
	for _, d := range ce.Details() {
		if !isEngineDetail(d) {
			out.AddDetail(d)
		}
	}
	for k, vs := range meta {
		if !adapter.IsEnvelopeHeader(k) {
			out.Meta()[k] = vs
		}
	}
	return out
}

func hasEnvelopeHeader(h http.Header) bool {
	for k := range h {
		if adapter.IsEnvelopeHeader(k) {
			return true
		}
	}
	return false
}

func isEngineDetail(d *connect.ErrorDetail) bool { return d.Type() == detailType }

// wireMessage is the message an engine-decided error shows the caller,
// wrapping the engine's error for errors.Is and errors.As on the server.
type wireMessage struct {
	msg string
	err error
}

func (w *wireMessage) Error() string { return w.msg }
func (w *wireMessage) Unwrap() error { return w.err }
