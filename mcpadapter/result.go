package mcpadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/middleware"
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

// exposedHeaders are the response headers every tool result exposes.
var exposedHeaders = []string{middleware.HeaderExecutionID, middleware.HeaderAttempts, middleware.HeaderApprovalID}

// result turns what the procedure returned into the tool result. The
// mapping is deterministic:
//
//   - completed: the response as JSON (protojson, lowerCamelCase names,
//     zero values included) in structuredContent and, for clients that only
//     read text, in one text content;
//   - anything else is isError, with the envelope's JSON form as text
//     content: status, execution id, error {code, message, retryable (safe
//     for the caller to re-invoke)}, approval id. An approval that is
//     required or pending adds a second text saying what to do next.
//
// Both carry the envelope in _meta under "agentsafe/envelope".
func (t *tool) result(res *connect.Response[dynamicpb.Message], err error, approvalID string) *mcp.CallToolResult {
	env, governed := connectadapter.ReadEnvelope(res, err)
	var header http.Header
	if err == nil {
		header = res.Header()
	} else if ce, ok := errors.AsType[*connect.Error](err); ok {
		header = ce.Meta()
	}
	meta := mcp.Meta{}
	if governed {
		if b, merr := env.MarshalJSON(); merr == nil {
			meta[metaEnvelope] = json.RawMessage(b)
		}
	}
	if h := t.b.exposed(header); len(h) > 0 {
		meta[metaHeaders] = h
	}
	if err == nil {
		out, merr := protojson.MarshalOptions{Resolver: t.b.types, EmitDefaultValues: true}.Marshal(res.Msg)
		if merr == nil {
			// protojson varies its whitespace on purpose; results are
			// compact, so that one response always reads the same.
			var buf bytes.Buffer
			if merr = json.Compact(&buf, out); merr == nil {
				out = buf.Bytes()
			}
		}
		if merr != nil {
			// The call completed; only its answer cannot be shown. Say so
			// rather than invite a re-invocation.
			out, _ = json.Marshal(map[string]string{"status": "completed", "note": "the call completed, but its response could not be encoded as JSON"})
		}
		return &mcp.CallToolResult{Meta: meta, StructuredContent: json.RawMessage(out), Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
	}
	if !governed {
		env = envelopeOf(err)
	}
	text, _ := env.MarshalJSON()
	r := &mcp.CallToolResult{Meta: meta, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
	if next := t.next(env, approvalID); next != "" {
		r.Content = append(r.Content, &mcp.TextContent{Text: next})
	}
	return r
}

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
		return fmt.Sprintf("Nothing was done: this call needs a human's approval, requested as %s. "+
			"Tell the user it awaits approval. Once it is approved, call %s again with exactly the same arguments "+
			"and %q: %q. The approval covers this call with these arguments only.", id, t.def.Name, approvalArgument, id)
	case middleware.CodeApprovalPending:
		return fmt.Sprintf("Nothing was done: approval %s is not decided yet. Once a human approves it, "+
			"call %s again with the same arguments and %q: %q.", id, t.def.Name, approvalArgument, id)
	case middleware.CodeApprovalConsumed:
		return fmt.Sprintf("Approval %s was already used: the approved call ran once, and it does not run again under this approval.", id)
	}
	return ""
}

// refusal is the result of a call the bridge refused before calling the
// procedure: nothing ran, so there is no execution and no envelope in
// _meta.
func refusal(code middleware.Code, message string) *mcp.CallToolResult {
	env := middleware.Envelope{Status: middleware.StatusFailed, Error: &middleware.EnvelopeError{Code: code, Message: message}}
	text, _ := env.MarshalJSON()
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
}

// envelopeOf describes a failure that carries no envelope because the
// engine never ran: the service's own interceptors before it refused the
// call (authentication), the handler is not where the bridge was told, or
// the caller left. The Connect code is mapped onto the agentsafe codes;
// messages of Unknown and Internal errors are concealed, since nothing
// says they were written for the caller.
func envelopeOf(err error) middleware.Envelope {
	code := middleware.CodeExecutionFailed
	status := middleware.StatusFailed
	msg := middleware.ConcealedMessage
	ce, isConnect := errors.AsType[*connect.Error](err)
	switch connect.CodeOf(err) {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded:
		return middleware.Envelope{Status: middleware.StatusCancelled, Error: &middleware.EnvelopeError{Code: middleware.CodeCancelled, Message: "the caller cancelled the call"}}
	case connect.CodeUnauthenticated:
		code = middleware.CodeUnauthenticated
	case connect.CodeInvalidArgument:
		code = middleware.CodeInvalidArgument
	case connect.CodeResourceExhausted:
		code = middleware.CodeResourceExhausted
	}
	if isConnect && ce.Message() != "" && !slices.Contains([]connect.Code{connect.CodeUnknown, connect.CodeInternal}, ce.Code()) {
		msg = ce.Message()
	}
	return middleware.Envelope{Status: status, Error: &middleware.EnvelopeError{Code: code, Message: msg}}
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
