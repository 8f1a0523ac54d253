// Package twirpadapter governs Twirp services with the agentsafe engine. A
// service adopts it with one call that wraps its generated server
// constructor:
//
//	eng, err := middleware.New(reg) // capabilities from method options and reg
//	// ...
//	srv := twirpadapter.Wrap(eng, func(opts ...any) orderv1.TwirpServer {
//		return orderv1.NewOrderServiceServer(svc, opts...)
//	})
//	mux.Handle(srv.PathPrefix(), srv)
//
// Wrap installs agentsafe's interceptor through the options it hands the
// constructor, and wraps the server in a small handler that makes the
// request headers visible to it (Twirp interceptors see none otherwise).
//
// # What happens to a call
//
//  1. The procedure is "/package.Service/Method" (Twirp's path prefix
//     stripped). A method the engine does not govern (no method option, no
//     registry entry) runs untouched; in strict mode it fails with
//     not_found (CAPABILITY_NOT_FOUND).
//  2. The engine opens the execution with the decoded request as input
//     (bound through protojson, see [middleware.ProtoInput]) and the
//     Agentsafe-Approval-Id request header, and runs the approval gate.
//  3. Each attempt runs the handler with its own proto.Clone of the request
//     and its own response-header sink: the context it gets routes
//     twirp.SetHTTPResponseHeader and AddHTTPResponseHeader to the sink,
//     not to the response, so an attempt abandoned at its deadline can
//     never change what the client receives. twirp.Unavailable errors are
//     transient (retried where the capability allows); a twirp.Canceled or
//     DeadlineExceeded error returned after the attempt's context ended is
//     that context's outcome, TIMEOUT or CANCELLED.
//  4. The finalized attempt's response headers are copied to the response,
//     plus Agentsafe-Execution-Id, Agentsafe-Attempts and, when set,
//     Agentsafe-Approval-Id, on success and on error (a handler cannot set
//     these three itself).
//  5. On error the call fails with a twirp.Error: the handler's own
//     twirp.Error keeps its code, message and meta (but not agentsafe_*
//     meta, which a relayed downstream error carries for another
//     execution); a plain Go error or a
//     panic becomes internal with [middleware.ConcealedMessage]; outcomes
//     the engine decides get their code from one table (TIMEOUT →
//     deadline_exceeded, CANCELLED → canceled, APPROVAL_REQUIRED and
//     APPROVAL_PENDING → failed_precondition, APPROVAL_UNAVAILABLE →
//     unavailable, other APPROVAL_* → permission_denied, UNAUTHENTICATED →
//     unauthenticated, RESOURCE_EXHAUSTED → resource_exhausted,
//     CAPABILITY_NOT_FOUND → not_found, INVALID_ARGUMENT →
//     invalid_argument, EXECUTION_FAILED → internal) and the envelope's
//     message. The envelope is in the error's meta under the Meta* keys.
//
// A request Twirp cannot decode never reaches the interceptor: Twirp
// answers it (malformed) and no execution is opened. Twirp has no
// streaming: a method marked streaming in its descriptor is served unary,
// as Twirp's generator does.
//
// # Clients
//
// [EnvelopeFromError] reads the envelope from a failed call's error. A
// successful call's envelope travels in response headers, which generated
// clients do not expose: give the client's http.Client a [Transport] and
// make the call with a context from [RecordEnvelope].
package twirpadapter
