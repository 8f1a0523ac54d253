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
// request and response headers visible to it (Twirp interceptors see
// neither otherwise). The README (section "Adopting it, one line per
// framework") shows it beside the other adapters.
//
// # What happens to a call
//
//  1. The procedure is "/package.Service/Method" (Twirp's path prefix
//     stripped). A method the engine does not govern (no method option, no
//     registry entry) runs untouched; in strict mode it fails with
//     not_found (CAPABILITY_NOT_FOUND).
//  2. The engine opens the execution with the decoded request as input
//     (bound through protojson, so both encodings give one digest) and the
//     Agentsafe-Approval-Id request header, and runs the approval gate.
//  3. Each attempt runs the handler with its own response-header sink
//     (twirp.SetHTTPResponseHeader and AddHTTPResponseHeader write to it),
//     so an attempt abandoned at its deadline never changes what the
//     client receives; when the capability allows retries, attempts after
//     the first get a proto.Clone of the request as it arrived. The engine
//     reads a handler's twirp.Error by its code: unavailable is transient,
//     canceled or deadline_exceeded after the attempt's context ended is
//     that context's outcome.
//  4. The finalized attempt's response headers go out, and the envelope's
//     replace any a handler set: Agentsafe-Execution-Id,
//     Agentsafe-Attempts and Agentsafe-Approval-Id on success and error,
//     Agentsafe-Code and Agentsafe-Retryable on error.
//  5. The handler's own twirp.Error passes unchanged: code, message and
//     meta (but not agentsafe_ meta, which an error relayed from a
//     governed service downstream carries for another execution). A plain
//     Go error or a panic becomes internal with the concealed message.
//     Every other outcome gets the engine's code for it (TIMEOUT →
//     deadline_exceeded, APPROVAL_REQUIRED → failed_precondition, ...;
//     the caller leaving is canceled, or deadline_exceeded when its own
//     deadline passed) and the envelope's message; the outcomes the engine
//     decided, but the caller leaving, repeat the envelope in the error's
//     meta under the Meta* keys.
//
// A call the engine hides (a policy hides it from its caller, or its
// capability is not exposed on rpc) gets exactly what Twirp answers for a
// path it has no handler for: bad_route, "no handler for path", the
// twirp_invalid_route meta. Twirp decodes the body before any interceptor,
// so Wrap also installs a guard as the last RequestReceived hook, which
// decides before Twirp reads the body — an undecodable body on a hidden
// method is bad_route, not malformed — and has Twirp write the answer,
// your Error and ResponseSent hooks called as for such a path. The guard
// sees the request's context after your RequestReceived hooks (where
// Twirp services authenticate, or in HTTP middleware around the server);
// hiding that needs what an interceptor adds, or the input, is decided by
// the interceptor after decoding.
//
// A request Twirp cannot decode that is not hidden never reaches the
// interceptor: Twirp answers it (malformed) and no execution is opened.
// Twirp has no streaming: a method marked streaming in its descriptor is
// served unary, as Twirp's generator does.
//
// # Clients
//
// Give the client's http.Client a [Transport] and make each call with a
// context from [RecordEnvelope]: the Recorder reads the envelope from the
// response headers, on success and on error. Without them,
// [EnvelopeFromError] reads it from the meta of an error agentsafe
// decided.
package twirpadapter
