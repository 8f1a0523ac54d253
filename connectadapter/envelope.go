package connectadapter

import (
	"errors"
	"maps"
	"net/http"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/proto"
)

// ReadEnvelope reads the envelope of a governed call back from what a
// Connect client returned: from the error's metadata when err is not nil,
// otherwise from the response headers of res. It reports false when the
// call was not governed (no Agentsafe-Execution-Id), and for an error the
// envelope does not describe: one the client made itself, such as its own
// deadline passing, or one that came after the execution completed.
//
// The ids, the attempt count, the code and the retryable flag come from
// the Agentsafe-* headers; the message is the error's. The procedure comes
// from agentsafe's error detail, which only errors agentsafe decided carry,
// and only when it names the same execution: a detail relayed from a
// downstream governed call describes another one. Duration is never sent
// back.
//
// Check err before res: like every Connect client, the caller gets a nil
// *connect.Response on error, which ReadEnvelope never touches.
func ReadEnvelope(res connect.AnyResponse, err error) (middleware.Envelope, bool) {
	if err != nil || res == nil {
		return ReadEnvelopeHeader(nil, err)
	}
	return ReadEnvelopeHeader(res.Header(), nil)
}

// ReadEnvelopeHeader is [ReadEnvelope] for callers that hold the response
// metadata rather than a *connect.Response: the trailers of a stream, where
// its envelope is (stream.ResponseTrailer(), with stream.Err()), or the
// response header of a connect.CallInfo when using the simple client API.
// The metadata of a *connect.Error in err is read too.
func ReadEnvelopeHeader(header http.Header, err error) (middleware.Envelope, bool) {
	if err == nil {
		return adapter.ReadHeaders(header)
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return middleware.Envelope{}, false
	}
	h := maps.Clone(header)
	if h == nil {
		h = http.Header{}
	}
	maps.Copy(h, ce.Meta())
	env, ok := adapter.ReadHeaders(h)
	if !ok || env.Error == nil {
		return middleware.Envelope{}, false
	}
	env.Error.Message = ce.Message()
	if d := engineDetail(ce); d != nil && d.GetExecutionId() == env.ExecutionID {
		env.Procedure = d.GetProcedure()
	}
	return env, true
}

// engineDetail decodes the agentsafe error detail of ce, or returns nil.
func engineDetail(ce *connect.Error) *agentsafev1.ErrorDetail {
	for _, d := range ce.Details() {
		m := new(agentsafev1.ErrorDetail)
		if isEngineDetail(d) && proto.Unmarshal(d.Bytes(), m) == nil {
			return m
		}
	}
	return nil
}
