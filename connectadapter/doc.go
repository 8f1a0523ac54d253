// Package connectadapter governs Connect services with agentsafe: one
// connect.WithInterceptors option, with the capability metadata written as
// method options in the service's .proto files (or in a Go registry, which
// replaces an option as a whole).
//
// # Adopting it
//
//	guard, err := connectadapter.New(nil) // method options only; or pass a *middleware.Registry
//	if err != nil {
//		log.Fatal(err) // invalid metadata: every problem, naming procedure and field
//	}
//	mux.Handle(ordersv1connect.NewOrderServiceHandler(svc, connect.WithInterceptors(guard)))
//
// Building the interceptor builds the engine ([middleware.New]), which reads
// the method options of every descriptor in protoregistry.GlobalFiles (where
// generated code registers itself) and validates everything once; an
// invalid option — a retry on a write not declared idempotent, an unknown
// enum value — fails here, never at call time. The engine also marks the Go
// registry's entries for streaming methods as streaming, from their
// descriptors (the interceptor sets nothing), so approval on a stream is
// refused here too. Use [NewInterceptor] to share an engine built
// elsewhere.
//
// Handlers read their execution id, idempotency key and attempt with
// middleware.ExecutionFromContext. To pass the key on to a downstream
// Connect service, give its client a [ClientInterceptor] naming its host,
// and an *http.Client from [KeyHTTPClient] naming the same hosts:
//
//	hosts := []string{"payments.internal"}
//	payments := paymentsv1connect.NewPaymentServiceClient(
//		connectadapter.KeyHTTPClient(http.DefaultClient, hosts...), url,
//		connect.WithInterceptors(connectadapter.NewClientInterceptor(hosts...)))
//
// The interceptor alone cannot see redirects: Go's http.Client copies the
// header it set onto a redirected request, to whatever host; KeyHTTPClient
// removes it from a redirect to a host not listed.
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
//  1. Resolve: a client-side call, or a procedure the engine does not govern,
//     goes straight to the next handler. The procedure is resolved by name
//     (Spec.Procedure) against the engine, which merged the method options
//     and the registry when it was built. A procedure whose method
//     descriptor carries the capability option but which the engine was not
//     built with — its file was linked into the program but not among the
//     files given to middleware.WithProtoFiles — fails closed instead of
//     running ungoverned, because its .proto file promises what the engine
//     would not enforce: the engine refuses it with CAPABILITY_NOT_FOUND
//     (NotFound, with the error detail and an execution id; the message
//     names the procedure and WithProtoFiles). A descriptor the engine
//     cannot see at all, one missing from protoregistry.GlobalFiles that
//     only Spec.Schema carries, is refused by the interceptor itself:
//     Internal, naming the procedure and the fix, with no envelope, since
//     no execution was opened.
//  2. The engine runs the pipeline (see package middleware). A unary call's
//     input is its request message, bound for digests and approvals through
//     protojson and canonical JSON; the Agentsafe-Approval-Id request header
//     is handed over as is (a malformed one is refused InvalidArgument,
//     naming the header, before anything runs).
//  3. Each attempt calls the rest of the interceptor chain and the handler.
//  4. Stage 8 writes the envelope: see "The wire" below.
//
// Interceptors listed before this one in connect.WithInterceptors wrap the
// whole execution and run once per call (put authentication there, so the
// actor function given with middleware.WithActor can read its result from
// the context); those listed after it run once per attempt.
//
// # Unary calls and attempt isolation
//
// Unary calls get the whole pipeline, runtime retries included. Every
// attempt runs on its own goroutine and may be abandoned at its deadline
// while the next one starts, so each attempt has:
//
//   - its own request message: the first attempt to run gets the request as
//     received; when the capability may retry, a pristine proto.Clone is
//     taken before any attempt runs, and every later attempt gets its own
//     clone of it, in its own *connect.Request of the same type (same spec,
//     peer and HTTP method). An attempt that mutates its message never
//     changes what the next one sees;
//   - its own response header and trailer sink: a handler (or a later
//     interceptor) that writes through connect.CallInfoForHandlerContext
//     writes into the attempt's own maps, because the attempt's context
//     answers the lookup of Connect's CallInfo with the attempt's; the
//     headers and trailers on the *connect.Response it returns are its own
//     anyway. After the engine has finalized, on the serving goroutine, the
//     sink of the attempt the envelope reports on — the one that succeeded,
//     or the last one, if it returned an error — is copied into Connect's.
//     The sinks of retried, abandoned or panicking attempts never reach the
//     wire, and an abandoned attempt writing late only touches its own maps,
//     so it never races with Connect writing the response.
//
// Not isolated, because Connect has no public way to give each attempt its
// own: the request header map (request.Header() and
// CallInfo.RequestHeader()) is shared by all attempts. Read it; do not write
// it. Messages that are not protobuf messages (a custom codec) cannot be
// cloned and are shared too, and have no input to bind.
//
// # Streams
//
// Streaming handlers (client, server and bidirectional) run once,
// synchronously: a stream cannot be replayed or abandoned. They get the
// timeout only if the capability sets one, cancellation, ids, events and one
// envelope, never a retry, an approval or a digest. The Agentsafe-Execution-Id
// and Agentsafe-Attempts response headers are set before the handler runs, so
// they go out with the first message; on success the same headers are
// repeated as trailers, the envelope's place in a stream.
//
// # The wire
//
// On success and on error the response carries Agentsafe-Execution-Id,
// Agentsafe-Attempts and, when set, Agentsafe-Approval-Id as HTTP response
// headers, in the Connect, gRPC and gRPC-Web protocols alike. (They are not
// added to the error's metadata as well: Connect would send them twice,
// and its clients see response headers in connect.Error.Meta anyway.)
// These headers are the engine's alone: values a handler sets for them,
// in its headers, trailers or error metadata, are dropped, so a client
// never sees two, or another execution's.
//
// On error the client gets a *connect.Error with an agentsafe.v1.ErrorDetail
// (code name, retryable-for-caller, execution id, approval id, procedure,
// attempts) and:
//
//   - if the handler returned a *connect.Error on purpose (anywhere in its
//     error chain), its code, message, details and metadata. Its code
//     Unavailable marks it retryable at run time; its message is declared to
//     the engine, so envelope, events and wire agree. Metadata of an error
//     that came off the wire from a downstream call is dropped, as Connect
//     itself does, and so is a downstream agentsafe's own ErrorDetail;
//   - otherwise the envelope's code through the engine's one code table
//     (TIMEOUT is DeadlineExceeded, CANCELLED is Canceled, approvals are
//     FailedPrecondition, PermissionDenied or Unavailable, and so on) and its
//     message. A plain Go error is concealed: Internal, "the operation
//     failed"; its text reaches events only. A *middleware.Error keeps its
//     message.
//
// On the server, the engine's *middleware.Error stays reachable from the
// returned error with errors.As, for interceptors listed before this one.
//
// A call whose client gives up (its deadline or a cancel) ends CANCELLED and
// is never retried; the client sees its own DeadlineExceeded or Canceled,
// which carries no envelope.
package connectadapter
