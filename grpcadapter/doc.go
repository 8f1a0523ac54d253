// Package grpcadapter governs a google.golang.org/grpc server with
// agentsafe: one interceptor pair, with capability metadata from the
// agentsafe.v1.capability method option (or a middleware.Registry).
//
//	eng, err := middleware.New(nil, middleware.WithEventSink(middleware.NewSlogSink(nil)))
//	srv := grpc.NewServer(grpcadapter.ServerOptions(eng)...)
//	ordersv1.RegisterOrderServiceServer(grpcadapter.Guard(eng, srv), svc) // hidden looks absent
//	// client side: the key downstream, the envelope back
//	conn, err := grpc.NewClient(target, grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor("payments.internal")))
//	env, ok := grpcadapter.EnvelopeFrom(header, trailer, err) // grpc.Header(&header), grpc.Trailer(&trailer)
//
// A governed unary call goes in this order: the interceptor resolves the
// method and hands the engine the request and the agentsafe-approval-id
// metadata; the engine runs the attempts, each with its own header and
// trailer sink (a grpc.ServerTransportStream of its own) and, when a retry
// is possible, every attempt after the first on a fresh copy of the request
// as the caller sent it; then the finalized attempt's metadata and the
// envelope go on the wire. Streams run once, synchronously, never retried.
//
// The envelope travels as metadata: agentsafe-execution-id,
// agentsafe-attempts, agentsafe-approval-id when set, and on failure
// agentsafe-code and agentsafe-retryable; in the header of a unary call, in
// the trailer of a stream (whose header carries the execution id before
// the first message). These keys are the engine's alone: a handler's
// copies are dropped. A status error the handler returned passes unchanged,
// as grpc-go sends it without agentsafe: code (codes.Unknown included),
// message and details. A plain Go error is concealed as Internal, "the
// operation failed". Only outcomes agentsafe decided (timeout, approvals,
// concealment, a panic) carry an agentsafe.v1.ErrorDetail; the caller's own
// deadline is DeadlineExceeded. gRPC follows no redirects, so the client
// interceptors send the idempotency key only to the hosts listed.
//
// A call the engine hides (a policy hides it from its caller, or its
// capability is not exposed on rpc) gets exactly what grpc-go answers for
// a method the service does not have: Unimplemented, "unknown method M for
// service S", no metadata. grpc-go decodes a unary request before any
// interceptor runs, so register services through [Guard], which decides
// in the method's handler before the request is decoded: without it an
// undecodable body on a hidden method gets Internal. The guard sees the
// incoming metadata, not what an interceptor adds later: the actor
// function must work from the metadata for it to hide by actor; hiding
// that needs what an authentication interceptor adds, or the input, is
// decided by the interceptor after decoding.
//
// It is written only against packages middleware and middleware/adapter,
// as an adapter outside this repository would be, and passes
// conformance.RunAdapter. See the README: https://github.com/agentsafe/agentsafe#readme
package grpcadapter
