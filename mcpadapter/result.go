package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The _meta keys of tools and tool results (see the package documentation).
const (
	metaEnvelope     = "agentsafe/envelope"
	metaHeaders      = "agentsafe/headers"
	metaProcedure    = "agentsafe/procedure"
	metaSideEffect   = "agentsafe/sideEffect"
	metaRisk         = "agentsafe/risk"
	metaApprovalType = "agentsafe/approvalType"
)

// exposedHeaders are the response headers every tool result exposes: the
// envelope's, and Retry-After (a budget's refusal says when to try again).
var exposedHeaders = []string{adapter.HeaderExecutionID, adapter.HeaderAttempts, adapter.HeaderApprovalID, adapter.HeaderCode, adapter.HeaderRetryable,
	adapter.HeaderReplayed, adapter.HeaderApprovalURL, adapter.HeaderApprovalExpires, adapter.HeaderRetryAfter}

// result turns what the procedure returned into the tool result (see the
// package documentation for the mapping).
func (t *tool) result(res *connect.Response[dynamicpb.Message], err error, approvalID string) *mcp.CallToolResult {
	env, governed := connectadapter.ReadEnvelope(res, err)
	ce, _ := errors.AsType[*connect.Error](err)
	r := &mcp.CallToolResult{IsError: err != nil}
	var header http.Header
	switch {
	case err == nil:
		header = res.Header()
		out := t.response(res.Msg)
		r.StructuredContent, r.Content = json.RawMessage(out), []mcp.Content{&mcp.TextContent{Text: string(out)}}
	case !governed:
		r = refusal(codeOf(err))
	case frameworkError(env, ce): // as Connect writes it
		w := &recorder{header: http.Header{}}
		_ = connect.NewErrorWriter().Write(w, &http.Request{Header: http.Header{}}, ce)
		r.Content = []mcp.Content{&mcp.TextContent{Text: w.body.String()}}
	default:
		text, _ := env.MarshalJSON()
		r.Content = []mcp.Content{&mcp.TextContent{Text: string(text)}}
		if next := t.next(env, approvalID); next != "" {
			r.Content = append(r.Content, &mcp.TextContent{Text: next})
		}
	}
	if ce != nil {
		header = ce.Meta()
	}
	r.Meta = mcp.Meta{}
	if governed {
		b, _ := env.MarshalJSON()
		r.Meta[metaEnvelope] = json.RawMessage(b)
	}
	if a, ok := awaiting(env); ok {
		r.Meta[metaAwaiting] = a
	}
	if h := t.b.exposed(header); len(h) > 0 {
		r.Meta[metaHeaders] = h
	}
	return r
}

// response is a completed call's response as compact JSON (protojson varies
// its whitespace on purpose; one response always reads the same here).
func (t *tool) response(msg *dynamicpb.Message) []byte {
	out, err := protojson.MarshalOptions{Resolver: t.b.types, EmitDefaultValues: true}.Marshal(msg)
	var buf bytes.Buffer
	if err == nil && json.Compact(&buf, out) == nil {
		return buf.Bytes()
	}
	// The call completed; only its answer cannot be shown. Say so rather
	// than invite a re-invocation.
	out, _ = json.Marshal(map[string]string{"status": "completed", "note": "the call completed, but its response could not be encoded as JSON"})
	return out
}

// frameworkError reports whether a governed failure is the handler's (or
// Connect's) own error, which passes unchanged: EXECUTION_FAILED without
// agentsafe's detail, which every other outcome but CANCELLED carries.
func frameworkError(env middleware.Envelope, ce *connect.Error) bool {
	return env.Error != nil && env.Error.Code == middleware.CodeExecutionFailed &&
		!slices.ContainsFunc(ce.Details(), func(d *connect.ErrorDetail) bool { return d.Type() == detailType })
}

var detailType = string((*agentsafev1.ErrorDetail)(nil).ProtoReflect().Descriptor().FullName())

// next says what a model should do after an approval outcome.
func (t *tool) next(env middleware.Envelope, approvalID string) string {
	if env.Error == nil {
		return ""
	}
	id := env.ApprovalID
	if id == "" {
		id = approvalID
	}
	switch env.Error.Code {
	case middleware.CodeApprovalRequired:
		return fmt.Sprintf("Nothing was done: this call needs a human's approval, requested as %s.%s"+
			" Tell the user it awaits approval. Once it is approved, call %s again with exactly the same arguments "+
			"and %q: %q. The approval covers this call with these arguments only.", id, decideAt(env), t.def.Name, approvalArgument, id)
	case middleware.CodeApprovalPending:
		return fmt.Sprintf("Nothing was done: approval %s is not decided yet.%s Once a human approves it, "+
			"call %s again with the same arguments and %q: %q.", id, decideAt(env), t.def.Name, approvalArgument, id)
	case middleware.CodeApprovalConsumed:
		return fmt.Sprintf("Approval %s was already used: the approved call ran once, and it does not run again under this approval.", id)
	case middleware.CodeApprovalStale:
		return fmt.Sprintf("Nothing was done: what approval %s approved has changed since (the server's preview of the effect differs now). "+
			"Tell the user; to go on, call %s again with the same arguments and without %q: a person approves the call as things are now.", id, t.def.Name, approvalArgument)
	}
	return ""
}

// refusal is the result of a call refused before the engine ran: the
// envelope's JSON form without an execution, and no envelope in _meta.
func refusal(code middleware.Code, message string) *mcp.CallToolResult {
	env := middleware.Envelope{Status: code.Status(), Error: &middleware.EnvelopeError{Code: code, Message: message}}
	text, _ := env.MarshalJSON()
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
}

// refusalCodes are the codes a refusal is read back as: those the one wire
// table ([adapter.CodeRPC]) writes as a Connect code no other code shares,
// but IDEMPOTENCY_QUOTA_EXCEEDED, which shares ResourceExhausted and
// always carries its envelope (a refusal after a claim).
var refusalCodes = []middleware.Code{middleware.CodeCancelled, middleware.CodeUnauthenticated, middleware.CodeInvalidArgument, middleware.CodeResourceExhausted}

// codeOf reads a failure without an envelope back as a refusal's code and
// message: DeadlineExceeded is the caller's own (no attempt ran to time
// out), other codes EXECUTION_FAILED; Unknown and Internal messages are
// concealed, since nothing says they were written for the caller, and so
// is Go's own text for a context that ended ("context canceled").
func codeOf(err error) (middleware.Code, string) {
	c, code, msg := connect.CodeOf(err), middleware.CodeExecutionFailed, adapter.ConcealedMessage
	for _, rc := range refusalCodes {
		if adapter.CodeRPC(rc) == uint32(c) || rc == middleware.CodeCancelled && c == connect.CodeDeadlineExceeded {
			code = rc
		}
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok && ce.Message() != "" && c != connect.CodeUnknown && c != connect.CodeInternal {
		msg = ce.Message()
	}
	if code == middleware.CodeCancelled && (msg == context.Canceled.Error() || msg == context.DeadlineExceeded.Error()) {
		msg = "the call was cancelled before it ran" // Go's text was written for no caller
	}
	return code, msg
}

// exposed returns the response headers a result shows: the agentsafe
// headers and those named with WithResponseHeaders.
func (b *Bridge) exposed(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, names := range [][]string{exposedHeaders, b.cfg.responseHeaders} {
		for _, n := range names {
			if v := h.Values(n); len(v) > 0 {
				out[n] = slices.Clone(v)
			}
		}
	}
	return out
}
