package connectadapter

import (
	"context"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// stream governs a streaming handler: one synchronous run (a stream cannot
// be replayed), the ids in the response headers before the handler's first
// message, and the envelope in the trailers.
//
// The envelope's headers are the engine's alone. A handler writes the
// stream's header and trailer maps directly, so a value it sets for one of
// them (relayed from a downstream response, say) is replaced again just
// before the headers go out, at its first Send, and in the trailers at the
// end.
func stream(ctx context.Context, route adapter.Route, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error {
	own := &envelopeConn{StreamingHandlerConn: conn}
	call := adapter.Call[struct{}]{Surface: adapter.SurfaceRPC, Status: status}
	env, err := adapter.ExecuteStream(ctx, route, call, func(ctx context.Context) error {
		x, _ := middleware.ExecutionFromContext(ctx)
		own.ids = middleware.Envelope{ExecutionID: x.ID, Attempts: x.Attempt}
		return next(ctx, own)
	})
	if !own.sent {
		// Nothing went out yet: headers and trailers leave together, and
		// the trailers carry the whole envelope.
		adapter.DelHeaders(conn.ResponseHeader())
	}
	adapter.DelHeaders(conn.ResponseTrailer())
	adapter.SetHeaders(conn.ResponseTrailer(), env)
	if err != nil {
		return wireError(err, env)
	}
	return nil
}

// envelopeConn is the stream a governed handler sees: its first message
// goes out with the execution's ids as the only envelope headers.
type envelopeConn struct {
	connect.StreamingHandlerConn
	ids  middleware.Envelope
	sent bool // only the handler's goroutine sends, as Connect requires
}

func (c *envelopeConn) Send(msg any) error {
	if !c.sent {
		c.sent = true
		adapter.SetHeaders(c.ResponseHeader(), c.ids)
	}
	return c.StreamingHandlerConn.Send(msg)
}
