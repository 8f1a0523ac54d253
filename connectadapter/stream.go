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
func (i *Interceptor) stream(ctx context.Context, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error {
	ran := false
	env, err := i.eng.ExecuteStream(ctx, middleware.Call{Procedure: conn.Spec().Procedure}, func(ctx context.Context) error {
		ran = true
		if x, ok := middleware.ExecutionFromContext(ctx); ok {
			middleware.Envelope{ExecutionID: x.ID, Attempts: x.Attempt}.SetHeaders(conn.ResponseHeader())
		}
		if err := next(ctx, conn); err != nil {
			return declare(ctx, err, nil)
		}
		return nil
	})
	if !ran {
		// Refused before the handler ran: nothing was sent yet.
		env.SetHeaders(conn.ResponseHeader())
	}
	if err != nil {
		// The ids are already in the response headers, which Connect merges
		// into the error's metadata on the client; adding them to the
		// error's metadata as well would repeat them.
		return wireError(err, env)
	}
	env.SetHeaders(conn.ResponseTrailer())
	return nil
}
