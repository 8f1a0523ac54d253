package connectadapter

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/proto"
)

// ReadEnvelope reads the envelope of a governed call back from what a
// Connect client returned: from err when it is not nil, otherwise from the
// response headers of res. It reports false when the call was not governed
// (no Agentsafe-Execution-Id header, no agentsafe error detail), and for
// errors the client made itself, such as its own deadline passing.
//
// On success the envelope has the execution id, the attempt count, the
// approval id if any and Status completed; the procedure is not sent back
// on success, and Duration never is. On failure it has everything the error
// detail carries, and the error's message.
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
// metadata rather than a *connect.Response: the response header of a
// stream (stream.ResponseHeader(), with stream.Err()), or of a
// connect.CallInfo when using the simple client API.
func ReadEnvelopeHeader(header http.Header, err error) (middleware.Envelope, bool) {
	if err != nil {
		return envelopeFromError(err)
	}
	return middleware.EnvelopeFromHeaders(header)
}

// envelopeFromError decodes the agentsafe error detail of a *connect.Error.
// If several are attached, the last one wins: a server adds its own last.
func envelopeFromError(err error) (middleware.Envelope, bool) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return middleware.Envelope{}, false
	}
	var d *agentsafev1.ErrorDetail
	for _, detail := range ce.Details() {
		if detail.Type() != detailType {
			continue
		}
		m := new(agentsafev1.ErrorDetail)
		if proto.Unmarshal(detail.Bytes(), m) == nil {
			d = m
		}
	}
	if d == nil {
		return middleware.Envelope{}, false
	}
	return middleware.EnvelopeFromDetail(d, ce.Message()), true
}
