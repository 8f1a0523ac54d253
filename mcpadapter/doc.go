// Package mcpadapter reaches agents where they are: it exposes the governed
// procedures of Connect services as MCP tools, for the official MCP Go SDK
// (github.com/modelcontextprotocol/go-sdk), with the tool listing derived
// from the same metadata the engine enforces and every tool call governed
// by the same engine as any other caller.
//
//	eng, err := middleware.New(reg, middleware.WithActor(actorOf), middleware.WithApprovalStore(store),
//		middleware.WithEventSink(mcpadapter.ProgressSink())) // optional: retries as MCP progress
//	mux.Handle(ordersv1connect.NewOrderServiceHandler(svc,
//		connect.WithInterceptors(auth, connectadapter.NewInterceptor(eng))))
//	bridge, err := mcpadapter.New(eng, mux, []string{ordersv1connect.OrderServiceName})
//	if err != nil {
//		log.Fatal(err) // every problem at once, naming procedures
//	}
//	mux.Handle("/mcp", bridge.Handler(nil)) // streamable HTTP; or bridge.NewServer for any transport
//
// # Tools
//
// New lists one tool per unary procedure of the named services that the
// engine has a capability for; ungoverned procedures never appear, and
// streaming ones are left out, because a tool call has one input and one
// result.
//
//   - Name: the capability's ToolName (the tool_name method option, or the Go
//     registry's Capability.ToolName) when set, else the method name in snake
//     case: /orders.v1.OrderService/RefundOrder is "refund_order". Names must
//     be valid MCP tool names (1–128 characters of A-Z a-z 0-9 _ - .); two
//     procedures under one name fail New, naming both.
//   - Description: the capability's Description.
//   - Annotations: the engine's hints (middleware.Capability.Hints), the one
//     mapping shared with the capability listing: readOnlyHint for side
//     effect none or read, destructiveHint for destructive, idempotentHint
//     for a declared Idempotent, openWorldHint for external. destructiveHint
//     and openWorldHint are always written, because MCP defaults them to true.
//   - Input schema: the request message as protojson reads it, plus the
//     optional "_approval_id" and "_idempotency_key" arguments; output
//     schema: the response message as protojson writes it. Messages are
//     closed objects of their fields under their JSON names; nothing is
//     required (proto3 has no required fields; proto2 required ones are
//     listed); 64-bit integers are an integer or a decimal string; enums
//     are their value names; repeated fields are arrays and maps objects;
//     well-known types take their JSON form (Timestamp and Duration
//     strings, wrappers their scalar, Struct, Value, ListValue, Any); a
//     message that can contain itself is defined once under $defs.
//   - _meta: "agentsafe/procedure", "agentsafe/sideEffect", "agentsafe/risk"
//     and, for capabilities that always need an approval,
//     "agentsafe/approvalType".
//
// # The order things happen in
//
// For each tools/call, on the SDK's handler goroutine:
//
//  1. The arguments are split: "_approval_id" and "_idempotency_key" are
//     taken out (so neither is part of the input digest), the rest is
//     decoded with protojson into the request message. Arguments protojson
//     refuses (an unknown field, a wrong type) fail the call with
//     INVALID_ARGUMENT naming the argument ("items[2].quantity"), and
//     nothing runs.
//  2. The request headers are made by the WithHeaders function: by default
//     the Authorization header of the MCP HTTP request, so the identity the
//     MCP client authenticated with is the one the service authenticates.
//     The Agentsafe-Approval-Id header is set from "_approval_id" only, and
//     the Idempotency-Key header from "_idempotency_key" only (a header the
//     function forwards is dropped).
//  3. The procedure is called in process: one Connect request (binary
//     protobuf) served by the handler given to New, on the call's context.
//     The service's interceptors, its authentication and the engine run as
//     for any caller; the engine's actor function sees what the service's
//     authentication found. Cancelling the MCP request cancels the context:
//     the execution ends CANCELLED and the handler's context is done. The
//     SDK still answers the cancelled request (notifications/cancelled on a
//     2025-11-25 session), and that answer is the execution's: isError
//     with its envelope (its execution id, CANCELLED) in the text and in
//     _meta, never Go's error text; the execution ends in its one final
//     event, capability.cancelled.
//  4. The envelope becomes the result (below).
//
// # Results
//
//   - completed: structuredContent is the response as JSON (protojson,
//     lowerCamelCase names, zero values included, compact), and a text
//     content carries the same JSON for clients that read only text;
//   - an outcome the engine decided is isError with the envelope's JSON form
//     as text — {"status", "executionId", "procedure", "attempts", "error":
//     {"code", "message", "retryable"}, "approvalId"}, retryable meaning safe
//     to re-invoke, messages what the engine lets callers see (a plain Go
//     error stays "the operation failed"); approval_required and
//     APPROVAL_PENDING add a text saying what to do next, APPROVAL_CONSUMED
//     one saying the approved call already ran;
//   - the handler's own Connect error passes unchanged: isError with the
//     error as Connect writes it, {"code", "message", "details"};
//   - a call refused before the engine ran (invalid arguments, the service's
//     authentication, the caller leaving) is isError with the envelope's
//     JSON shape and no execution id; its code is the Connect code read
//     back through the wire table (EXECUTION_FAILED where no one code
//     fits; Unknown and Internal messages concealed).
//
// Results of calls the engine ran carry the envelope in _meta under
// "agentsafe/envelope" ([ReadEnvelope]) and the response headers under
// "agentsafe/headers" ([ReadHeader]): the Agentsafe-* headers, and those
// named with [WithResponseHeaders].
//
// # Exposure, policies and hidden tools
//
// MCP is opt-in: New makes tools only of capabilities exposed on the mcp
// surface (Capability.Exposure, the exposure method option). Every tool
// call comes in on that surface: the bridge marks its in-process request
// through the request's context (adapter.WithSurface), never through a
// header a remote caller could send, so the engine answers a call of a
// capability not exposed on mcp as if it did not exist.
//
// A tools/list leaves out, for the caller who lists, every tool a policy
// hides (middleware.WithPolicy): each policy is asked with Listing set and
// no input, on the listing request's context, where the engine's actor
// function must find who lists — put the service's HTTP authentication in
// front of [Bridge.Handler], or connect other transports with a context
// that says who they are for. When it cannot tell (or a policy fails), a
// tool a policy of yours judges is left out: closed. A tool call that a
// policy hides gets exactly the SDK's answer for a tool the server does
// not have (a JSON-RPC invalid-params error, "unknown tool"), arguments
// refused included.
//
// # Repeating a call
//
// Every tool takes an optional "_idempotency_key", described to the model
// as: "Optional. When repeating a call of this tool that got no reply or
// failed, send the same value; use a new value only for a new operation."
// It is the caller's key of the engine's result store
// (middleware.WithResultStore): a repeat with the same value and the same
// other arguments gets the first call's result, replayed (the same
// structured content; the envelope in _meta names the first execution and
// says "replayed": true), and runs nothing; the value with other arguments
// is IDEMPOTENCY_KEY_REUSED, a repeat while the first runs
// IDEMPOTENCY_IN_FLIGHT. The value is any 1 to 255 printable ASCII
// characters, sent to the service as the Idempotency-Key header (quoted).
// New refuses a request message with a field of that name. An engine
// without a result store ignores it.
//
// # Resuming an approved call
//
// A call that needs an approval ends approval_required with an approval
// id, and nothing runs. Once a human approved it (middleware.Engine.Decide,
// an approval console), the model calls the same tool again with the same
// arguments and "_approval_id". The argument only sets the
// Agentsafe-Approval-Id request header; the engine's binding decides, in
// one atomic step: the same actor, procedure and input digest, approved,
// unexpired, unconsumed. So the argument cannot be bent into another call:
// other arguments are APPROVAL_INPUT_MISMATCH, another tool
// APPROVAL_RESUME_MISMATCH, a second resume APPROVAL_CONSUMED; when the
// tool's capability has a preview (middleware.WithPreview) and the state
// it previews changed since the approval, APPROVAL_STALE, whose result
// tells the model to call again without "_approval_id". The bridge
// keeps no state between calls: the resume may reach another instance, or
// come in another session, than the call that asked for the approval.
//
// # Where the user decides: URL elicitation and approvals_resume
//
// With middleware.WithApprovalURL (the console's deep link,
// approvalconsole.Link), a result waiting for a decision carries the
// approval's URL and expiry in its envelope, its text and
// _meta["agentsafe/awaitingApproval"] {"approvalId", "approvalUrl",
// "expiresAt"}. With a result key on the engine too
// (middleware.WithResultKey):
//
//   - A client that declared URL-mode elicitation
//     (Capabilities.Elicitation.URL) gets, for a call that requested a new
//     approval, an input-required result holding one URL elicitation: the
//     deep link, elicitation id = approval id, and the request state sealed
//     under the result key. Its message starts with the preview's text
//     when the capability has a preview: the effect the user is asked to
//     have approved. A repeat of a pending request is not asked again; it
//     gets the URL result.
//   - The round that answers it (the same tool and arguments, the state,
//     the client's response) presents that approval; the engine checks
//     first that it is the caller's (the whole actor) for this procedure
//     and input, else refuses at once (APPROVAL_NOT_FOUND,
//     APPROVAL_INPUT_MISMATCH). The client's accept is never the approval:
//     it only makes the round wait, at most [WithApprovalWait] (60 s, never
//     past expiry), for a person's decision, then consume it (previewing
//     again: the state as it is once decided) and run the
//     call as a new execution whose result is the tool result. Still
//     undecided (or declined), the URL result. A client that cancels the
//     round ends the wait, with nothing run or consumed. On 2025-11-25
//     sessions, where the SDK elicits on the server's behalf, a decision
//     seen is announced with notifications/elicitation/complete. Error
//     -32042 (URL elicitation required) is never used.
//   - Every call keeps its arguments (without "_approval_id" and
//     "_idempotency_key"), sealed, with the approval it requests; the
//     "approvals_resume" tool, listed then, resumes an approved call by
//     {"approval_id"} alone, for the approval's requester only. Before it
//     opens the arguments it asks the engine who calls — an empty request
//     of the procedure, made in process like every tool call (the same
//     headers, so the service's own authentication runs) and marked as a
//     caller probe (adapter.WithCallerProbe), which runs nothing and opens
//     no execution — and compares the whole actor (id, tenant, kind, the
//     OnBehalfOf chain) with the record's requester. Anyone else gets
//     APPROVAL_NOT_FOUND and learns nothing, whatever the policies would
//     let them run; so does every id it cannot resume (unknown, another
//     audience's, a call that kept no arguments, a tool this bridge does
//     not serve). For the requester it opens the arguments and calls the
//     tool's procedure with them, so the engine digests them again and
//     consumes the approval only for the same actor, once; a pending,
//     rejected, expired or used approval is the record's own code, and a
//     used one still opens for its requester, so that a repeat with the
//     same "_idempotency_key" is replayed. Interceptors that run before
//     agentsafe's must let the empty request through to it (authentication
//     does; put request validation after agentsafe's interceptor).
//
// # Serving over HTTP
//
// [Bridge.Handler] serves the tools over MCP's streamable HTTP transport,
// each request by the protocol it asks for (its Mcp-Protocol-Version):
//
//   - 2025-11-25 (and earlier) in sessions with resumable streams: events
//     carry ids, a call's stream opens with a priming event, and a client
//     that lost its connection mid-call sends a GET with Last-Event-ID and
//     gets the rest, the tool result and its envelope included. Events are
//     kept in go-sdk's memory event store by default: at most 10 MiB across
//     all sessions, the oldest of every stream dropped first (a resume that
//     needs a dropped event fails, and the client calls again with its
//     "_idempotency_key"). Sessions and their events live in one process:
//     several instances behind a load balancer need sticky sessions (by the
//     Mcp-Session-Id header); there is no shared event store.
//   - 2026-07-28 statelessly, as go-sdk v1.8 serves it: no session, no GET
//     stream, nothing to resume (SEP-2575). A reply lost with its
//     connection is recovered by repeating the call with the same
//     "_idempotency_key", which replays the first result.
//
// Every request's Origin is checked first, on every method (the GET event
// stream, DELETE, OPTIONS and HEAD included): one that is neither the
// server's own (the scheme the request came in on, with its Host) nor
// trusted with [WithTrustedOrigins] (by default none) is refused, 403; a
// request without Origin goes on. go-sdk's Host check against DNS
// rebinding stays on.
//
// # Progress
//
// With [ProgressSink] installed on the engine, a client that sends a
// progress token gets a notifications/progress for each runtime retry of
// its call, before the result. Without it, or without a token, nothing is
// sent.
//
// # Limits
//
// The bridge speaks Connect to the handler, so the services must be
// Connect handlers (connectadapter governs them). It cannot tell before a
// call whether the handler really has the agentsafe interceptor installed:
// a result without "agentsafe/envelope" in _meta shows that it has not.
//
// The repository's README ("Adopting it, one line per framework") shows the
// bridge next to the other adapters.
package mcpadapter
