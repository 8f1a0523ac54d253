// Package connectadapter governs Connect services with agentsafe: one
// connect.WithInterceptors option around an engine, and its guard around
// the generated handler, with the capability metadata written as method
// options in the service's .proto files (or in a Go registry, which
// replaces an option as a whole). The [README] walks through adopting it,
// approvals and the wire format.
//
// # Adopting it
//
//	eng, err := middleware.New(nil) // reads and validates every method option
//	if err != nil {
//		log.Fatal(err) // invalid metadata: every problem, naming procedure and field
//	}
//	interceptor := connectadapter.NewInterceptor(eng)
//	mux.Handle(interceptor.Guard(ordersv1connect.NewOrderServiceHandler(svc,
//		connect.WithInterceptors(interceptor))))
//
// The guard ([Interceptor.Guard]) answers a call the engine hides — a
// policy hides it from its caller, or its capability is not exposed on
// rpc — exactly as the generated handler answers a procedure it does not
// have: http.NotFound's 404, before connect-go reads the body. Without it
// the interceptor still hides such a call, but only once connect-go has
// decoded it, so an undecodable body, a request Connect refuses (405,
// 415) or the Unimplemented error the interceptor then returns tells the
// procedure apart from one that does not exist. The guard sees the
// request's context: authenticate in HTTP middleware (or read the
// credentials in the actor function) for it to hide by actor; hiding
// that needs what an interceptor adds, or the input, is decided after
// decoding, by the interceptor.
//
// Handlers read their execution id, idempotency key and attempt with
// middleware.ExecutionFromContext. To pass the key on to a downstream
// Connect service, give its client a [ClientInterceptor] and an
// *http.Client from [KeyHTTPClient], both naming its hosts:
//
//	hosts := []string{"payments.internal"}
//	payments := paymentsv1connect.NewPaymentServiceClient(
//		connectadapter.KeyHTTPClient(http.DefaultClient, hosts...), url,
//		connect.WithInterceptors(connectadapter.NewClientInterceptor(hosts...)))
//
// Clients read the envelope back with [ReadEnvelope]:
//
//	res, err := client.RefundOrder(ctx, req)
//	if env, ok := connectadapter.ReadEnvelope(res, err); ok && env.Error != nil && env.Error.Retryable {
//		// safe to call again
//	}
//
// # The order things happen in
//
// For each call, on the serving goroutine:
//
//  0. The guard resolves the procedure from the request's path and asks
//     the engine whether it is hidden (adapter.Route.Absent): if so, the
//     404, and nothing else happens.
//  1. A client-side call, or a procedure the engine does not govern, goes
//     straight to the next handler. The procedure (Spec.Procedure) is
//     resolved once against the engine.
//  2. The engine runs the pipeline (see package middleware). A unary call's
//     input is its request message; the Agentsafe-Approval-Id request
//     header is handed over as is.
//  3. Each attempt calls the rest of the interceptor chain and the handler.
//     Interceptors listed before this one run once per call (put
//     authentication there, for the actor function of middleware.WithActor);
//     those listed after it run once per attempt.
//  4. The finalized attempt's response headers and the envelope go to the
//     wire: see "The wire" below.
//
// # Unary calls and attempt isolation
//
// Every attempt runs on its own goroutine and may be abandoned at its
// deadline while the next one starts, so each attempt has:
//
//   - its own request message: the first attempt gets the request as
//     received; when the capability may retry, a pristine proto.Clone is
//     taken before it runs, and every later attempt gets its own clone of
//     that, in its own *connect.Request of the same type (same spec, peer
//     and HTTP method);
//   - its own response header and trailer maps: the attempt's context
//     answers connect.CallInfoForHandlerContext with the attempt's own
//     CallInfo. Only the finalized attempt's reach the wire, copied on the
//     serving goroutine once it has returned; a late attempt writing its
//     maps never races with Connect.
//
// Not isolated, because Connect has no public way to give each attempt its
// own: the request header map, shared by all attempts (read it; do not
// write it), and messages that are not protobuf messages (a custom codec),
// which are shared and have no input to bind.
//
// # Streams
//
// Streaming handlers run once, synchronously: a stream cannot be replayed
// or abandoned. They get a timeout only if the capability sets one,
// cancellation, ids, events and one envelope; never a retry, an approval
// or a digest. Agentsafe-Execution-Id and Agentsafe-Attempts go out in the
// response headers with the first message; the whole envelope is in the
// trailers, on success and on error.
//
// # The wire
//
// A unary response carries the envelope as response headers, in the
// Connect, gRPC and gRPC-Web protocols alike: Agentsafe-Execution-Id,
// Agentsafe-Attempts and, when set, Agentsafe-Approval-Id; on error also
// Agentsafe-Code and Agentsafe-Retryable. They are the engine's alone:
// values a handler sets for them, in its headers, trailers or error
// metadata, are dropped.
//
// A handler's own *connect.Error, and an error Connect raised inside the
// handler (a message too large, say), reaches the client unchanged: code,
// message, details, metadata. Only the agentsafe detail of an error relayed
// from a downstream governed call is dropped, since it describes another
// execution. Every other failure is the engine's: a *connect.Error with the
// envelope's code (TIMEOUT is DeadlineExceeded, approvals are
// FailedPrecondition, PermissionDenied or Unavailable, and so on) and
// message, with an agentsafe.v1.ErrorDetail. A plain Go error is concealed
// as Internal "the operation failed"; its text reaches events only. The
// caller leaving is CANCELLED, never retried, and written without the
// detail as Canceled, or DeadlineExceeded for the caller's own deadline.
// On the server, the engine's *middleware.Error stays reachable from an
// error the engine decided with errors.As, for interceptors listed before
// this one.
//
// [README]: https://github.com/agentsafe/agentsafe#readme
package connectadapter
