// Package grpcadapter governs a google.golang.org/grpc server with
// agentsafe: one interceptor pair, with capability metadata from the
// agentsafe.v1.capability method option (or a middleware.Registry).
//
//	eng, err := middleware.New(nil, middleware.WithEventSink(middleware.NewSlogSink(nil)))
//	srv := grpc.NewServer(grpcadapter.ServerOptions(eng)...)
//
// It is written only against the public API of package middleware, the way
// an adapter outside this repository would be, and it passes
// conformance.RunAdapter.
//
// Unary calls get the whole pipeline. Each attempt runs on a clone of the
// request message and with its own header and trailer sink (a
// grpc.ServerTransportStream of its own), so only the finalized attempt's
// grpc.SetHeader/SetTrailer calls reach the client. Streams run
// synchronously, are never retried, and carry the execution id in their
// response headers before the first message.
//
// On the wire, every governed response carries the metadata
// agentsafe-execution-id, agentsafe-attempts and, when set,
// agentsafe-approval-id. These keys are the engine's alone: a handler that
// sets or forwards them, in its header or trailer, unary or stream, has its
// values dropped, so a client never sees two. An error is a status with the
// mapped code and an agentsafe.v1.ErrorDetail: a status the handler returned
// keeps its code and message (not its own details), except one with
// codes.Unknown, which is concealed like a plain Go error: Internal, "the
// operation failed". [EnvelopeFrom] reads it back on the client. A request
// carries an approval id in the agentsafe-approval-id metadata key.
package grpcadapter
