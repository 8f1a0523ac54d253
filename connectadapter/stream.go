package connectadapter

import (
	"context"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// stream governs a streaming handler: one synchronous run (a stream cannot
// be replayed), the ids in the response headers before the handler can send
// its first message, and the envelope in the trailers: the Agentsafe-*
// trailers on success, the error detail on failure. The engine applies a
// timeout only if the capability sets one, and never retries.
//
// The envelope's headers are the engine's alone. A handler writes the
// stream's header and trailer maps directly, so a value it sets for one of
// them (forwarded from a downstream response, say) is dropped again just
// before the headers go out — at its first Send, or when it returns — and
// from the trailers at the end.
func (i *Interceptor) stream(ctx context.Context, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error {
	own := &envelopeConn{StreamingHandlerConn: conn}
	env, err := i.eng.ExecuteStream(ctx, middleware.Call{Procedure: conn.Spec().Procedure}, func(ctx context.Context) error {
		if x, ok := middleware.ExecutionFromContext(ctx); ok {
			own.ids = middleware.Envelope{ExecutionID: x.ID, Attempts: x.Attempt}
			own.ids.SetHeaders(conn.ResponseHeader())
		}
		if err := next(ctx, own); err != nil {
			return declare(ctx, err, nil)
		}
		return nil
	})
	if !own.sent {
		// Refused before the handler ran, or it sent nothing: the headers
		// go out with the error or the end of the stream.
		setEnvelope(conn.ResponseHeader(), env)
	}
	dropEnvelope(conn.ResponseTrailer())
	if err != nil {
		// The ids are already in the response headers, which Connect merges
		// into the error's metadata on the client; adding them to the
		// error's metadata as well would repeat them.
		return wireError(err, env)
	}
	env.SetHeaders(conn.ResponseTrailer())
	return nil
}

// envelopeConn is the stream a governed handler sees: before its first
// message goes out with the response headers, the envelope's ids are made
// the only ones there.
type envelopeConn struct {
	connect.StreamingHandlerConn
	ids  middleware.Envelope
	sent bool // only the handler's goroutine sends, as Connect requires
}

func (c *envelopeConn) Send(msg any) error {
	if !c.sent {
		c.sent = true
		setEnvelope(c.ResponseHeader(), c.ids)
	}
	return c.StreamingHandlerConn.Send(msg)
}
