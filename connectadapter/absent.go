package connectadapter

import (
	"errors"

	"connectrpc.com/connect"
)

// absent is the error a hidden call ends with (see adapter.Hidden): what a
// Connect client reports for a procedure the server has no handler for.
// A Connect server answers one with its mux's (or the generated service
// handler's) plain 404, which the client reads as Unimplemented with the
// HTTP status as the message: "404 Not Found" for a unary call in the
// Connect protocol, "HTTP status 404 Not Found" in every other case. An
// interceptor cannot send that 404 itself, so it sends the error the
// client would have made of it.
func absent(spec connect.Spec, peer connect.Peer) error {
	msg := "HTTP status 404 Not Found"
	if peer.Protocol == connect.ProtocolConnect && spec.StreamType == connect.StreamTypeUnary {
		msg = "404 Not Found"
	}
	return connect.NewError(connect.CodeUnimplemented, errors.New(msg))
}
